//! A synthetic recording of any size, shared by the viewer bench and `examples/synthetic.rs`.

use collector::recording::{Chunk, Column, Origin, SeriesKey, SeriesKind, Writer};
use tidemark_tests::MIB;

/// A recording as the collector writes it: device used and host memory at 50 Hz in 1 s chunks
/// (`samples_per_series` instants × 2 series), and `steps` steps of forward, backward and
/// optimizer with allocator numbers at every edge; memory grows by 4 KiB per step (a slow leak
/// under a sawtooth).
pub fn recording_bytes(samples_per_series: u64, steps: u64) -> Vec<u8> {
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
        let used: Vec<u64> = range
            .clone()
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (8 << 30) + (i % per_step) * 64 * MIB + i / per_step * 4096 + (x % 4) * 2 * MIB
            })
            .collect();
        let host: Vec<u64> = range.map(|i| (3 << 30) + (i % 7) * MIB).collect();
        let chunk = Chunk {
            times_ns: times,
            columns: vec![
                Column {
                    series: SeriesKey::device(SeriesKind::DeviceUsed, 0),
                    values: used,
                    valid: None,
                },
                Column {
                    series: SeriesKey::new(SeriesKind::HostRss),
                    values: host,
                    valid: None,
                },
            ],
        };
        if writer.write_chunk(&chunk).is_err() {
            unreachable!("writing to memory cannot fail");
        }
        let chunk_end = (start + 50) * sample_ns;
        while next_step < steps && next_step * step_ns < chunk_end {
            for record in &tidemark_tests::sawtooth_step(next_step, step_ns, origin) {
                if writer.write(record).is_err() {
                    unreachable!("writing to memory cannot fail");
                }
            }
            next_step += 1;
        }
    }
    writer
        .finish(samples_per_series * sample_ns)
        .unwrap_or_default()
}
