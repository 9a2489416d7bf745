//! Parses PyTorch's CUDA out-of-memory messages, in every form PyTorch has printed them.
//!
//! - the sentence form (PyTorch ≥ 2.1): "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a
//!   total capacity of 79.15 GiB of which 1.27 GiB is free. Process 4242 has 1.20 GiB memory in
//!   use. Including non-PyTorch memory, this process has 77.86 GiB memory in use. Of the allocated
//!   memory 76.50 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but
//!   unallocated." (2.1 wrote "capacty"; since 2.4 "… allocated by PyTorch, with 0 bytes allocated
//!   in private pools (e.g., CUDA Graphs), and …"; ROCm builds say "HIP out of memory");
//! - the parenthesised form (1.4 to 2.0): "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0;
//!   7.79 GiB total capacity; 6.49 GiB already allocated; 3.56 MiB free; 6.56 GiB reserved in total
//!   by PyTorch)", with "14.20 GiB allowed;" before the reserved total under a memory fraction;
//! - the first parenthesised form (1.0 to 1.3): "… 6.64 GiB already allocated; 21.00 MiB free;
//!   150.86 MiB cached)", where "cached" is the cache's unallocated part;
//! - any of them with a `[rankN]:` prefix (torchrun);
//! - "CUDA error: out of memory" (from the CUDA runtime) and, before 1.0, "cuda runtime error (2) :
//!   out of memory": no numbers;
//! - and the out-of-memory errors of others than PyTorch's caching allocator ([`OomSource`]):
//!   cuBLAS's `CUBLAS_STATUS_ALLOC_FAILED`, cuDNN's `CUDNN_STATUS_ALLOC_FAILED`, NCCL's
//!   `Cuda failure 'out of memory'`, and the `cudaMallocAsync` backend's "would exceed allowed
//!   memory": no numbers either, but who could not allocate.

use std::sync::OnceLock;

use regex_lite::Regex;

use crate::recording::Oom;

const SIZE: &str = r"([0-9]+(?:\.[0-9]+)?) ?(B|bytes|KiB|MiB|GiB|TiB)";

struct Patterns {
    rank: Regex,
    tried: Regex,
    device_new: Regex,
    capacity_new: Regex,
    free_new: Regex,
    allocated_new: Regex,
    reserved_unallocated_new: Regex,
    private_pools_new: Regex,
    device_old: Regex,
    capacity_old: Regex,
    allocated_old: Regex,
    free_old: Regex,
    reserved_old: Regex,
    cached_old: Regex,
    allowed_old: Regex,
    this_process: Regex,
    other_process: Regex,
    device_async: Regex,
    async_allocated: Regex,
    async_requested: Regex,
    async_limit: Regex,
    async_free: Regex,
    async_more: Regex,
}

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let re = |pattern: &str| match Regex::new(&pattern.replace("SIZE", SIZE)) {
            Ok(re) => re,
            Err(err) => unreachable!("a fixed pattern is valid: {err}"),
        };
        Patterns {
            rank: re(r"^\s*\[rank([0-9]+)\]:"),
            tried: re(r"Tried to allocate SIZE"),
            device_new: re(r"GPU ([0-9]+) has a total capac"),
            capacity_new: re(r"total capac(?:i)?ty of SIZE"),
            free_new: re(r"of which SIZE is free"),
            allocated_new: re(r"SIZE is allocated by PyTorch"),
            reserved_unallocated_new: re(r"SIZE is reserved by PyTorch but unallocated"),
            private_pools_new: re(r"with SIZE allocated in private pools"),
            device_old: re(r"\(GPU ([0-9]+);"),
            capacity_old: re(r"SIZE total capacity"),
            allocated_old: re(r"SIZE already allocated"),
            free_old: re(r"SIZE free"),
            reserved_old: re(r"SIZE reserved in total by PyTorch"),
            cached_old: re(r"SIZE cached\)"),
            allowed_old: re(r"SIZE allowed;"),
            this_process: re(r"this process has SIZE memory in use"),
            other_process: re(r"Process [0-9]+ has SIZE memory in use"),
            device_async: re(r"Allocation on device ([0-9]+) would exceed"),
            async_allocated: re(r"^\s*Currently allocated\s*: SIZE"),
            async_requested: re(r"^\s*Requested\s*: SIZE"),
            async_limit: re(r"^\s*Device limit\s*: SIZE"),
            async_free: re(r"^\s*Free \(according to CUDA\)\s*: SIZE"),
            async_more: re(
                r"^\s*(PyTorch limit \(set by user-supplied memory fraction\)\s*|: .*)$",
            ),
        }
    })
}

