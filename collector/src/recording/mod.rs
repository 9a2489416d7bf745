//! The recording: its data model, the streaming writer, and the reader.
//!
//! A recording is the magic bytes `TIDEMARK` followed by MessagePack records, each a two-element
//! array `[kind, body]`: first the header, then samples, probe records and events as they happen,
//! and last an end record with totals. `collector/FORMAT.md` describes it byte by byte.

mod census;
pub mod codec;
mod columns;
mod held;
mod io;
mod kernel;
mod merge;
mod model;
mod read;
mod stall;
mod values;
pub mod wire;
mod write;

pub use census::{Census, Holder, ObjectContainer, ObjectGrowth, TypeCount};
pub use columns::{AllocatorReadings, EdgeKind, Iter as RecordIter, PhaseEdges, Records};
pub(crate) use held::ChunkBuffers;
pub use held::{Recording, Series};
pub use io::{FileError, Follower, read_recording, write_to};
#[cfg(not(target_arch = "wasm32"))]
pub use io::{read_file, write_file};
pub use kernel::{CgroupMemory, KernelKill, KernelMemory, TreeProcess};
pub use merge::{Merged, are_nodes_of_one_run, merge};
pub use model::{
    AllocatorSample, Categories, Chunk, Column, Device, Dropped, Edge, End, Exit, FORMAT_MAJOR,
    FORMAT_MINOR, Header, Imported, MAGIC, Note, Oom, Origin, Phase, PhaseEdge, Record, SavedFreed,
    SeriesKey, SeriesKind, SnapshotFile, Unobserved,
};
pub(crate) use read::describe_start;
pub use read::{ReadError, Reader};
pub use stall::{StackFrame, Stall, StalledProcess, ThreadStack};
pub use values::Values;
pub use write::Writer;
