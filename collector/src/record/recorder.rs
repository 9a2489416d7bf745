//! The recorder thread: owns the writer, gathers samples into chunks, flushes at the flush
//! interval, keeps the numbers for the status line and the end summary.
//!
//! If writing fails (disk full), it warns once and keeps draining messages so that the job and
//! the other threads carry on; the job's exit status is still passed through.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use collector::format::format_bytes;
use collector::recording::{
    Chunk, Column, Dropped, Edge, Note, Record, SeriesKey, SeriesKind, Writer,
};

use super::clock::Clock;

/// What the other threads send to the recorder.
pub enum Msg {
    /// Values measured at one instant by one sampler; `None` means unavailable.
    Samples {
        /// The sampler, which also names the chunk the values go to.
        source: &'static str,
        /// When.
        t_ns: u64,
        /// One value per series.
        values: Vec<(SeriesKey, Option<u64>)>,
    },
    /// A record to write as it is.
    Record(Record),
    /// A remark to write as a note.
    Note(String),
    /// Probe messages lost, unparsable or refused since the last such message.
    Drops {
        /// Dropped by the probe.
        dropped: u64,
        /// Malformed.
        malformed: u64,
        /// From another user.
        refused: u64,
    },
    /// Everything is sent: finish the recording now, though a thread may still hold a sender (the
    /// stderr tee, blocked on a pipe that a grandchild which outlived the job keeps open).
    Finish,
    /// A sampler woke up a whole interval or more late.
    Late {
        /// Which sampler.
        sampler: &'static str,
        /// How late.
        late_ns: u64,
    },
}

/// What the recording holds at the end, for the summary.
#[derive(Debug, Default)]
pub struct Summary {
    /// Samples written, summed over the series.
    pub samples: u64,
    /// Phase edges received.
    pub phase_edges: u64,
    /// Highest device memory used, any device.
    pub peak_device_bytes: Option<u64>,
    /// Highest allocated memory the probe reported.
    pub peak_allocated_bytes: Option<u64>,
    /// Highest host memory of the job's tree.
    pub peak_host_bytes: Option<u64>,
    /// Probe messages dropped, malformed or refused.
    pub dropped: u64,
    /// Out-of-memory errors seen.
    pub ooms: u64,
    /// Bytes in the file.
    pub file_bytes: u64,
    /// Why recording stopped early, if it did.
    pub write_error: Option<String>,
    /// The notes written, for the summary.
    pub notes: Vec<String>,
}

/// Gathers one sampler's values into a chunk until the next flush.
#[derive(Default)]
struct ChunkBuilder {
    keys: Vec<SeriesKey>,
    times_ns: Vec<u64>,
    values: Vec<Vec<u64>>,
    valid: Vec<Vec<bool>>,
}

impl ChunkBuilder {
    fn push(&mut self, t_ns: u64, values: Vec<(SeriesKey, Option<u64>)>) -> Option<Chunk> {
        let same_series = self.keys.len() == values.len()
            && self.keys.iter().zip(&values).all(|(a, (b, _))| a == b);
        let finished = if same_series { None } else { self.take() };
        if !same_series {
            self.keys = values.iter().map(|(k, _)| k.clone()).collect();
            self.values = vec![Vec::new(); values.len()];
            self.valid = vec![Vec::new(); values.len()];
        }
        self.times_ns.push(t_ns);
        for (i, (_, value)) in values.into_iter().enumerate() {
            self.values[i].push(value.unwrap_or(0));
            self.valid[i].push(value.is_some());
        }
        finished
    }

    fn take(&mut self) -> Option<Chunk> {
        if self.times_ns.is_empty() {
            return None;
        }
        let times_ns = std::mem::take(&mut self.times_ns);
        let columns = self
            .keys
            .iter()
            .zip(&mut self.values)
            .zip(&mut self.valid)
            .map(|((key, values), valid)| {
                let valid = std::mem::take(valid);
                Column {
                    series: key.clone(),
                    values: std::mem::take(values),
                    valid: (!valid.iter().all(|&v| v)).then_some(valid),
                }
            })
            .collect();
        Some(Chunk { times_ns, columns })
    }
}