fn size(re: &Regex, line: &str) -> Option<u64> {
    let caps = re.captures(line)?;
    let number: f64 = caps.get(1)?.as_str().parse().ok()?;
    let unit = match caps.get(2)?.as_str() {
        "B" | "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => 1024.0 * 1024.0 * 1024.0 * 1024.0,
    };
    Some((number * unit).round() as u64)
}

/// The sum of every match of `re` (a SIZE pattern); `None` when there is none.
fn sizes(re: &Regex, line: &str) -> Option<u64> {
    let mut total = None;
    let mut rest = line;
    while let Some(m) = re.find(rest) {
        if let Some(bytes) = size(re, m.as_str()) {
            *total.get_or_insert(0) += bytes;
        }
        rest = &rest[m.end()..];
    }
    total
}

fn index(re: &Regex, line: &str) -> Option<u32> {
    re.captures(line)?.get(1)?.as_str().parse().ok()
}

/// Who could not allocate, told from the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomSource {
    /// PyTorch's caching allocator (CUDA or ROCm): "CUDA out of memory. Tried to allocate …".
    Allocator,
    /// The `cudaMallocAsync` backend (`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`).
    AsyncAllocator,
    /// The CUDA runtime itself, outside PyTorch's cache: "CUDA error: out of memory" (a CUDA
    /// context that could not be made, an extension's own `cudaMalloc`).
    Runtime,
    /// cuBLAS, making its handle or workspace.
    Cublas,
    /// cuDNN, allocating its workspace.
    Cudnn,
    /// NCCL, allocating its buffers.
    Nccl,
}

/// The marks of each source's message, most specific first.
const SOURCES: [(&str, OomSource); 10] = [
    ("CUBLAS_STATUS_ALLOC_FAILED", OomSource::Cublas),
    ("CUDNN_STATUS_ALLOC_FAILED", OomSource::Cudnn),
    ("Cuda failure 'out of memory'", OomSource::Nccl),
    ("Cuda failure 2 'out of memory'", OomSource::Nccl),
    ("would exceed allowed memory", OomSource::AsyncAllocator),
    ("CUDA out of memory", OomSource::Allocator),
    ("HIP out of memory", OomSource::Allocator),
    ("CUDA error: out of memory", OomSource::Runtime),
    ("HIP error: out of memory", OomSource::Runtime),
    ("cuda runtime error (2) : out of memory", OomSource::Runtime),
];

impl OomSource {
    /// Who could not allocate in `message`, when it is an out-of-memory error.
    pub fn of(message: &str) -> Option<Self> {
        SOURCES
            .iter()
            .find(|(mark, _)| message.contains(mark))
            .map(|&(_, source)| source)
    }

