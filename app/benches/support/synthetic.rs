//! A synthetic recording of any size, shared by the viewer bench and `examples/synthetic.rs`.

use collector::recording::{Chunk, Column, Origin, SeriesKey, SeriesKind, Writer};
use tidemark_tests::MIB;

/// A recording as the collector writes it: device used and host memory at 50 Hz in 1 s chunks
/// (`samples_per_series` instants × 2 series), and `steps` steps of forward, backward and
/// optimizer with allocator numbers at every edge; memory grows by 4 KiB per step (a slow leak
/// under a sawtooth).
#[allow(dead_code)] // each bench and example uses one of the two
pub fn recording_bytes(samples_per_series: u64, steps: u64) -> Vec<u8> {
    recording_bytes_ranks(samples_per_series, steps, 1)
}

/// The same for `ranks` ranks (`ranks > 1`): each rank on its own GPU (device used of every
/// device at the same rate) with its own phases and allocator numbers; rank 3 leaks faster.
#[allow(dead_code)] // each bench and example uses one of the two
pub fn recording_bytes_ranks(samples_per_series: u64, steps: u64, ranks: u32) -> Vec<u8> {
    write(samples_per_series, steps, ranks, u64::MAX, |_, _| {})
}

/// [`recording_bytes`] as the collector streams it from instant `flushed_from` on: flushed after
/// every chunk (one second of samples), so that a reader of the growing file sees it arrive
/// second by second; `mark(samples so far, bytes so far)` after each flushed chunk.
#[allow(dead_code)] // only the follow bench grows a file
pub fn recording_bytes_flushed(
    samples_per_series: u64,
    steps: u64,
    flushed_from: u64,
    mark: impl FnMut(u64, usize),
) -> Vec<u8> {
    write(samples_per_series, steps, 1, flushed_from, mark)
}

fn write(
    samples_per_series: u64,
    steps: u64,
    ranks: u32,
    flushed_from: u64,
    mut mark: impl FnMut(u64, usize),
) -> Vec<u8> {
    let header = tidemark_tests::header(&["python", "train.py"]);
    let Ok(mut writer) = Writer::new(Vec::with_capacity(64 << 20), &header) else {
        unreachable!("writing to memory cannot fail")
    };
    let sample_ns = 20_000_000u64;
    let per_step = samples_per_series / steps;
    let step_ns = per_step * sample_ns;
    let mut next_step = 0u64;
    let origin = Origin { pid: 7, rank: None };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for start in (0..samples_per_series).step_by(50) {
        let range = start..start + 50;
        let times: Vec<u64> = range.clone().map(|i| i * sample_ns).collect();
        let mut columns: Vec<Column> = (0..ranks)
            .map(|device| {
                let leak = if device == 3 { 64 * 1024 } else { 4096 };
                let used: Vec<u64> = range
                    .clone()
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (8 << 30)
                            + (i % per_step) * 64 * MIB
                            + i / per_step * leak
                            + (x % 4) * 2 * MIB
                    })
                    .collect();
                Column {
                    series: SeriesKey::device(SeriesKind::DeviceUsed, device),
                    values: used,
                    valid: None,
                }
            })
            .collect();
        columns.push(Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values: range.map(|i| (3 << 30) + (i % 7) * MIB).collect(),
            valid: None,
        });
        let chunk = Chunk {
            times_ns: times,
            columns,
        };
        if writer.write_chunk(&chunk).is_err() {
            unreachable!("writing to memory cannot fail");
        }
        let chunk_end = (start + 50) * sample_ns;
        while next_step < steps && next_step * step_ns < chunk_end {
            for rank in 0..ranks {
                let origin = if ranks == 1 {
                    origin
                } else {
                    Origin {
                        pid: 7 + rank,
                        rank: Some(rank),
                    }
                };
                for mut record in tidemark_tests::sawtooth_step(next_step, step_ns, origin) {
                    if let collector::recording::Record::Allocator(a) = &mut record {
                        a.device = if ranks == 1 { 0 } else { rank };
                    }
                    if writer.write(&record).is_err() {
                        unreachable!("writing to memory cannot fail");
                    }
                }
            }
            next_step += 1;
        }
        if start + 50 > flushed_from {
            if writer.flush().is_err() {
                unreachable!("writing to memory cannot fail");
            }
            mark(writer.samples(), writer.get_ref().len());
        }
    }
    writer
        .finish(samples_per_series * sample_ns)
        .unwrap_or_default()
}
