//! The tidemark viewer: one egui app, built natively (desktop) and for the web (WASM).
//!
//! The views are handed their data and never load it; loading lives in [`TidemarkApp`].

mod app;
mod attribution;
pub mod blocks;
mod cards;
#[cfg(not(target_arch = "wasm32"))]
mod follow;
pub mod lod;
pub mod timeline;
pub mod view;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use app::{EXAMPLE_NAME, EXAMPLE_RECORDING, OpenRun, Run, Tab, TidemarkApp, compare_text};
