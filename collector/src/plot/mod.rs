//! What a plot of a run draws, decided once for the viewer and the exported pictures: its
//! curves (which, in which colour, with their levels of detail), their thinning to pixel columns,
//! the phase bands behind them, and the events marked on them. The viewer draws them with egui, `collector report --svg`
//! with plotters; neither picks or thins curves on its own.

mod bands;
mod curves;
mod events;
pub mod lod;

pub use bands::{Band, phase_bands, running_at, spans_in};
pub use curves::{Trace, TraceKind, grow, traces, traces_for_one_picture};
pub use events::{Event, EventKind, events};
pub use lod::{BASELINE_POINTS, Levels, LodSeries, Shown, thin_min_max};
