//! The files PyTorch's profiler writes, read as recordings: Kineto chrome traces
//! (`torch.profiler.profile(profile_memory=True)`, `*.pt.trace.json`, [`chrome`]) and the memory
//! timelines of `export_memory_timeline` (`*.raw.json.gz` and `*.json`, [`timeline`]), gzipped,
//! zstd-compressed or not. What a file is, is told from its first bytes ([`json_kind`],
//! [`Compression::of`]); no I/O
//! here (the viewer reads the same bytes in a browser tab).

pub mod chrome;
mod events;
mod loose;
mod operators;
mod read;
pub mod timeline;

pub(crate) use self::read::json_error;
pub use self::read::{
    Compression, GZIP_MAGIC, JsonKind, TraceError, ZSTD_MAGIC, decompress, decompress_start,
    is_compressed, json_kind, read_from, read_trace,
};