    /// Who it is, as a title names it ("Out of memory in cuBLAS"); `None` for PyTorch's caching
    /// allocator, the usual one.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::Allocator => None,
            Self::AsyncAllocator => Some("cudaMallocAsync"),
            Self::Runtime => Some("the CUDA runtime"),
            Self::Cublas => Some("cuBLAS"),
            Self::Cudnn => Some("cuDNN"),
            Self::Nccl => Some("NCCL"),
        }
    }

    /// What failed, said as evidence.
    pub fn what_failed(self) -> Option<&'static str> {
        match self {
            Self::Allocator => None,
            Self::AsyncAllocator => Some(
                "the allocation that failed was the cudaMallocAsync backend's: its pool could not grow within the device's memory (or the memory fraction's limit)",
            ),
            Self::Runtime => Some(
                "the allocation that failed was the CUDA runtime's, outside PyTorch's cache: a CUDA context that could not be made, or a library's or extension's own cudaMalloc",
            ),
            Self::Cublas => Some(
                "the allocation that failed was cuBLAS's (CUBLAS_STATUS_ALLOC_FAILED), making its handle or workspace: outside PyTorch's cache, so what the cache held, even unused, left it no room",
            ),
            Self::Cudnn => Some(
                "the allocation that failed was cuDNN's (CUDNN_STATUS_ALLOC_FAILED), for an algorithm's workspace: outside the tensors, often the first sign that the step's peak barely fits",
            ),
            Self::Nccl => Some(
                "the allocation that failed was NCCL's (Cuda failure 'out of memory'), for its communication buffers: outside PyTorch's cache, so what the cache held, even unused, left it no room",
            ),
        }
    }

    /// What to try, for a source other than the caching allocator.
    pub fn hints(self) -> Vec<String> {
        let hints: &[&str] = match self {
            Self::Allocator => &[],
            Self::AsyncAllocator => &[
                "the cudaMallocAsync backend frees to its pool, not to the device: `torch.cuda.empty_cache()` trims it; the caching allocator (the default backend) reports its numbers in the message",
            ],
            Self::Runtime => &[
                "leave the device some memory outside PyTorch's cache: `torch.cuda.set_per_process_memory_fraction`, or `torch.cuda.empty_cache()` before the library that allocates on its own",
                "another process on the GPU (check `nvidia-smi`) takes what the CUDA context needs",
            ],
            Self::Cublas => &[
                "`torch.cuda.empty_cache()` before the first matmul of a phase hands cached, unused blocks back so that cuBLAS can allocate; a smaller `CUBLAS_WORKSPACE_CONFIG` (e.g. `:4096:8`) shrinks its workspace",
                "leave room outside PyTorch's cache: `torch.cuda.set_per_process_memory_fraction(0.95)`",
            ],
            Self::Cudnn => &[
                "`torch.backends.cudnn.benchmark = False` and a smaller batch pick algorithms with smaller workspaces",
                "the step's peak is close to the device's memory: see the phases' watermarks",
            ],
            Self::Nccl => &[
                "NCCL's buffers live outside PyTorch's cache: leave room with `torch.cuda.set_per_process_memory_fraction`, or lower `NCCL_BUFFSIZE`; create the process group (and run a first collective) before the model fills the device",
            ],
        };
        hints.iter().map(|h| (*h).to_owned()).collect()
    }
}

/// Whether a line of stderr reports a CUDA (or ROCm) out-of-memory error, PyTorch's caching
/// allocator's or another's ([`OomSource`]).
pub fn is_oom_line(line: &str) -> bool {
    OomSource::of(line).is_some()
}

/// The limit a memory fraction (`torch.cuda.set_per_process_memory_fraction`) puts on PyTorch's
/// cache, from the parenthesised form's "… allowed;" (the sentence form does not print it).
pub fn allowed_bytes(message: &str) -> Option<u64> {
    size(&patterns().allowed_old, message)
}

/// Parses one line of the job's stderr; `None` when it is not an out-of-memory message.
/// Numbers the message does not carry are `None`.
pub fn parse_oom_line(line: &str, t_ns: u64) -> Option<Oom> {
    if !is_oom_line(line) {
        return None;
    }
    let p = patterns();
    let mut oom = Oom {
        t_ns,
        rank: index(&p.rank, line),
        tried_bytes: size(&p.tried, line),
        process_bytes: size(&p.this_process, line),
        other_processes_bytes: sizes(&p.other_process, line),
        message: line.trim().to_owned(),
        ..Oom::default()
    };
    if let Some(device) = index(&p.device_async, line) {
        // The cudaMallocAsync backend's: its numbers follow on lines of their own (`OomLines`).
        oom.device = Some(device);
    } else if let Some(device) = index(&p.device_new, line) {
        oom.device = Some(device);
        oom.capacity_bytes = size(&p.capacity_new, line);
        oom.free_bytes = size(&p.free_new, line);
        oom.allocated_bytes = size(&p.allocated_new, line);
        oom.reserved_unallocated_bytes = size(&p.reserved_unallocated_new, line);
        oom.private_pools_bytes = size(&p.private_pools_new, line);
    } else if let Some(device) = index(&p.device_old, line) {
        oom.device = Some(device);
        oom.capacity_bytes = size(&p.capacity_old, line);
        oom.allocated_bytes = size(&p.allocated_old, line);
        oom.free_bytes = size(&p.free_old, line);
        let reserved = size(&p.reserved_old, line);
        oom.reserved_unallocated_bytes = reserved
            .zip(oom.allocated_bytes)
            .map(|(reserved, allocated)| reserved.saturating_sub(allocated))
            .or_else(|| size(&p.cached_old, line));
    }
    Some(oom)
}

