//! How records are laid out in MessagePack: record framing, chunk encoding, and a bounded walker
//! that finds where a value ends without decoding (or allocating for) it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::codec::{self, DecodeError, Encoded};
use super::model::{AllocatorSample, Chunk, Column, Edge, Origin, Phase, PhaseEdge, SeriesKey};

/// Record kinds, as written in the first element of every record.
pub mod kind {
    pub const HEADER: &str = "header";
    pub const SERIES: &str = "series";
    pub const CHUNK: &str = "chunk";
    pub const ALLOCATOR: &str = "allocator";
    pub const PHASE: &str = "phase";
    pub const OOM: &str = "oom";
    pub const EXIT: &str = "exit";
    pub const DROPPED: &str = "dropped";
    pub const NOTE: &str = "note";
    pub const SNAPSHOT: &str = "snapshot";
    pub const CATEGORIES: &str = "categories";
    pub const CENSUS: &str = "census";
    pub const SAVED_FREED: &str = "saved_freed";
    pub const UNOBSERVED: &str = "unobserved";
    pub const STALL: &str = "stall";
    pub const ALLOCATORS: &str = "allocators";
    pub const PHASES: &str = "phases";
    pub const END: &str = "end";
}

/// The most readings or edges one `allocators` or `phases` record holds (the writer writes at
/// most [`BATCH`]); a record claiming more is corrupt, so that memory stays bounded.
pub const MAX_BATCH: u64 = codec::MAX_CONSTANT;

/// How many readings or edges the writer puts in one record, at most.
pub const BATCH: usize = 4096;

/// A series declaration: the id that chunks use for this series from here on.
#[derive(Serialize, Deserialize)]
pub struct WireSeries {
    pub id: u32,
    #[serde(flatten)]
    pub key: SeriesKey,
}

/// A chunk as stored: `{"n": samples, "t": times, "c": [column, …]}`. Short keys, since a chunk
/// is written every flush interval and its overhead counts against every sample in it.
#[derive(Serialize, Deserialize)]
pub struct WireChunk<'a> {
    pub n: u64,
    #[serde(borrow)]
    pub t: WireInts<'a>,
    #[serde(borrow)]
    pub c: Vec<WireColumn<'a>>,
}

/// A delta-encoded integer column (see [`codec`]): `[first, order, scale, data]`.
#[derive(Serialize, Deserialize)]
pub struct WireInts<'a>(
    pub u64,
    pub u8,
    pub u64,
    #[serde(borrow, with = "serde_bytes")] pub Cow<'a, [u8]>,
);

/// One series' values in a stored chunk: `[series id, ints, validity bits or nil]`.
#[derive(Serialize, Deserialize)]
pub struct WireColumn<'a>(
    pub u32,
    #[serde(borrow)] pub WireInts<'a>,
    #[serde(borrow, with = "serde_bytes")] pub Option<Cow<'a, [u8]>>,
);

impl From<Encoded> for WireInts<'_> {
    fn from(encoded: Encoded) -> Self {
        let Encoded {
            first,
            order,
            scale,
            data,
        } = encoded;
        Self(first, order, scale, Cow::Owned(data))
    }
}

impl WireInts<'_> {
    pub(crate) fn decode(&self, n: u64) -> Result<Vec<u64>, DecodeError> {
        let mut values = Vec::new();
        self.decode_into(n, &mut values)?;
        Ok(values)
    }

    /// Decodes the `n` values and appends them to `values` (left as it was on error).
    pub(crate) fn decode_into(&self, n: u64, values: &mut Vec<u64>) -> Result<(), DecodeError> {
        let Self(first, order, scale, data) = self;
        codec::decode_into(*first, *order, *scale, data, n, values)
    }
}

