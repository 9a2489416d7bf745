//! tidemark's collector library: the recording format (writer and reader) and, behind the `cli`
//! feature, the `collector` binary that records a job.
//!
//! With `default-features = false` this crate has no process, NVML or CLI code and builds for
//! `wasm32-unknown-unknown`, so the web viewer reads recordings with the same code.

pub mod analysis;
pub mod compare;
pub mod format;
pub mod headline;
pub mod oom;
pub mod open;
pub mod palette;
pub mod plot;
pub mod recording;
pub mod snapshot;
pub mod trace;