/// The out-of-memory errors in a stream of stderr lines, in order: one line each, except the
/// `cudaMallocAsync` backend's, whose numbers follow on lines of their own ("Requested : 2.00
/// GiB", "Free (according to CUDA): 6.12 MiB"), read into it before it is given out. A message
/// printed twice in a row (a traceback repeats it) is given once.
#[derive(Debug, Default)]
pub struct OomLines {
    pending: Option<Oom>,
    last_message: String,
}

impl OomLines {
    /// Reads one line, at `t_ns`; returns the errors now complete.
    pub fn line(&mut self, line: &str, t_ns: u64) -> Vec<Oom> {
        let mut out = Vec::new();
        if let Some(oom) = self.pending.as_mut() {
            if read_async_number(oom, line) {
                return out;
            }
            out.extend(self.pending.take());
        }
        if let Some(oom) = parse_oom_line(line, t_ns)
            && oom.message != self.last_message
        {
            self.last_message.clone_from(&oom.message);
            if OomSource::of(&oom.message) == Some(OomSource::AsyncAllocator) {
                self.pending = Some(oom);
            } else {
                out.push(oom);
            }
        }
        out
    }

    /// The error still waiting for its numbers, when the stream ends.
    pub fn finish(&mut self) -> Option<Oom> {
        self.pending.take()
    }
}

