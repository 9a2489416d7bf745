//! The records a recording is made of, as they are written to and read from the file.
//!
//! Every struct here is a MessagePack map with the field names shown. Readers ignore fields they
//! do not know, and fields added in later minor versions carry a default, so that a new field never
//! breaks an old reader. See `collector/FORMAT.md`.

use serde::{Deserialize, Serialize};

use super::census::Census;
use super::stall::Stall;

/// The first bytes of every recording.
pub const MAGIC: &[u8; 8] = b"TIDEMARK";

/// The major version of the format this crate writes. A reader refuses a higher major version.
pub const FORMAT_MAJOR: u32 = 1;

/// The minor version of the format this crate writes. Minor versions only add fields and records.
pub const FORMAT_MINOR: u32 = 8;

/// What the collector knew when it started. Always the first record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Major version of the format; a reader refuses a higher one.
    pub format_major: u32,
    /// Minor version of the format; a reader accepts any minor version of its major.
    pub format_minor: u32,
    /// Version of the tidemark that wrote the file.
    pub tool_version: String,
    /// Wall-clock time of the start, in nanoseconds since the Unix epoch. All other times in the
    /// file are nanoseconds after this instant, on the monotonic clock.
    pub start_unix_ns: u64,
    /// Host name of the machine the job ran on.
    pub host: String,
    /// The job's command line, or the attached process' command line.
    pub command: Vec<String>,
    /// Process id of the job's root process, if known.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The GPUs that were recorded.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Interval between device samples, in nanoseconds; `None` when devices were not sampled.
    #[serde(default)]
    pub device_interval_ns: Option<u64>,
    /// Interval between host-memory samples, in nanoseconds; `None` when not sampled.
    #[serde(default)]
    pub host_interval_ns: Option<u64>,
}

/// A file of PyTorch's own that a recording was made from (its command says which), not a job
/// the collector watched: no probe, no NVML, no end of the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imported {
    /// A profiler trace (Kineto's chrome trace JSON).
    Trace,
    /// A memory timeline (`export_memory_timeline`).
    MemoryTimeline,
    /// A memory snapshot (`torch.cuda.memory._dump_snapshot`).
    Snapshot,
}

impl Imported {
    /// The command a recording made from such a file names (its `header.command`'s first word).
    pub const fn command(self) -> &'static str {
        match self {
            Self::Trace => "torch.profiler",
            Self::MemoryTimeline => "torch.profiler export_memory_timeline",
            Self::Snapshot => "torch.cuda.memory._dump_snapshot",
        }
    }

    /// What the file is, in the words of a report.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Trace => "the profiler trace",
            Self::MemoryTimeline => "the memory timeline",
            Self::Snapshot => "the snapshot",
        }
    }
}

impl Header {
    /// What file of PyTorch's own the recording was made from, if it was.
    pub fn imported(&self) -> Option<Imported> {
        let first = self.command.first()?;
        [
            Imported::Trace,
            Imported::MemoryTimeline,
            Imported::Snapshot,
        ]
        .into_iter()
        .find(|i| i.command() == first)
    }

    /// A header for the current format version, with no devices and no sampling intervals.
    pub fn new(start_unix_ns: u64, host: String, command: Vec<String>) -> Self {
        Self {
            format_major: FORMAT_MAJOR,
            format_minor: FORMAT_MINOR,
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            start_unix_ns,
            host,
            command,
            pid: None,
            devices: Vec::new(),
            device_interval_ns: None,
            host_interval_ns: None,
        }
    }

    /// The device that is pinned host memory, where the run was imported from a snapshot that
    /// recorded it (its device named so).
    pub fn pinned_host(&self) -> Option<u32> {
        self.devices
            .iter()
            .find(|d| d.name == crate::format::PINNED_HOST)
            .map(|d| d.index)
    }

    /// How device `index` is named to a person: `cuda:N`, or pinned host memory.
    pub fn device_name(&self, index: u32) -> String {
        crate::format::device_name(index, self.pinned_host())
    }
}

/// One GPU, as the job sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// The index the job uses (`cuda:N`, after `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    /// Product name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// The driver's UUID ("GPU-…"), which identifies the GPU across tools.
    pub uuid: String,
    /// Device memory, in bytes.
    pub total_bytes: u64,
}

/// What a sampled series measures. Unknown kinds from newer writers are kept by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum SeriesKind {
    /// Device memory in use on the whole GPU (NVML `used`), bytes.
    DeviceUsed,
    /// Device memory reserved by the driver and firmware (NVML v2 `reserved`), bytes.
    DeviceReserved,
    /// Device memory used by one process of the job (NVML running processes), bytes.
    ProcessDevice,
    /// Resident host memory of the job's whole process tree, bytes.
    HostRss,
    /// Bytes allocated in a device's private pools (CUDA graphs, `torch.cuda.MemPool`), from a
    /// snapshot's trace: part of what the allocated curve counts.
    PrivatePools,
    /// A kind this reader does not know.
    Other(String),
}

