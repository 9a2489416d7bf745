//! Reading a 1 GB PyTorch profiler trace (Kineto's chrome trace JSON, written the way Kineto
//! writes it, with a real trace's event mix: CPU ops, CUDA runtime calls, flow events, kernels, a
//! third of the events `[memory]`), as `collector report` opens it, against Python's `json.load`
//! of the same file; and the reader's peak memory against the file's size. Budgets (issue #33):
//! ≤ 0.25× the time of `json.load`, in one pass, peak ≤ 0.5× the file; gzip read while
//! streaming.
//!
//! `cargo bench -p tidemark-collector --bench trace` (`TRACE_BENCH_MB=N` for another size;
//! `TRACE_BENCH_OURS_ONLY=1` to leave out `json.load`; `TRACE_BENCH_GZIP=1` to time the gzipped
//! file too). The file is written once into `target/`.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[path = "support/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[path = "../tests/support/python.rs"]
mod python;
use python::python;

/// Writes a trace of about `megabytes` MB to `out`; returns the `[memory]` events written.
fn write_trace(out: &Path, megabytes: u64) -> std::io::Result<u64> {
    let file = std::fs::File::create(out)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    write!(
        w,
        "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n    {{\n      \"id\": 0, \"name\": \"NVIDIA H100 80GB HBM3\", \"totalGlobalMem\": 85024112640,\n      \"computeMajor\": 9, \"computeMinor\": 0\n    }}\n  ],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 1}},\n  \"traceEvents\": ["
    )?;
    let limit = megabytes * 1_000_000;
    let ops = [
        "aten::linear",
        "aten::addmm",
        "aten::relu",
        "aten::layer_norm",
        "aten::softmax",
        "aten::mul",
        "aten::add",
        "autograd::engine::evaluate_function: AddmmBackward0",
    ];
    let (mut ts, mut ev_idx, mut corr, mut mems) = (1_000.0f64, 0u64, 0u64, 0u64);
    let (mut allocated, reserved) = (2_000_000_000u64, 40_000_000_000u64);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut first = true;
    let mut step = 0u64;
    let mut sep = |w: &mut std::io::BufWriter<std::fs::File>| -> std::io::Result<()> {
        if first {
            first = false;
            write!(w, "\n  ")
        } else {
            write!(w, ",\n  ")
        }
    };
    let written = |w: &std::io::BufWriter<std::fs::File>| w.get_ref().metadata().map(|m| m.len());
    while written(&w)? < limit {
        // A step of 400 ops: the step's span and a forward label first (the profiler writes
        // spans when they end, but in any order the reader sorts them).
        let begin = ts;
        sep(&mut w)?;
        write!(
            w,
            "{{\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#{step}\", \"pid\": 4242, \"tid\": 4242,\n    \"ts\": {begin:.3}, \"dur\": {:.3},\n    \"args\": {{\n      \"External id\": {corr},\"Record function id\": 0, \"Ev Idx\": {ev_idx}\n    }}\n  }}",
            400.0 * 12.0
        )?;
        ev_idx += 1;
        sep(&mut w)?;
        write!(
            w,
            "{{\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"## forward ##\", \"pid\": 4242, \"tid\": 4242,\n    \"ts\": {:.3}, \"dur\": {:.3},\n    \"args\": {{\n      \"External id\": {corr},\"Record function id\": 0, \"Ev Idx\": {ev_idx}\n    }}\n  }}",
            begin + 1.0,
            200.0 * 12.0
        )?;
        ev_idx += 1;
        for k in 0..400u64 {
            let op = ops[(k % ops.len() as u64) as usize];
            corr += 1;
            sep(&mut w)?;
            write!(
                w,
                "{{\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{op}\", \"pid\": 4242, \"tid\": 4242,\n    \"ts\": {ts:.3}, \"dur\": 9.114,\n    \"args\": {{\n      \"External id\": {corr},\"Record function id\": 0, \"Sequence number\": {k}, \"Fwd thread id\": 0, \"Ev Idx\": {ev_idx}\n    }}\n  }}"
            )?;
            ev_idx += 1;
            sep(&mut w)?;
            write!(
                w,
                "{{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 4242, \"tid\": 4242,\n    \"ts\": {:.3}, \"dur\": 4.021,\n    \"args\": {{\n      \"External id\": {corr},\"cbid\": 211, \"correlation\": {corr}\n    }}\n  }}",
                ts + 2.0
            )?;
            sep(&mut w)?;
            write!(
                w,
                "{{\n    \"ph\": \"s\", \"id\": {corr}, \"pid\": 4242, \"tid\": 4242, \"ts\": {:.3},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }}",
                ts + 2.0
            )?;
            sep(&mut w)?;
            write!(
                w,
                "{{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": 7, \"ts\": {:.3},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }}",
                ts + 6.0
            )?;
            sep(&mut w)?;
            write!(
                w,
                "{{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)\", \"pid\": 0, \"tid\": 7,\n    \"ts\": {:.3}, \"dur\": 3.072,\n    \"args\": {{\n      \"External id\": {corr},\"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {corr}, \"registers per thread\": 16, \"shared memory\": 0, \"blocks per SM\": 0.3, \"warps per SM\": 1.2, \"grid\": [24, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 2\n    }}\n  }}",
                ts + 6.0
            )?;
            // Two or three memory events an op: five others and 2.5 of these make a third.
            for m in 0..(2 + k % 2) {
                let t = ts + 1.0 + m as f64;
                let (bytes, addr) = if m == 1 && !live.is_empty() {
                    let (addr, bytes) = live.swap_remove((k as usize * 7) % live.len());
                    allocated -= bytes;
                    (-(bytes as i64), addr)
                } else {
                    let bytes = 512 * (1 + (corr * 2_654_435_761) % 8192);
                    let addr = 139_926_520_725_504 + ev_idx * 4096;
                    live.push((addr, bytes));
                    allocated += bytes;
                    (bytes as i64, addr)
                };
                sep(&mut w)?;
                write!(
                    w,
                    "{{\n    \"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\",\n    \"pid\": 4242, \"tid\": 4242,\n    \"ts\": {t:.3},\n    \"args\": {{\n      \"Total Reserved\": {reserved}, \"Total Allocated\": {allocated}, \"Bytes\": {bytes}, \"Addr\": {addr}, \"Device Id\": 0, \"Device Type\": 1, \"Ev Idx\": {ev_idx}\n    }}\n  }}"
                )?;
                ev_idx += 1;
                mems += 1;
            }
            ts += 12.0;
        }
        step += 1;
    }
    write!(w, "\n  ],\n  \"traceName\": \"bench.pt.trace.json\"\n}}\n")?;
    w.flush()?;
    Ok(mems)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("trace: bench");
        return;
    }
    let megabytes: u64 = std::env::var("TRACE_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = manifest.join(format!("../target/trace-bench-{megabytes}.pt.trace.json"));
    if !file.exists() {
        println!("writing {} …", file.display());
        if let Err(e) = write_trace(&file, megabytes) {
            eprintln!("cannot write {}: {e}", file.display());
            std::process::exit(1);
        }
    }
    let size = std::fs::metadata(&file).map_or(0, |m| m.len());
    println!("trace: {:.1} MB", size as f64 / 1e6);

    let read = |path: &Path, what: &str| {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let start = Instant::now();
        // As `collector report` opens it.
        let input = match collector::open::open_path(path) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        let took = start.elapsed().as_secs_f64();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        let held = LIVE.load(Ordering::Relaxed) - before;
        let readings = match &input {
            collector::open::Input::Recording(r) => r.allocator.len(),
            _ => 0,
        };
        println!(
            "{what}: {took:.2} s; peak {:.0} MB = {:.2}× the JSON (allocated: the read window included); held after {:.0} MB ({readings} allocator readings)",
            peak as f64 / 1e6,
            peak as f64 / size as f64,
            held as f64 / 1e6,
        );
        (took, peak)
    };
    let mut ours = Vec::new();
    for round in 0..3 {
        ours.push(read(&file, &format!("round {round}")).0);
    }
    if std::env::var_os("TRACE_BENCH_GZIP").is_some() {
        let gz = file.with_extension("json.gz");
        if !gz.exists() {
            println!("writing {} …", gz.display());
            let done = std::fs::File::open(&file).and_then(|mut input| {
                let out = std::fs::File::create(&gz)?;
                let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                std::io::copy(&mut input, &mut enc)?;
                enc.finish().map(drop)
            });
            if let Err(e) = done {
                eprintln!("cannot write {}: {e}", gz.display());
                std::process::exit(1);
            }
        }
        read(&gz, "gzipped, decompressed as it streams");
    }

    if std::env::var_os("TRACE_BENCH_OURS_ONLY").is_some() {
        return;
    }
    let script = "import json, sys, time, resource\n\
        t = time.perf_counter()\n\
        with open(sys.argv[1], 'rb') as f:\n    d = json.load(f)\n\
        print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&file)
        .output();
    let theirs = out
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|text| {
            let mut parts = text.split_whitespace();
            Some((
                parts.next()?.parse::<f64>().ok()?,
                parts.next()?.parse::<f64>().ok()?,
            ))
        });
    let Some((theirs, their_rss)) = theirs else {
        eprintln!("python json.load failed");
        std::process::exit(1);
    };
    let best = ours.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "json.load: {theirs:.2} s, peak RSS {:.0} MB; tidemark best of 3: {best:.2} s = {:.3}× json.load (budget ≤ 0.25×)",
        their_rss / 1e6,
        best / theirs
    );
}
