//! `collector serve DIR`: the runs in a folder and the web viewer over HTTP, for a machine
//! reached by `ssh -L` (as `tensorboard --logdir` is used). Read-only; nothing outside the folder
//! is ever served; files are streamed, never read whole.
//!
//! The server is `tiny_http`: blocking, small to compile, a thread per request (a viewer makes a
//! few requests a second); an async stack (axum, tokio) would add far more to the build than
//! this needs.
//!
//! Routes: `/` (the page listing the runs), `/api/runs` (the list as JSON), `/runs/NAME` (a run's
//! bytes, with `Range`; a folder run is served as the one recording it reads as),
//! `/api/runs/NAME/report` (`collector report --json`), `/viewer/…` (the web viewer's files).
//! With a token every request carries it: `Authorization: Bearer T`, `?token=T` (which also sets
//! a cookie, so that the viewer's own requests carry it), or that cookie.

pub mod http;
pub mod page;
pub mod runs;
mod server;

pub use self::server::{Config, serve};