/// A chunk's body read without serde, as the writer lays it out (`{"n", "t", "c"}`, the keys in
/// any order, each once; a column `[id, ints, bits or nil]`): the sample count and the times,
/// the columns into `columns` (cleared first), and how many bytes the body took. `None` for
/// anything else — a key missing, repeated or unknown, a number or bytes encoded another way,
/// bytes that end early: serde's reading of the body ([`WireChunk`]) then reads it, or says what
/// is wrong, so this way accepts nothing that way would not.
pub fn parse_chunk<'a>(
    body: &'a [u8],
    columns: &mut Vec<WireColumn<'a>>,
) -> Option<(u64, WireInts<'a>, usize)> {
    let mut rest = body;
    let rd = &mut rest;
    columns.clear();
    let (mut n, mut t, mut c) = (None, None, false);
    for _ in 0..rmp::decode::read_map_len(rd).ok()? {
        let (key, after) = rmp::decode::read_str_from_slice(*rd).ok()?;
        *rd = after;
        match key {
            "n" if n.is_none() => n = Some(rmp::decode::read_int::<u64, _>(rd).ok()?),
            "t" if t.is_none() => t = Some(parse_ints(rd)?),
            "c" if !c => {
                c = true;
                let len = rmp::decode::read_array_len(rd).ok()?;
                // Each column takes at least 7 bytes: a count beyond that is not believed.
                columns.reserve((len as usize).min(rd.len() / 7));
                for _ in 0..len {
                    if rmp::decode::read_array_len(rd).ok()? != 3 {
                        return None;
                    }
                    let id = rmp::decode::read_int::<u32, _>(rd).ok()?;
                    let ints = parse_ints(rd)?;
                    let valid = match rd.first()? {
                        0xc0 => {
                            *rd = &rd[1..];
                            None
                        }
                        _ => Some(Cow::Borrowed(parse_bin(rd)?)),
                    };
                    columns.push(WireColumn(id, ints, valid));
                }
            }
            _ => return None,
        }
    }
    if !c {
        return None;
    }
    Some((n?, t?, body.len() - rest.len()))
}

/// `[first, order, scale, data]` as [`parse_chunk`] reads it.
fn parse_ints<'a>(rd: &mut &'a [u8]) -> Option<WireInts<'a>> {
    if rmp::decode::read_array_len(rd).ok()? != 4 {
        return None;
    }
    let first = rmp::decode::read_int::<u64, _>(rd).ok()?;
    let order = rmp::decode::read_int::<u8, _>(rd).ok()?;
    let scale = rmp::decode::read_int::<u64, _>(rd).ok()?;
    Some(WireInts(first, order, scale, Cow::Borrowed(parse_bin(rd)?)))
}

/// MessagePack bin 8/16/32, borrowed.
fn parse_bin<'a>(rd: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = rmp::decode::read_bin_len(rd).ok()? as usize;
    let (bytes, after) = rd.split_at_checked(len)?;
    *rd = after;
    Some(bytes)
}

/// Sample times are stored with order 2, values with order 1. `id` gives each column's series id.
pub fn encode_chunk(chunk: &Chunk, mut id: impl FnMut(&SeriesKey) -> u32) -> WireChunk<'static> {
    WireChunk {
        n: chunk.times_ns.len() as u64,
        t: codec::encode(&chunk.times_ns, 2).into(),
        c: chunk
            .columns
            .iter()
            .map(|column| {
                WireColumn(
                    id(&column.series),
                    codec::encode(&column.values, 1).into(),
                    column
                        .valid
                        .as_deref()
                        .map(|valid| Cow::Owned(codec::pack_bits(valid))),
                )
            })
            .collect(),
    }
}

