//! Recording write and read throughput, and bytes per sample, for realistic series.
//!
//! `cargo bench -p tidemark-collector --bench recording`. Budgets (issue #2): write and read
//! ≥ 20 million samples/s on one core; ≤ 4 bytes per sample per series at 20 Hz.

use collector::recording::{Chunk, Column, Header, SeriesKey, SeriesKind, Writer, read_recording};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const MIB: u64 = 1 << 20;

/// A small deterministic generator, so that every run measures the same bytes.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Device memory at 20 Hz: a training step every 10 samples whose activations rise and fall
/// back (the sawtooth), ±2 MiB of noise, a 1 MiB/step leak, rounded to the allocator's 2 MiB
/// pages. Times: 50 ms apart, the sampler up to 300 µs late, rounded to 100 µs as the collector
/// does. Returns (times, used, reserved).
fn device_series(samples: usize) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut times = Vec::with_capacity(samples);
    let mut used = Vec::with_capacity(samples);
    let mut reserved = Vec::with_capacity(samples);
    for i in 0..samples as u64 {
        let late_ns = noise.next() % 300_000;
        times.push((i * 50_000_000 + late_ns) / 100_000 * 100_000);
        let step = i / 10;
        let saw = (i % 10) * 700 * MIB;
        let jitter = (noise.next() % 3) * 2 * MIB;
        let value = 6 * 1024 * MIB + saw + step * MIB + jitter;
        used.push(value / (2 * MIB) * (2 * MIB));
        reserved.push(531 * MIB);
    }
    (times, used, reserved)
}

/// Chunks as the collector writes them: one per flush interval (1 s = 20 samples).
fn chunks(times: &[u64], columns: &[(SeriesKey, &[u64])], per_chunk: usize) -> Vec<Chunk> {
    (0..times.len())
        .step_by(per_chunk)
        .map(|start| {
            let end = (start + per_chunk).min(times.len());
            Chunk {
                times_ns: times[start..end].to_vec(),
                columns: columns
                    .iter()
                    .map(|(key, values)| Column {
                        series: key.clone(),
                        values: values[start..end].to_vec(),
                        valid: None,
                    })
                    .collect(),
            }
        })
        .collect()
}

fn write(chunks: &[Chunk]) -> Vec<u8> {
    let header = Header::new(0, "bench".to_owned(), vec!["python".to_owned()]);
    let Ok(mut writer) = Writer::new(Vec::with_capacity(1 << 20), &header) else {
        unreachable!("writing to memory cannot fail")
    };
    for chunk in chunks {
        if writer.write_chunk(chunk).is_err() {
            unreachable!("writing to memory cannot fail");
        }
    }
    writer.finish(0).unwrap_or_default()
}

fn bytes_per_sample(name: &str, chunks: &[Chunk]) {
    let samples: u64 = chunks.iter().map(Chunk::sample_count).sum();
    let bytes = write(chunks).len();
    println!(
        "size/{name}: {bytes} bytes for {samples} samples = {:.2} bytes per sample per series",
        bytes as f64 / samples as f64
    );
}

fn recording(c: &mut Criterion) {
    let samples = 1_000_000;
    let (times, used, reserved) = device_series(samples);
    let used_key = SeriesKey::device(SeriesKind::DeviceUsed, 0);
    let reserved_key = SeriesKey::device(SeriesKind::DeviceReserved, 0);
    let one = chunks(&times, &[(used_key.clone(), &used)], 20);
    let device = chunks(
        &times,
        &[(used_key.clone(), &used), (reserved_key, &reserved)],
        20,
    );
    let big = chunks(&times, &[(used_key, &used)], 4096);

    bytes_per_sample("one series, 1 s chunks", &one);
    bytes_per_sample("one GPU (used + reserved), 1 s chunks", &device);
    bytes_per_sample("one series, 4096-sample chunks", &big);

    let mut group = c.benchmark_group("recording");
    group.throughput(Throughput::Elements(samples as u64 * 2));
    group.bench_function("write one GPU, 1 s chunks", |b| b.iter(|| write(&device)));
    let bytes = write(&device);
    group.bench_function("read one GPU, 1 s chunks", |b| {
        b.iter(|| read_recording(&bytes).map(|r| r.sample_count()))
    });
    group.throughput(Throughput::Elements(samples as u64));
    group.bench_function("write one series, 4096-sample chunks", |b| {
        b.iter(|| write(&big))
    });
    let bytes = write(&big);
    group.bench_function("read one series, 4096-sample chunks", |b| {
        b.iter(|| read_recording(&bytes).map(|r| r.sample_count()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = recording
}
criterion_main!(benches);
