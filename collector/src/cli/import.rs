//! `collector import snapshot.pickle --out run.msgpack`.

use std::path::PathBuf;

use collector::open::open_snapshot;
use collector::recording::write_file;

use super::failure::{Answer, Failure};

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
pub fn import(args: &ImportArgs) -> Result<Answer, Failure> {
    let snapshot = open_snapshot(&args.file)?;
    let recording = snapshot.to_recording();
    drop(snapshot);
    write_file(&args.out, &recording).map_err(|source| Failure::Write {
        path: args.out.clone(),
        source,
    })?;
    super::out(format_args!(
        "collector: wrote {} ({} allocator readings, {} phase edges, {} OOMs)\n",
        args.out.display(),
        recording.allocator.len(),
        recording.phases.len(),
        recording.ooms.len()
    ));
    Ok(Answer::Done)
}