impl SeriesKind {
    /// The name used in the file.
    pub fn as_str(&self) -> &str {
        match self {
            Self::DeviceUsed => "device_used",
            Self::DeviceReserved => "device_reserved",
            Self::ProcessDevice => "process_device",
            Self::HostRss => "host_rss",
            Self::PrivatePools => "private_pools",
            Self::Other(name) => name,
        }
    }
}

impl From<String> for SeriesKind {
    fn from(name: String) -> Self {
        match name.as_str() {
            "device_used" => Self::DeviceUsed,
            "device_reserved" => Self::DeviceReserved,
            "process_device" => Self::ProcessDevice,
            "host_rss" => Self::HostRss,
            "private_pools" => Self::PrivatePools,
            _ => Self::Other(name),
        }
    }
}

impl From<SeriesKind> for String {
    fn from(kind: SeriesKind) -> Self {
        match kind {
            SeriesKind::Other(name) => name,
            known => known.as_str().to_owned(),
        }
    }
}

/// Names one sampled series: what it measures, and on which device or process.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeriesKey {
    /// What the series measures.
    pub kind: SeriesKind,
    /// The device index, for device series.
    #[serde(default)]
    pub device: Option<u32>,
    /// The process id, for per-process series.
    #[serde(default)]
    pub pid: Option<u32>,
}

impl SeriesKey {
    /// A series with neither device nor process.
    pub fn new(kind: SeriesKind) -> Self {
        Self {
            kind,
            device: None,
            pid: None,
        }
    }

    /// A series of one device.
    pub fn device(kind: SeriesKind, device: u32) -> Self {
        Self {
            kind,
            device: Some(device),
            pid: None,
        }
    }
}

/// A phase of a training step. Custom names are kept as given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Phase {
    /// The model's forward pass in training.
    Forward,
    /// The backward pass.
    Backward,
    /// The optimizer step.
    Optimizer,
    /// Evaluation: forward with gradients disabled, or with the model in eval mode.
    Eval,
    /// A phase the user named.
    Custom(String),
}

impl Phase {
    /// The name used in the file and shown to users.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Forward => "forward",
            Self::Backward => "backward",
            Self::Optimizer => "optimizer",
            Self::Eval => "eval",
            Self::Custom(name) => name,
        }
    }
}

impl Phase {
    /// A notebook cell's run, as the probe names it (`cell [12]: train(model, 3)`): its execution
    /// count and its first line. Cells are held apart from the phases ([`Recording::cells`]): a
    /// cell holds phases, it is not one.
    ///
    /// [`Recording::cells`]: crate::recording::Recording::cells
    pub fn cell(&self) -> Option<(u64, &str)> {
        let Self::Custom(name) = self else {
            return None;
        };
        let (count, source) = name.strip_prefix("cell [")?.split_once(']')?;
        let source = source.strip_prefix(": ").unwrap_or(source);
        Some((count.parse().ok()?, source))
    }
}

impl From<String> for Phase {
    fn from(name: String) -> Self {
        match name.as_str() {
            "forward" => Self::Forward,
            "backward" => Self::Backward,
            "optimizer" => Self::Optimizer,
            "eval" => Self::Eval,
            _ => Self::Custom(name),
        }
    }
}

impl From<Phase> for String {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Custom(name) => name,
            known => known.as_str().to_owned(),
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a phase edge opens or closes the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Edge {
    /// The phase starts.
    Begin,
    /// The phase ends.
    End,
}

/// Where a probe message came from: the process and its distributed rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// Process id of the sender.
    pub pid: u32,
    /// Distributed rank (`RANK`, else `LOCAL_RANK`), if the job has one.
    #[serde(default)]
    pub rank: Option<u32>,
}

/// A phase starting or ending, sent by the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseEdge {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Begin or end.
    pub edge: Edge,
    /// Which phase.
    pub phase: Phase,
    /// The training step the phase belongs to, if known.
    #[serde(default)]
    pub step: Option<u64>,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// The sending process' C heap in use at this edge (glibc `mallinfo2`: `uordblks + hblkhd`),
    /// read by the probe; absent where it cannot be read (another libc) and before format 1.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_heap: Option<u64>,
    /// The sending process' resident memory at this edge, read by the probe; absent where
    /// `/proc` cannot be read and before format 1.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_rss: Option<u64>,
}

