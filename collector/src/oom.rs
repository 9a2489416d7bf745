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
//!   out of memory": no numbers.

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
    device_old: Regex,
    capacity_old: Regex,
    allocated_old: Regex,
    free_old: Regex,
    reserved_old: Regex,
    cached_old: Regex,
    allowed_old: Regex,
    this_process: Regex,
    other_process: Regex,
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
            device_old: re(r"\(GPU ([0-9]+);"),
            capacity_old: re(r"SIZE total capacity"),
            allocated_old: re(r"SIZE already allocated"),
            free_old: re(r"SIZE free"),
            reserved_old: re(r"SIZE reserved in total by PyTorch"),
            cached_old: re(r"SIZE cached\)"),
            allowed_old: re(r"SIZE allowed;"),
            this_process: re(r"this process has SIZE memory in use"),
            other_process: re(r"Process [0-9]+ has SIZE memory in use"),
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

/// Whether a line of stderr reports a CUDA (or ROCm) out-of-memory error.
pub fn is_oom_line(line: &str) -> bool {
    line.contains("CUDA out of memory")
        || line.contains("CUDA error: out of memory")
        || line.contains("HIP out of memory")
        || line.contains("HIP error: out of memory")
        || line.contains("cuda runtime error (2) : out of memory")
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
    if let Some(device) = index(&p.device_new, line) {
        oom.device = Some(device);
        oom.capacity_bytes = size(&p.capacity_new, line);
        oom.free_bytes = size(&p.free_new, line);
        oom.allocated_bytes = size(&p.allocated_new, line);
        oom.reserved_unallocated_bytes = size(&p.reserved_unallocated_new, line);
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
}
