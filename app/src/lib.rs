//! The tidemark viewer: one egui app, built natively (desktop) and for the web (WASM).
//!
//! The views are handed their data and never load it; loading lives in [`TidemarkApp`].

mod app;

pub use app::{EXAMPLE_RECORDING, Run, TidemarkApp};