/// Reads a line of the `cudaMallocAsync` backend's message into `oom`; whether it was one.
fn read_async_number(oom: &mut Oom, line: &str) -> bool {
    let p = patterns();
    let line = line.trim_end();
    if let Some(b) = size(&p.async_allocated, line) {
        oom.allocated_bytes = Some(b);
    } else if let Some(b) = size(&p.async_requested, line) {
        oom.tried_bytes = Some(b);
    } else if let Some(b) = size(&p.async_limit, line) {
        oom.capacity_bytes = Some(b);
    } else if let Some(b) = size(&p.async_free, line) {
        oom.free_bytes = Some(b);
    } else if !p.async_more.is_match(line) {
        return false;
    }
    oom.message.push('\n');
    oom.message.push_str(line);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;

    fn bytes(x: f64) -> Option<u64> {
        Some(x.round() as u64)
    }

    #[test]
    fn sentence_form() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.27 GiB is free. Process 12345 has 77.86 GiB memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
        let oom = parse_oom_line(line, 7).unwrap();
        assert_eq!(oom.t_ns, 7);
        assert_eq!(oom.device, Some(0));
        assert_eq!(oom.rank, None);
        assert_eq!(oom.tried_bytes, bytes(2.0 * GIB));
        assert_eq!(oom.capacity_bytes, bytes(79.15 * GIB));
        assert_eq!(oom.free_bytes, bytes(1.27 * GIB));
        assert_eq!(oom.allocated_bytes, bytes(76.5 * GIB));
        assert_eq!(oom.reserved_unallocated_bytes, bytes(120.0 * MIB));
        assert_eq!(oom.other_processes_bytes, bytes(77.86 * GIB));
        assert_eq!(oom.process_bytes, None);
    }

    #[test]
    fn this_process_and_two_others() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 512.00 MiB is free. Process 4242 has 12.00 GiB memory in use. Process 4343 has 2.50 GiB memory in use. Including non-PyTorch memory, this process has 8.60 GiB memory in use. Of the allocated memory 7.50 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.other_processes_bytes, bytes(14.5 * GIB));
        assert_eq!(oom.process_bytes, bytes(8.6 * GIB));
        assert_eq!(oom.allocated_bytes, bytes(7.5 * GIB));
    }

    #[test]
    fn capacty_typo_of_pytorch_2_1() {
        let line = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 3 has a total capacty of 14.75 GiB of which 45.06 MiB is free. Including non-PyTorch memory, this process has 14.70 GiB memory in use. Of the allocated memory 13.92 GiB is allocated by PyTorch, and 652.21 MiB is reserved by PyTorch but unallocated.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.device, Some(3));
        assert_eq!(oom.tried_bytes, bytes(256.0 * MIB));
        assert_eq!(oom.capacity_bytes, bytes(14.75 * GIB));
        assert_eq!(oom.free_bytes, bytes(45.06 * MIB));
        assert_eq!(oom.allocated_bytes, bytes(13.92 * GIB));
        assert_eq!(oom.reserved_unallocated_bytes, bytes(652.21 * MIB));
    }

    #[test]
    fn parenthesised_form_before_2_1() {
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 7.79 GiB total capacity; 6.49 GiB already allocated; 3.56 MiB free; 6.56 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.device, Some(1));
        assert_eq!(oom.tried_bytes, bytes(20.0 * MIB));
        assert_eq!(oom.capacity_bytes, bytes(7.79 * GIB));
        assert_eq!(oom.allocated_bytes, bytes(6.49 * GIB));
        assert_eq!(oom.free_bytes, bytes(3.56 * MIB));
        assert_eq!(
            oom.reserved_unallocated_bytes,
            Some(bytes(6.56 * GIB).unwrap() - bytes(6.49 * GIB).unwrap())
        );
    }

    #[test]
    fn parenthesised_form_with_allowed() {
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; 14.08 GiB already allocated; 19.75 MiB free; 14.20 GiB allowed; 14.48 GiB reserved in total by PyTorch)";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.free_bytes, bytes(19.75 * MIB));
        assert_eq!(oom.capacity_bytes, bytes(15.78 * GIB));
        assert_eq!(allowed_bytes(line), bytes(14.2 * GIB));
        assert_eq!(
            allowed_bytes(
                "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; 14.08 GiB already allocated; 19.75 MiB free; 14.48 GiB reserved in total by PyTorch)"
            ),
            None
        );
    }

    #[test]
    fn parenthesised_form_with_zero_bytes_free() {
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 4.00 GiB total capacity; 3.35 GiB already allocated; 0 bytes free; 3.41 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.free_bytes, Some(0));
        assert_eq!(oom.tried_bytes, bytes(64.0 * MIB));
    }

    /// PyTorch 1.0 to 1.3: "cached" is what the cache holds beyond the allocated bytes.
    #[test]
    fn first_parenthesised_form_with_cached() {
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 32.00 MiB (GPU 0; 7.79 GiB total capacity; 6.64 GiB already allocated; 21.00 MiB free; 150.86 MiB cached)";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.device, Some(0));
        assert_eq!(oom.tried_bytes, bytes(32.0 * MIB));
        assert_eq!(oom.capacity_bytes, bytes(7.79 * GIB));
        assert_eq!(oom.allocated_bytes, bytes(6.64 * GIB));
        assert_eq!(oom.free_bytes, bytes(21.0 * MIB));
        assert_eq!(oom.reserved_unallocated_bytes, bytes(150.86 * MIB));
    }

    /// PyTorch ≥ 2.4 names the private pools (CUDA Graphs) inside the allocated bytes.
    #[test]
    fn sentence_form_with_private_pools() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has a total capacity of 39.49 GiB of which 321.31 MiB is free. Including non-PyTorch memory, this process has 37.46 GiB memory in use. Of the allocated memory 36.04 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and 321.37 MiB is reserved by PyTorch but unallocated.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.allocated_bytes, bytes(36.04 * GIB));
        assert_eq!(oom.reserved_unallocated_bytes, bytes(321.37 * MIB));
        assert_eq!(oom.process_bytes, bytes(37.46 * GIB));
        assert_eq!(oom.private_pools_bytes, bytes(GIB));
        let none = line.replace(
            "1.00 GiB allocated in private",
            "0 bytes allocated in private",
        );
        assert_eq!(
            parse_oom_line(&none, 0).unwrap().private_pools_bytes,
            Some(0)
        );
    }

    #[test]
    fn rocm_builds_say_hip() {
        let line = "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.88 GiB. GPU 0 has a total capacity of 23.98 GiB of which 1.70 GiB is free. Of the allocated memory 21.65 GiB is allocated by PyTorch, and 279.78 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.tried_bytes, bytes(1.88 * GIB));
        assert_eq!(oom.capacity_bytes, bytes(23.98 * GIB));
        assert_eq!(oom.allocated_bytes, bytes(21.65 * GIB));
        assert!(parse_oom_line("RuntimeError: HIP error: out of memory", 0).is_some());
    }

    #[test]
    fn before_1_0_the_runtime_error_has_no_numbers() {
        let line = "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.tried_bytes, None);
        assert_eq!(oom.device, None);
    }

    #[test]
    fn rank_prefix() {
        let line = "[rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 7 has a total capacity of 79.33 GiB of which 301.81 MiB is free.";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.rank, Some(7));
        assert_eq!(oom.device, Some(7));
        assert_eq!(oom.tried_bytes, bytes(512.0 * MIB));
        assert_eq!(oom.allocated_bytes, None);
    }

    #[test]
    fn cuda_runtime_error_has_no_numbers() {
        let line = "RuntimeError: CUDA error: out of memory";
        let oom = parse_oom_line(line, 0).unwrap();
        assert_eq!(oom.tried_bytes, None);
        assert_eq!(oom.device, None);
        assert_eq!(oom.message, line);
    }

    #[test]
    fn other_lines_are_not_ooms() {
        assert_eq!(parse_oom_line("epoch 3 loss 0.25", 0), None);
        assert_eq!(parse_oom_line("out of memory", 0), None);
    }

    /// The out-of-memory errors of others than the caching allocator are recognised and named,
    /// as PyTorch, cuBLAS, cuDNN and NCCL print them; an unrelated error is not one.
    #[test]
    fn who_could_not_allocate() {
        for (line, source) in [
            (
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                Some(OomSource::Cublas),
            ),
            (
                "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
                Some(OomSource::Cudnn),
            ),
            (
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5 ncclUnhandledCudaError: Call to CUDA function failed. Last error: Cuda failure 'out of memory'",
                Some(OomSource::Nccl),
            ),
            (
                "host:1234:1234 [0] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
                Some(OomSource::Nccl),
            ),
            (
                "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)",
                Some(OomSource::AsyncAllocator),
            ),
            (
                "RuntimeError: CUDA error: out of memory",
                Some(OomSource::Runtime),
            ),
            (
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB of which 1.02 GiB is free.",
                Some(OomSource::Allocator),
            ),
            ("RuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM", None),
        ] {
            assert_eq!(OomSource::of(line), source, "{line}");
            assert_eq!(is_oom_line(line), source.is_some(), "{line}");
            if let Some(source) = source {
                assert_eq!(source.name().is_none(), source == OomSource::Allocator);
                assert_eq!(source.hints().is_empty(), source == OomSource::Allocator);
            }
        }
        // The caching allocator's numbers are still read when a message is prefixed.
        let oom = parse_oom_line("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.49 GiB already allocated; 3.56 MiB free; 6.56 GiB reserved in total by PyTorch)", 0).unwrap();
        assert_eq!(oom.rank, Some(1));
        assert_eq!(oom.tried_bytes, bytes(20.0 * MIB));
    }

    /// The cudaMallocAsync backend's message, as PyTorch prints it over six lines, is one error
    /// with its numbers; the next line ends it, and a line of another error after it is that
    /// error.
    #[test]
    fn the_async_backends_numbers_follow_on_their_own_lines() {
        let mut lines = OomLines::default();
        let mut out = Vec::new();
        for (t, line) in [
            "Traceback (most recent call last):",
            "torch.OutOfMemoryError: Allocation on device 1 would exceed allowed memory. (out of memory)",
            "Currently allocated     : 14.49 GiB",
            "Requested               : 2.00 GiB",
            "Device limit            : 15.77 GiB",
            "Free (according to CUDA): 6.12 MiB",
            "PyTorch limit (set by user-supplied memory fraction)",
            "                        : 17179869184.00 GiB",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        ]
        .into_iter()
        .enumerate()
        {
            out.extend(lines.line(line, t as u64));
        }
        out.extend(lines.finish());
        assert_eq!(out.len(), 2, "{out:#?}");
        let oom = &out[0];
        assert_eq!(oom.t_ns, 1);
        assert_eq!(oom.device, Some(1));
        assert_eq!(oom.allocated_bytes, bytes(14.49 * GIB));
        assert_eq!(oom.tried_bytes, bytes(2.0 * GIB));
        assert_eq!(oom.capacity_bytes, bytes(15.77 * GIB));
        assert_eq!(oom.free_bytes, bytes(6.12 * MIB));
        assert!(
            oom.message.ends_with(": 17179869184.00 GiB"),
            "{}",
            oom.message
        );
        assert_eq!(OomSource::of(&out[1].message), Some(OomSource::Cublas));
        // Cut after its first line, it is given at the end, with what it had.
        let mut lines = OomLines::default();
        assert!(lines.line("torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)", 5).is_empty());
        let cut = lines.finish().unwrap();
        assert_eq!((cut.device, cut.tried_bytes), (Some(0), None));
    }
}