/// Decodes a stored chunk; `series` maps the declared ids. The error says which part is wrong.
pub fn decode_chunk(
    wire: WireChunk,
    series: impl Fn(u32) -> Option<SeriesKey>,
) -> Result<Chunk, String> {
    let WireChunk { n, t, c } = wire;
    let times_ns = t.decode(n).map_err(|err| format!("time column: {err}"))?;
    let columns = c
        .into_iter()
        .enumerate()
        .map(|(i, WireColumn(id, values, valid))| {
            let key = series(id)
                .ok_or_else(|| format!("column {i} refers to series {id}, never declared"))?;
            let name = key.kind.as_str();
            let values = values
                .decode(n)
                .map_err(|err| format!("column {i} ({name}): {err}"))?;
            let valid = match valid {
                None => None,
                Some(bits) => Some(codec::unpack_bits(&bits, times_ns.len()).ok_or_else(|| {
                    format!(
                        "column {i} ({name}): validity has {} bytes for {n} values",
                        bits.len()
                    )
                })?),
            };
            Ok(Column {
                series: key,
                values,
                valid,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Chunk { times_ns, columns })
}

/// An optional column of a batch: `[ints, validity bits or nil]`, or nil when no value is there.
#[derive(Serialize, Deserialize)]
pub struct WireOptional<'a>(
    #[serde(borrow)] pub WireInts<'a>,
    #[serde(borrow, with = "serde_bytes")] pub Option<Cow<'a, [u8]>>,
);

/// Allocator readings stored by column (format 1.3): what `allocator` records held, for up to
/// [`MAX_BATCH`] readings.
#[derive(Serialize, Deserialize)]
pub struct WireAllocators<'a> {
    pub n: u64,
    #[serde(borrow)]
    pub t: WireInts<'a>,
    #[serde(borrow)]
    pub pid: WireInts<'a>,
    #[serde(borrow)]
    pub rank: Option<WireOptional<'a>>,
    #[serde(borrow)]
    pub device: WireInts<'a>,
    #[serde(borrow)]
    pub allocated: WireInts<'a>,
    #[serde(borrow)]
    pub reserved: WireInts<'a>,
    #[serde(borrow)]
    pub peak: WireInts<'a>,
    #[serde(borrow)]
    pub active: WireInts<'a>,
    #[serde(borrow)]
    pub inactive_split: WireInts<'a>,
    #[serde(borrow)]
    pub retries: WireInts<'a>,
    #[serde(borrow)]
    pub ooms: WireInts<'a>,
}

/// Phase edges stored by column (format 1.3): what `phase` records held, for up to
/// [`MAX_BATCH`] edges. `phase` indexes `names`; `end` has a bit set for each edge that ends
/// its phase.
#[derive(Serialize, Deserialize)]
pub struct WirePhases<'a> {
    pub n: u64,
    #[serde(borrow)]
    pub t: WireInts<'a>,
    #[serde(borrow)]
    pub pid: WireInts<'a>,
    #[serde(borrow)]
    pub rank: Option<WireOptional<'a>>,
    #[serde(borrow, with = "serde_bytes")]
    pub end: Cow<'a, [u8]>,
    pub names: Vec<String>,
    #[serde(borrow)]
    pub phase: WireInts<'a>,
    #[serde(borrow)]
    pub step: Option<WireOptional<'a>>,
    #[serde(borrow)]
    pub host_heap: Option<WireOptional<'a>>,
    #[serde(borrow)]
    pub host_rss: Option<WireOptional<'a>>,
}

fn ints(values: &[u64], order: u8) -> WireInts<'static> {
    codec::encode_or_constant(values, order).into()
}

/// An optional column: nil when every value is absent, the values (absent ones stored as the
/// previous value, so that they cost a byte) with validity bits when some are.
fn optional(values: impl Iterator<Item = Option<u64>>) -> Option<WireOptional<'static>> {
    let mut stored = Vec::new();
    let mut valid = Vec::new();
    let mut last = 0;
    for v in values {
        valid.push(v.is_some());
        last = v.unwrap_or(last);
        stored.push(last);
    }
    if !valid.iter().any(|&v| v) {
        return None;
    }
    let bits = (!valid.iter().all(|&v| v)).then(|| Cow::Owned(codec::pack_bits(&valid)));
    Some(WireOptional(ints(&stored, 1), bits))
}

/// Encodes allocator readings (at most [`MAX_BATCH`]).
pub fn encode_allocators(samples: &[AllocatorSample]) -> WireAllocators<'static> {
    let column = |f: fn(&AllocatorSample) -> u64| {
        let values: Vec<u64> = samples.iter().map(f).collect();
        ints(&values, 1)
    };
    let times: Vec<u64> = samples.iter().map(|s| s.t_ns).collect();
    WireAllocators {
        n: samples.len() as u64,
        t: ints(&times, 2),
        pid: column(|s| u64::from(s.origin.pid)),
        rank: optional(samples.iter().map(|s| s.origin.rank.map(u64::from))),
        device: column(|s| u64::from(s.device)),
        allocated: column(|s| s.allocated),
        reserved: column(|s| s.reserved),
        peak: column(|s| s.peak),
        active: column(|s| s.active),
        inactive_split: column(|s| s.inactive_split),
        retries: column(|s| s.retries),
        ooms: column(|s| s.ooms),
    }
}

