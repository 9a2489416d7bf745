//! The streaming writer.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use super::model::{AllocatorSample, Chunk, End, Header, MAGIC, PhaseEdge, Record, SeriesKey};
use super::wire::{self, WireSeries, kind};

/// Writes a recording as a stream: the magic and header at once, then one record per call.
///
/// Nothing is buffered here: wrap the output in a [`io::BufWriter`] and call [`Writer::flush`]
/// at the interval that bounds what a crash may lose.
pub struct Writer<W: Write> {
    out: W,
    records: u64,
    samples: u64,
    dropped: u64,
    series_ids: BTreeMap<SeriesKey, u32>,
    /// Allocator readings and phase edges not written yet: they go out by column, a batch at a
    /// time (when [`wire::BATCH`] are waiting, and at every flush).
    allocators: Vec<AllocatorSample>,
    phases: Vec<PhaseEdge>,
}

impl<W: Write> Writer<W> {
    /// Writes the magic bytes and the header.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        out.write_all(MAGIC)?;
        let mut writer = Self {
            out,
            records: 0,
            samples: 0,
            dropped: 0,
            series_ids: BTreeMap::new(),
            allocators: Vec::new(),
            phases: Vec::new(),
        };
        writer.write_body(kind::HEADER, header)?;
        Ok(writer)
    }

    /// Writes one record.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        match record {
            Record::Chunk(chunk) => self.write_chunk(chunk),
            Record::Allocator(sample) => {
                self.allocators.push(*sample);
                self.write_full_batches()
            }
            Record::Phase(edge) => {
                self.phases.push(edge.clone());
                self.write_full_batches()
            }
            Record::Allocators(samples) => {
                self.allocators.extend_from_slice(samples);
                self.write_full_batches()
            }
            Record::Phases(edges) => {
                self.phases.extend_from_slice(edges);
                self.write_full_batches()
            }
            Record::Oom(oom) => self.write_body(kind::OOM, oom),
            Record::Exit(exit) => self.write_body(kind::EXIT, exit),
            Record::Dropped(dropped) => {
                self.dropped += dropped.dropped + dropped.malformed + dropped.refused;
                self.write_body(kind::DROPPED, dropped)
            }
            Record::Note(note) => self.write_body(kind::NOTE, note),
            Record::Snapshot(file) => self.write_body(kind::SNAPSHOT, file),
            Record::Categories(categories) => self.write_body(kind::CATEGORIES, categories),
            Record::Census(census) => self.write_body(kind::CENSUS, census),
            Record::SavedFreed(freed) => self.write_body(kind::SAVED_FREED, freed),
            Record::Unobserved(unobserved) => self.write_body(kind::UNOBSERVED, unobserved),
            Record::Stall(stall) => self.write_body(kind::STALL, stall),
            Record::End(end) => self.write_body(kind::END, end),
        }
    }

    /// Writes a chunk of samples.
    pub fn write_chunk(&mut self, chunk: &Chunk) -> io::Result<()> {
        for column in &chunk.columns {
            if !self.series_ids.contains_key(&column.series) {
                let id = self.series_ids.len() as u32;
                let declaration = WireSeries {
                    id,
                    key: column.series.clone(),
                };
                self.write_body(kind::SERIES, &declaration)?;
                self.series_ids.insert(column.series.clone(), id);
            }
        }
        let series_ids = &self.series_ids;
        let wire = wire::encode_chunk(chunk, |key| series_ids.get(key).copied().unwrap_or(0));
        self.samples += chunk.sample_count();
        self.write_body(kind::CHUNK, &wire)
    }

    /// Writes what waits in batches, and flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_batches(1)?;
        self.out.flush()
    }

    fn write_full_batches(&mut self) -> io::Result<()> {
        self.write_batches(wire::BATCH)
    }

    /// Writes the waiting readings and edges in records of at most [`wire::BATCH`], as long as
    /// at least `at_least` wait.
    fn write_batches(&mut self, at_least: usize) -> io::Result<()> {
        while self.allocators.len() >= at_least.max(1) {
            let n = self.allocators.len().min(wire::BATCH);
            let batch = wire::encode_allocators(&self.allocators[..n]);
            self.write_body(kind::ALLOCATORS, &batch)?;
            self.allocators.drain(..n);
        }
        while self.phases.len() >= at_least.max(1) {
            let n = self.phases.len().min(wire::BATCH);
            let batch = wire::encode_phases(&self.phases[..n]);
            self.write_body(kind::PHASES, &batch)?;
            self.phases.drain(..n);
        }
        Ok(())
    }

    /// The output, as written so far (what waits in batches is not in it yet).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Samples written so far, summed over all series.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Writes the end record with the totals, flushes, and hands back the output.
    pub fn finish(mut self, t_ns: u64) -> io::Result<W> {
        self.write_batches(1)?;
        let end = End {
            t_ns,
            records: self.records,
            samples: self.samples,
            dropped: self.dropped,
        };
        self.write_body(kind::END, &end)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_body(&mut self, kind: &str, body: &impl Serialize) -> io::Result<()> {
        // Encode into memory first: a record that fails to encode writes nothing.
        let mut buf = Vec::with_capacity(64);
        rmp::encode::write_array_len(&mut buf, 2).map_err(io::Error::other)?;
        rmp::encode::write_str(&mut buf, kind).map_err(io::Error::other)?;
        rmp_serde::encode::write_named(&mut buf, body).map_err(io::Error::other)?;
        self.out.write_all(&buf)?;
        self.records += 1;
        Ok(())
    }
}