/// The recorder's state.
pub struct Recorder {
    writer: Option<Writer<BufWriter<File>>>,
    path: PathBuf,
    clock: Clock,
    flush_interval: Duration,
    builders: BTreeMap<&'static str, ChunkBuilder>,
    late: BTreeMap<&'static str, (u64, u64)>,
    summary: Summary,
    status: Option<Status>,
}

impl Recorder {
    /// A recorder writing to `writer` (whose header is written).
    pub fn new(
        writer: Writer<BufWriter<File>>,
        path: PathBuf,
        clock: Clock,
        flush_interval: Duration,
        live_status: bool,
    ) -> Self {
        Self {
            writer: Some(writer),
            path,
            clock,
            flush_interval,
            builders: BTreeMap::new(),
            late: BTreeMap::new(),
            summary: Summary::default(),
            status: live_status.then(Status::default),
        }
    }

    /// Runs until every sender is gone, then writes the end record.
    pub fn run(mut self, rx: &Receiver<Msg>) -> Summary {
        let mut next_flush = Instant::now() + self.flush_interval;
        loop {
            let timeout = next_flush.saturating_duration_since(Instant::now());
            match rx.recv_timeout(timeout) {
                Ok(Msg::Finish) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {
                    self.flush();
                    self.draw_status();
                    next_flush = Instant::now() + self.flush_interval;
                }
            }
        }
        self.finish()
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Samples {
                source,
                t_ns,
                values,
            } => {
                for (key, value) in &values {
                    let Some(value) = *value else { continue };
                    let peak = match key.kind {
                        SeriesKind::DeviceUsed => &mut self.summary.peak_device_bytes,
                        SeriesKind::HostRss => &mut self.summary.peak_host_bytes,
                        _ => continue,
                    };
                    *peak = Some(peak.map_or(value, |p| p.max(value)));
                    if let Some(status) = &mut self.status
                        && key.kind == SeriesKind::DeviceUsed
                    {
                        status.device_bytes = Some(value);
                    }
                }
                self.summary.samples += values.iter().filter(|(_, v)| v.is_some()).count() as u64;
                let builder = self.builders.entry(source).or_default();
                if let Some(chunk) = builder.push(t_ns, values) {
                    self.write(&Record::Chunk(chunk));
                }
            }
            Msg::Record(record) => {
                match &record {
                    Record::Phase(edge) => {
                        self.summary.phase_edges += 1;
                        if let Some(status) = &mut self.status {
                            status.phase =
                                (edge.edge == Edge::Begin).then(|| edge.phase.to_string());
                            status.step = edge.step;
                        }
                    }
                    Record::Allocator(sample) => {
                        let peak = &mut self.summary.peak_allocated_bytes;
                        *peak = Some(peak.map_or(sample.peak, |p| p.max(sample.peak)));
                        if let Some(status) = &mut self.status {
                            status.allocated_bytes = Some(sample.allocated);
                        }
                    }
                    Record::Oom(_) => self.summary.ooms += 1,
                    _ => {}
                }
                self.write(&record);
            }
            Msg::Note(text) => {
                let note = Note {
                    t_ns: self.clock.now_ns(),
                    text: text.clone(),
                };
                self.summary.notes.push(text);
                self.write(&Record::Note(note));
            }
            Msg::Drops {
                dropped,
                malformed,
                refused,
            } => {
                self.summary.dropped += dropped + malformed + refused;
                let record = Record::Dropped(Dropped {
                    t_ns: self.clock.now_ns(),
                    dropped,
                    malformed,
                    refused,
                });
                self.write(&record);
            }
            Msg::Late { sampler, late_ns } => {
                let entry = self.late.entry(sampler).or_default();
                entry.0 += 1;
                entry.1 = entry.1.max(late_ns);
            }
            // Ends the loop in `run`.
            Msg::Finish => {}
        }
    }

    fn write(&mut self, record: &Record) {
        let Some(writer) = &mut self.writer else {
            return;
        };
        if let Err(err) = writer.write(record) {
            self.fail(err);
        }
    }

    fn flush(&mut self) {
        let chunks: Vec<Chunk> = self
            .builders
            .values_mut()
            .filter_map(ChunkBuilder::take)
            .collect();
        for chunk in chunks {
            self.write(&Record::Chunk(chunk));
        }
        if let Some(writer) = &mut self.writer
            && let Err(err) = writer.flush()
        {
            self.fail(err);
        }
    }

    fn fail(&mut self, err: std::io::Error) {
        self.writer = None;
        let message = format!("{err}");
        self.clear_status();
        eprintln!(
            "collector: writing the recording failed ({message}): the job runs on, but nothing more is recorded: {}",
            self.path.display()
        );
        self.summary.write_error = Some(message);
    }

    fn finish(mut self) -> Summary {
        for (sampler, (times, worst_ns)) in std::mem::take(&mut self.late) {
            let text = format!(
                "the {sampler} sampler fell behind {times} times (at worst by {} ms)",
                worst_ns / 1_000_000
            );
            self.handle(Msg::Note(text));
        }
        self.flush();
        self.clear_status();
        if let Some(writer) = self.writer.take() {
            match writer.finish(self.clock.now_ns()) {
                Ok(out) => {
                    if let Ok(file) = out.into_inner() {
                        let _ = file.sync_all();
                    }
                }
                Err(err) => self.fail(err),
            }
        }
        self.summary.file_bytes = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        self.summary
    }

    fn draw_status(&mut self) {
        let elapsed_s = self.clock.now_ns() / 1_000_000_000;
        let Some(status) = &self.status else { return };
        let mut line = format!(
            "tidemark {:02}:{:02}:{:02} · {} samples",
            elapsed_s / 3600,
            elapsed_s / 60 % 60,
            elapsed_s % 60,
            self.summary.samples
        );
        if let Some(phase) = &status.phase {
            line.push_str(&format!(" · {phase}"));
        }
        if let Some(step) = status.step {
            line.push_str(&format!(" · step {step}"));
        }
        if let Some(bytes) = status.allocated_bytes {
            line.push_str(&format!(" · allocated {}", format_bytes(bytes as f64)));
        } else if let Some(bytes) = status.device_bytes {
            line.push_str(&format!(" · device {}", format_bytes(bytes as f64)));
        }
        if self.summary.dropped > 0 {
            line.push_str(&format!(" · {} dropped", self.summary.dropped));
        }
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[K{line}");
        let _ = stderr.flush();
    }

    fn clear_status(&self) {
        if self.status.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

/// What the live status line shows.
#[derive(Default)]
struct Status {
    phase: Option<String>,
    step: Option<u64>,
    allocated_bytes: Option<u64>,
    device_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_starts_a_new_chunk_when_the_series_change() {
        let mut builder = ChunkBuilder::default();
        let a = SeriesKey::new(SeriesKind::HostRss);
        let b = SeriesKey::device(SeriesKind::DeviceUsed, 0);
        assert!(builder.push(1, vec![(a.clone(), Some(10))]).is_none());
        assert!(builder.push(2, vec![(a.clone(), None)]).is_none());
        let chunk = builder.push(3, vec![(b.clone(), Some(5))]).unwrap();
        assert_eq!(chunk.times_ns, vec![1, 2]);
        assert_eq!(chunk.columns[0].values, vec![10, 0]);
        assert_eq!(chunk.columns[0].valid, Some(vec![true, false]));
        let chunk = builder.take().unwrap();
        assert_eq!(chunk.columns[0].series, b);
        assert_eq!(chunk.columns[0].valid, None);
        assert!(builder.take().is_none());
    }
}
