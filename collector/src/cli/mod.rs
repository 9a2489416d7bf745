//! The command line: the clap types of every command, and one file per command (`record` is
//! the [`crate::record`] module; `report`, `check`, `diff`, `import` and `serve` are here, the
//! server itself in [`crate::serve`]).

mod check;
mod command;
mod diff;
mod diff_picture;
mod failure;
mod flame;
mod import;
mod loaded;
mod memory_picture;
mod moments;
mod picture;
mod ranks;
mod report;
mod report_json;
mod report_text;
mod run_moments;
mod serve;

pub use self::command::main;
pub(crate) use self::command::out;