/// Encodes phase edges (at most [`MAX_BATCH`]).
pub fn encode_phases(edges: &[PhaseEdge]) -> WirePhases<'static> {
    let mut names: Vec<String> = Vec::new();
    let phase: Vec<u64> = edges
        .iter()
        .map(|e| {
            let name = e.phase.as_str();
            let at = names.iter().position(|n| n == name).unwrap_or_else(|| {
                names.push(name.to_owned());
                names.len() - 1
            });
            at as u64
        })
        .collect();
    let times: Vec<u64> = edges.iter().map(|e| e.t_ns).collect();
    let pids: Vec<u64> = edges.iter().map(|e| u64::from(e.origin.pid)).collect();
    let ends: Vec<bool> = edges.iter().map(|e| e.edge == Edge::End).collect();
    WirePhases {
        n: edges.len() as u64,
        t: ints(&times, 2),
        pid: ints(&pids, 1),
        rank: optional(edges.iter().map(|e| e.origin.rank.map(u64::from))),
        end: Cow::Owned(codec::pack_bits(&ends)),
        names,
        phase: ints(&phase, 1),
        step: optional(edges.iter().map(|e| e.step)),
        host_heap: optional(edges.iter().map(|e| e.host_heap)),
        host_rss: optional(edges.iter().map(|e| e.host_rss)),
    }
}

/// Checks a batch's claimed size.
fn batch_size(n: u64) -> Result<usize, String> {
    if n > MAX_BATCH {
        return Err(format!(
            "claims {n} entries, more than the {MAX_BATCH} a record may hold"
        ));
    }
    Ok(n as usize)
}

fn column(ints: &WireInts<'_>, n: u64, name: &str) -> Result<Vec<u64>, String> {
    ints.decode(n)
        .map_err(|err| format!("{name} column: {err}"))
}

/// A u32 column (pid, rank, device).
fn column_u32(ints: &WireInts<'_>, n: u64, name: &str) -> Result<Vec<u32>, String> {
    column(ints, n, name)?
        .into_iter()
        .map(|v| u32::try_from(v).map_err(|_| format!("{name} column: {v} is not a 32-bit value")))
        .collect()
}

fn optional_column(
    wire: Option<&WireOptional<'_>>,
    n: u64,
    name: &str,
) -> Result<Vec<Option<u64>>, String> {
    let Some(WireOptional(ints, valid)) = wire else {
        return Ok(vec![None; n as usize]);
    };
    let values = column(ints, n, name)?;
    match valid {
        None => Ok(values.into_iter().map(Some).collect()),
        Some(bits) => {
            let valid = codec::unpack_bits(bits, n as usize).ok_or_else(|| {
                format!(
                    "{name} column: validity has {} bytes for {n} values",
                    bits.len()
                )
            })?;
            Ok(values
                .into_iter()
                .zip(valid)
                .map(|(v, ok)| ok.then_some(v))
                .collect())
        }
    }
}

fn ranks(wire: Option<&WireOptional<'_>>, n: u64) -> Result<Vec<Option<u32>>, String> {
    optional_column(wire, n, "rank")?
        .into_iter()
        .map(|r| {
            r.map(|r| {
                u32::try_from(r).map_err(|_| format!("rank column: {r} is not a 32-bit value"))
            })
            .transpose()
        })
        .collect()
}

/// Decodes stored allocator readings; the error says which column is wrong.
pub fn decode_allocators(wire: &WireAllocators<'_>) -> Result<Vec<AllocatorSample>, String> {
    let n = wire.n;
    batch_size(n)?;
    let t = column(&wire.t, n, "t")?;
    let pid = column_u32(&wire.pid, n, "pid")?;
    let rank = ranks(wire.rank.as_ref(), n)?;
    let device = column_u32(&wire.device, n, "device")?;
    let allocated = column(&wire.allocated, n, "allocated")?;
    let reserved = column(&wire.reserved, n, "reserved")?;
    let peak = column(&wire.peak, n, "peak")?;
    let active = column(&wire.active, n, "active")?;
    let inactive_split = column(&wire.inactive_split, n, "inactive_split")?;
    let retries = column(&wire.retries, n, "retries")?;
    let ooms = column(&wire.ooms, n, "ooms")?;
    Ok((0..n as usize)
        .map(|i| AllocatorSample {
            t_ns: t[i],
            origin: Origin {
                pid: pid[i],
                rank: rank[i],
            },
            device: device[i],
            allocated: allocated[i],
            reserved: reserved[i],
            peak: peak[i],
            active: active[i],
            inactive_split: inactive_split[i],
            retries: retries[i],
            ooms: ooms[i],
        })
        .collect())
}

