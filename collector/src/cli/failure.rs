//! How a command ends, in one place: what it answered (exit 0, or 1 when `check` found what
//! fails), or why it could not answer — printed once, behind the command's name, with exit 2.
//! The job wrapped by `collector -- …` is not a command here: its own exit status is passed on.

use std::path::PathBuf;
use std::process::ExitCode;

use collector::open::OpenError;

/// What a command answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// It did what it was asked, and nothing it judged fails (exit 0).
    Done,
    /// `check` found what fails the run (exit 1); what it found is printed.
    Fails,
}

/// Why a command could not answer (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// An input that cannot be opened or read as what was asked for.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Several inputs that cannot be read, each with its reason (one line each).
    #[error("{}", .0.join("\n"))]
    Inputs(Vec<String>),
    /// An output that cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Inputs read, or options given, that cannot be judged or compared as asked; says why.
    #[error("{0}")]
    Cannot(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Self::Cannot(why)
    }
}

/// The one map from how a command ended to its exit status; why it failed is printed behind
/// `command` (`collector`, `collector check` …), a line per reason.
pub fn exit(command: &str, ended: Result<Answer, Failure>) -> ExitCode {
    match ended {
        Ok(Answer::Done) => ExitCode::SUCCESS,
        Ok(Answer::Fails) => ExitCode::from(1),
        Err(Failure::Inputs(reasons)) => {
            for reason in reasons {
                eprintln!("{command}: {reason}");
            }
            ExitCode::from(2)
        }
        Err(why) => {
            eprintln!("{command}: {why}");
            ExitCode::from(2)
        }
    }
}
