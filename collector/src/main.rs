//! `collector`: records how a job uses GPU and host memory.

fn main() -> std::process::ExitCode {
    eprintln!("collector: not yet implemented");
    std::process::ExitCode::from(2)
}
