//! A synthetic recording of any size, shared by the viewer bench and `examples/synthetic.rs`.

use collector::recording::{
    AllocatorSample, Chunk, Column, Device, Edge, Header, Origin, Phase, PhaseEdge, Record,
    SeriesKey, SeriesKind, Writer,
};

const MIB: u64 = 1 << 20;
/// A recording as the collector writes it: device used and host memory at 50 Hz in 1 s chunks
/// (`samples_per_series` instants × 2 series), and `steps` steps of forward, backward and
/// optimizer with allocator numbers at every edge; memory grows by 4 KiB per step (a slow leak
/// under a sawtooth).
pub fn recording_bytes(samples_per_series: u64, steps: u64) -> Vec<u8> {
    let mut header = Header::new(
        0,
        "bench".to_owned(),
        vec!["python".to_owned(), "train.py".to_owned()],
    );
    header.devices = vec![Device {
        index: 0,
        name: "GPU".to_owned(),
        uuid: "GPU-0".to_owned(),
        total_bytes: 80 << 30,
    }];
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
            let step = next_step;
            for (k, phase) in [Phase::Forward, Phase::Backward, Phase::Optimizer]
                .into_iter()
                .enumerate()
            {
                for (e, edge) in [Edge::Begin, Edge::End].into_iter().enumerate() {
                    let t_ns = step * step_ns + (2 * k as u64 + e as u64) * step_ns / 8;
                    let allocated = (4 << 30) + step * 4096 + e as u64 * 512 * MIB;
                    let records = [
                        Record::Phase(PhaseEdge {
                            t_ns,
                            edge,
                            phase: phase.clone(),
                            step: Some(step),
                            origin,
                            host_heap: None,
                            host_rss: None,
                        }),
                        Record::Allocator(AllocatorSample {
                            t_ns,
                            origin,
                            device: 0,
                            allocated,
                            reserved: allocated + (1 << 30),
                            peak: allocated + 256 * MIB,
                            ..AllocatorSample::default()
                        }),
                    ];
                    for record in &records {
                        if writer.write(record).is_err() {
                            unreachable!("writing to memory cannot fail");
                        }
                    }
                }
            }
            next_step += 1;
        }
    }
    writer
        .finish(samples_per_series * sample_ns)
        .unwrap_or_default()
}
