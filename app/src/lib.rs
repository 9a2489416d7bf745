//! The tidemark viewer: one egui app, built natively (desktop) and for the web (WASM).
//!
//! The views are handed their data and never load it; files come in through `intake`, and the
//! app ([`TidemarkApp`]) holds the open runs.

mod app;
mod attribution;
pub mod blocks;
mod cards;
mod compare;
pub mod diff;
pub mod envelope;
pub mod flame;
mod follow;
mod intake;
mod memaxes;
pub mod memtimeline;
mod picture;
mod run;
pub mod segtimeline;
pub mod style;
pub mod timeline;
pub mod view;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use app::{Tab, TidemarkApp};
/// The curves' levels of detail, from the library (the exported pictures thin by them too).
pub use collector::plot::lod;
pub use compare::compare_text;
pub use follow::Fetch;
pub use run::{
    Arriving, EXAMPLE_NAME, EXAMPLE_RECORDING, OpenRun, Run, TAB_FETCH_MOST, TAB_FETCH_WINDOW,
    TabFile, WEB_MAX_RECORDING, WEB_MAX_SNAPSHOT, WEB_MAX_SNAPSHOT_HELD, too_big_for_a_tab,
};
