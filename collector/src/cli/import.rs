//! `collector import snapshot.pickle --out run.msgpack`.

use std::path::PathBuf;
use std::process::ExitCode;

use collector::open::open_snapshot;
use collector::recording::write_file;

/// Arguments of `collector import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`).
    pub file: PathBuf,
    /// Where to write the recording.
    #[arg(long, short, value_name = "PATH")]
    pub out: PathBuf,
}

/// `collector import snapshot.pickle --out run.msgpack`: the snapshot's curves, OOMs and phases
/// as a recording (the frames and blocks stay in the snapshot: open it for those).
pub fn import(args: &ImportArgs) -> ExitCode {
    let snapshot = match open_snapshot(&args.file) {
        Ok(s) => s,
        Err(err) => {
            eprintln!("collector: {err}");
            return ExitCode::from(2);
        }
    };
    let recording = snapshot.to_recording();
    drop(snapshot);
    match write_file(&args.out, &recording) {
        Ok(()) => {
            super::out(format_args!(
                "collector: wrote {} ({} allocator readings, {} phase edges, {} OOMs)\n",
                args.out.display(),
                recording.allocator.len(),
                recording.phases.len(),
                recording.ooms.len()
            ));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("collector: cannot write {}: {err}", args.out.display());
            ExitCode::from(2)
        }
    }
}