/// Decodes stored phase edges; the error says which column is wrong.
pub fn decode_phases(wire: &WirePhases<'_>) -> Result<Vec<PhaseEdge>, String> {
    let n = wire.n;
    batch_size(n)?;
    let t = column(&wire.t, n, "t")?;
    let pid = column_u32(&wire.pid, n, "pid")?;
    let rank = ranks(wire.rank.as_ref(), n)?;
    let ends = codec::unpack_bits(&wire.end, n as usize)
        .ok_or_else(|| format!("end column: {} bytes for {n} values", wire.end.len()))?;
    let names: Vec<Phase> = wire.names.iter().cloned().map(Phase::from).collect();
    let phase = column(&wire.phase, n, "phase")?;
    let step = optional_column(wire.step.as_ref(), n, "step")?;
    let host_heap = optional_column(wire.host_heap.as_ref(), n, "host_heap")?;
    let host_rss = optional_column(wire.host_rss.as_ref(), n, "host_rss")?;
    (0..n as usize)
        .map(|i| {
            let phase = usize::try_from(phase[i])
                .ok()
                .and_then(|p| names.get(p))
                .ok_or_else(|| {
                    format!(
                        "phase column: edge {i} names phase {} of {}",
                        phase[i],
                        names.len()
                    )
                })?;
            Ok(PhaseEdge {
                t_ns: t[i],
                edge: if ends[i] { Edge::End } else { Edge::Begin },
                phase: phase.clone(),
                step: step[i],
                origin: Origin {
                    pid: pid[i],
                    rank: rank[i],
                },
                host_heap: host_heap[i],
                host_rss: host_rss[i],
            })
        })
        .collect()
}

/// Why [`value_end`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum WalkError {
    /// The value goes on past the end of the bytes.
    Eof,
    /// A byte that MessagePack does not use as a marker (0xc1).
    BadMarker {
        /// Its offset.
        at: usize,
    },
}

/// Finds where the MessagePack value starting at `start` ends, without recursion and without
/// allocating: lengths are only compared against the bytes that are there.
pub fn value_end(bytes: &[u8], start: usize) -> Result<usize, WalkError> {
    let mut at = start;
    // Values still to be walked; each takes at least one byte, so more than remain means EOF.
    let mut pending: u64 = 1;
    while pending > 0 {
        if pending > (bytes.len() - at.min(bytes.len())) as u64 {
            return Err(WalkError::Eof);
        }
        pending -= 1;
        let marker = *bytes.get(at).ok_or(WalkError::Eof)?;
        at += 1;
        let be = |at: usize, width: usize| -> Result<u64, WalkError> {
            let field = bytes.get(at..at + width).ok_or(WalkError::Eof)?;
            Ok(field.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
        };
        // (bytes to skip after the marker's own length field, length field width, children)
        let (skip, children): (u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(marker & 0x0f)),
            0x90..=0x9f => (0, u64::from(marker & 0x0f)),
            0xa0..=0xbf => (u64::from(marker & 0x1f), 0),
            0xc1 => return Err(WalkError::BadMarker { at: at - 1 }),
            0xc4 | 0xd9 => {
                let len = be(at, 1)?;
                at += 1;
                (len, 0)
            }
            0xc5 | 0xda => {
                let len = be(at, 2)?;
                at += 2;
                (len, 0)
            }
            0xc6 | 0xdb => {
                let len = be(at, 4)?;
                at += 4;
                (len, 0)
            }
            0xc7 => (be(at, 1)? + 2, 0),
            0xc8 => (be(at, 2)? + 3, 0),
            0xc9 => (be(at, 4)? + 5, 0),
            0xca => (4, 0),
            0xcb => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xce | 0xd2 => (4, 0),
            0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => {
                let len = be(at, 2)?;
                at += 2;
                (0, len)
            }
            0xdd => {
                let len = be(at, 4)?;
                at += 4;
                (0, len)
            }
            0xde => {
                let len = be(at, 2)?;
                at += 2;
                (0, 2 * len)
            }
            0xdf => {
                let len = be(at, 4)?;
                at += 4;
                (0, 2 * len)
            }
        };
        let remaining = (bytes.len() - at.min(bytes.len())) as u64;
        if skip > remaining {
            return Err(WalkError::Eof);
        }
        at += skip as usize;
        pending += children;
    }
    Ok(at)
}

#[cfg(test)]
mod tests;