/// The PyTorch caching allocator's numbers for one device, sent by the probe at phase edges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorSample {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// The CUDA device index in the sending process.
    pub device: u32,
    /// Bytes held by live tensors (`allocated_bytes.all.current`).
    pub allocated: u64,
    /// Bytes the allocator holds from the driver (`reserved_bytes.all.current`).
    pub reserved: u64,
    /// Highest `allocated` since the last peak reset (`allocated_bytes.all.peak`).
    pub peak: u64,
    /// Bytes in active blocks (`active_bytes.all.current`).
    #[serde(default)]
    pub active: u64,
    /// Bytes in inactive, split blocks: unusable slack (`inactive_split_bytes.all.current`).
    #[serde(default)]
    pub inactive_split: u64,
    /// Times the allocator freed its cache and retried (`num_alloc_retries`).
    #[serde(default)]
    pub retries: u64,
    /// Out-of-memory errors the allocator raised (`num_ooms`).
    #[serde(default)]
    pub ooms: u64,
}

/// A CUDA out-of-memory error, parsed from the job's stderr. Sizes are in bytes; a number the
/// message did not carry is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Oom {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// The device named by the message.
    #[serde(default)]
    pub device: Option<u32>,
    /// The distributed rank named by a `[rankN]:` prefix.
    #[serde(default)]
    pub rank: Option<u32>,
    /// "Tried to allocate …".
    #[serde(default)]
    pub tried_bytes: Option<u64>,
    /// "total capacity of …".
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    /// "… is free".
    #[serde(default)]
    pub free_bytes: Option<u64>,
    /// "… allocated by PyTorch".
    #[serde(default)]
    pub allocated_bytes: Option<u64>,
    /// "… reserved by PyTorch but unallocated".
    #[serde(default)]
    pub reserved_unallocated_bytes: Option<u64>,
    /// "… with … allocated in private pools (e.g., CUDA Graphs)" (since 2.4): the part of the
    /// allocated bytes in CUDA graphs' pools and `torch.cuda.MemPool`s, which only their own
    /// graphs or pool contexts can reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_pools_bytes: Option<u64>,
    /// "Including non-PyTorch memory, this process has … memory in use" (since 1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_bytes: Option<u64>,
    /// The other processes' memory on the device: the sum of "Process N has … memory in use"
    /// (since 1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_processes_bytes: Option<u64>,
    /// The message as printed.
    pub message: String,
}

/// A PyTorch memory snapshot the probe dumped (`collector --history`): at an out-of-memory error
/// or at the end of the job, one file per process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFile {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Who dumped it.
    #[serde(flatten)]
    pub origin: Origin,
    /// Why: `oom` or `end`.
    pub reason: String,
    /// The file, as the probe wrote it (absolute).
    pub path: String,
}

/// One device's memory split by what holds it, read by the probe at a step's start (since 1.2):
/// the root models' parameters, their gradients and each optimizer's state, each storage counted
/// once (sharded tensors by their local size); the rest is what the job keeps besides
/// (activations, caches, leaks).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Categories {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// The step that starts.
    #[serde(default)]
    pub step: Option<u64>,
    /// The CUDA device index; `None` for host memory (tensors on the CPU).
    #[serde(default)]
    pub device: Option<u32>,
    /// Bytes of parameters.
    pub parameters: u64,
    /// Bytes of gradients (`.grad` of the parameters).
    pub gradients: u64,
    /// Bytes of gradients at the end of a step (after its optimizer step): what
    /// `zero_grad(set_to_none=True)` freed before this step is this minus `gradients`. Read at
    /// the end of each of the first 8 steps, then of every 64th (the last reading in between).
    #[serde(default)]
    pub gradients_at_last_end: Option<u64>,
    /// Bytes of optimizer state, one number per optimizer in the order they first stepped.
    #[serde(default)]
    pub optimizer_state: Vec<u64>,
    /// All the memory of this kind at that moment: PyTorch's allocated bytes on the device, or the
    /// process' C heap in use for the host; `None` when unknown.
    #[serde(default)]
    pub total: Option<u64>,
}

impl Categories {
    /// The optimizers' state together.
    pub fn optimizer_total(&self) -> u64 {
        self.optimizer_state.iter().sum()
    }

    /// What is neither parameters, gradients nor optimizer state, when the total is known.
    pub fn rest(&self) -> Option<u64> {
        let counted = self.parameters + self.gradients + self.optimizer_total();
        self.total.map(|total| total.saturating_sub(counted))
    }
}

