//! How records are laid out in MessagePack: record framing, chunk encoding, and a bounded walker
//! that finds where a value ends without decoding (or allocating for) it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::codec::{self, DecodeError, Encoded};
use super::model::{Chunk, Column, SeriesKey};

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
    pub const END: &str = "end";
}

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
    fn decode(&self, n: u64) -> Result<Vec<u64>, DecodeError> {
        let Self(first, order, scale, data) = self;
        let mut values = Vec::new();
        codec::decode_into(*first, *order, *scale, data, n, &mut values)?;
        Ok(values)
    }
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
mod tests {
    use super::*;

    #[test]
    fn walks_nested_values() {
        let value = (1u8, "two", vec![3u64, 1 << 40], [("k", 5i8)]);
        let bytes = rmp_serde::to_vec(&value).unwrap();
        assert_eq!(value_end(&bytes, 0), Ok(bytes.len()));
        for cut in 0..bytes.len() {
            assert_eq!(
                value_end(&bytes[..cut], 0),
                Err(WalkError::Eof),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn huge_claimed_lengths_are_eof_not_allocation() {
        // An array claiming 2^32 - 1 elements, a bin claiming 4 GiB.
        assert_eq!(
            value_end(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0], 0),
            Err(WalkError::Eof)
        );
        assert_eq!(
            value_end(&[0xc6, 0xff, 0xff, 0xff, 0xff, 0], 0),
            Err(WalkError::Eof)
        );
        assert_eq!(value_end(&[0xc1], 0), Err(WalkError::BadMarker { at: 0 }));
    }
}