/// What a backward freed of the tensors the forwards before it saved for it (their activations),
/// measured by the probe on a sample of steps (since 1.4). Sent just before the backward's end
/// edge. A backward frees the forward's activations and makes the gradients; this number tells
/// the two apart, so that a backward that keeps what it made is not read as a forward that kept
/// its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFreed {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// The step the backward belongs to.
    #[serde(default)]
    pub step: Option<u64>,
    /// The CUDA device of the storages; `None` for host memory (tensors on the CPU).
    #[serde(default)]
    pub device: Option<u32>,
    /// Bytes of saved storages alive when the backward began and freed when it ended.
    pub bytes: u64,
}

/// Steps whose phases the probe did not observe (since 1.5): a run of consecutive steps between
/// two that it did. As `TIDEMARK_OBSERVE_ONE_IN` says (N, or `auto`, the default; 1: every step)
/// the probe observes every step of the first 100, every step that measures saved tensors and every
/// eval, and of the other steps only one in N. Sent when the probe observes a step again, and at
/// exit. The time across the span is not between phases: the job ran steps there that the probe
/// did not see.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unobserved {
    /// Nanoseconds after the start when observing resumed: the end of the span.
    pub t_ns: u64,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// Nanoseconds after the start when the span began: the end of the last observed step.
    pub since_ns: u64,
    /// The number of the first step not observed, when the steps are numbered.
    #[serde(default)]
    pub first_step: Option<u64>,
    /// How many steps went unobserved (at least one).
    pub steps: u64,
}

/// The job's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Exit code, when the job exited.
    #[serde(default)]
    pub code: Option<i32>,
    /// Signal number, when the job was killed by a signal.
    #[serde(default)]
    pub signal: Option<i32>,
    /// When the job failed: the last lines it wrote to stderr, oldest first (since 1.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    /// What the kernel said of the job's memory after it ended: its cgroups' limits and OOM
    /// kills, the host's, the kernel log's (since 1.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<super::kernel::KernelMemory>,
}

/// Probe messages the collector lost or refused since the previous such record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Messages the probe could not send (its socket buffer was full).
    #[serde(default)]
    pub dropped: u64,
    /// Messages that could not be parsed.
    #[serde(default)]
    pub malformed: u64,
    /// Messages from another user, refused.
    #[serde(default)]
    pub refused: u64,
}

/// A free-text remark, e.g. "NVML not found: device memory not recorded".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// The remark.
    pub text: String,
}

/// The last record: totals that let a reader know the file is complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Records written before this one, the header included.
    pub records: u64,
    /// Samples written, summed over all series.
    pub samples: u64,
    /// Probe messages dropped, malformed or refused, in total.
    #[serde(default)]
    pub dropped: u64,
}

/// Samples taken at the same instants, one column per series.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Sample times, nanoseconds after the start, not decreasing.
    pub times_ns: Vec<u64>,
    /// One column per series, each as long as `times_ns`.
    pub columns: Vec<Column>,
}

/// One series' values in a [`Chunk`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Which series.
    pub series: SeriesKey,
    /// The values, one per time. Where `valid` says a value is missing, its value is meaningless.
    pub values: Vec<u64>,
    /// Which values were measured; `None` when all were. A missing value means "unavailable",
    /// never zero.
    pub valid: Option<Vec<bool>>,
}

impl Chunk {
    /// The number of samples, summed over the columns (missing values not counted).
    pub fn sample_count(&self) -> u64 {
        self.columns
            .iter()
            .map(|column| match &column.valid {
                None => column.values.len() as u64,
                Some(valid) => valid.iter().filter(|&&v| v).count() as u64,
            })
            .sum()
    }
}

/// One record of a recording.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// Samples.
    Chunk(Chunk),
    /// Allocator numbers from the probe.
    Allocator(AllocatorSample),
    /// A phase edge from the probe.
    Phase(PhaseEdge),
    /// Allocator numbers, many at once, as format 1.3 stores them (by column).
    Allocators(Vec<AllocatorSample>),
    /// Phase edges, many at once, as format 1.3 stores them (by column).
    Phases(Vec<PhaseEdge>),
    /// An out-of-memory error.
    Oom(Oom),
    /// The job ended.
    Exit(Exit),
    /// Probe messages lost or refused.
    Dropped(Dropped),
    /// A remark.
    Note(Note),
    /// A PyTorch memory snapshot the probe dumped next to the recording (since 1.1).
    Snapshot(SnapshotFile),
    /// Memory by category at a step's start (since 1.2).
    Categories(Categories),
    /// A census of who holds the live tensors (since 1.2).
    Census(Census),
    /// What a backward freed of what the forwards saved for it (since 1.4).
    SavedFreed(SavedFreed),
    /// Steps whose phases the probe did not observe (since 1.5).
    Unobserved(Unobserved),
    /// A stall, and the stacks the collector asked for (since 1.8).
    Stall(Stall),
    /// The end of the recording.
    End(End),
}
