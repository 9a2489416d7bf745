//! The column codec: integers as scaled, delta-encoded, zig-zag LEB128 varints.
//!
//! A column of `n` unsigned 64-bit integers is stored as its first value, a delta `order` (1 or 2),
//! a `scale`, and `n - 1` varints. Order 1 stores differences between neighbours (good for memory
//! that moves in steps), order 2 differences of differences (good for sample times, which advance
//! by a nearly constant interval). Every stored difference is divided by `scale`, the greatest
//! common divisor of all of them: memory moves in pages and times are rounded to microseconds, so
//! the varints stay small. All arithmetic wraps, so any `u64` sequence round-trips.

/// A column in its stored form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The first value (0 for an empty column).
    pub first: u64,
    /// 1: differences; 2: differences of differences.
    pub order: u8,
    /// What every stored difference was divided by; at least 1.
    pub scale: u64,
    /// `n - 1` zig-zag LEB128 varints.
    pub data: Vec<u8>,
}

/// Why a stored column cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The column claims more values than its bytes can hold.
    #[error("claims {claimed} values but holds at most {possible}")]
    TooMany {
        /// Values claimed.
        claimed: u64,
        /// Values the data could hold at one byte each.
        possible: u64,
    },
    /// A varint is cut off or longer than ten bytes.
    #[error("a varint at byte {at} of the column is malformed")]
    BadVarint {
        /// Offset inside the column's data.
        at: usize,
    },
    /// The data has bytes left after the last value.
    #[error("{extra} bytes after the last value")]
    Trailing {
        /// The unused bytes.
        extra: usize,
    },
    /// Order is not 1 or 2, or scale is 0.
    #[error("unknown encoding (order {order}, scale {scale})")]
    Encoding {
        /// The order given.
        order: u8,
        /// The scale given.
        scale: u64,
    },
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encodes `values` with the given delta order (1 or 2).
pub fn encode(values: &[u64], order: u8) -> Encoded {
    let Some(&first) = values.first() else {
        return Encoded {
            first: 0,
            order,
            scale: 1,
            data: Vec::new(),
        };
    };
    let mut diffs = Vec::with_capacity(values.len() - 1);
    let mut scale = 0;
    let mut previous = first;
    let mut previous_delta = 0i64;
    for &value in &values[1..] {
        let delta = value.wrapping_sub(previous) as i64;
        let stored = if order == 2 {
            delta.wrapping_sub(previous_delta)
        } else {
            delta
        };
        scale = gcd(scale, stored.unsigned_abs());
        diffs.push(stored);
        previous = value;
        previous_delta = delta;
    }
    let scale = scale.max(1);
    let mut data = Vec::with_capacity(diffs.len() + diffs.len() / 2);
    for stored in diffs {
        // `scale` divides `stored` exactly; `i64::MIN / -1` cannot happen since scale > 0.
        let scaled = if scale == 1 {
            stored
        } else {
            (stored as i128 / scale as i128) as i64
        };
        push_varint(&mut data, zigzag(scaled));
    }
    Encoded {
        first,
        order,
        scale,
        data,
    }
}

/// Decodes `n` values. Never allocates more than one `u64` per byte of data (plus one).
pub fn decode(encoded: &Encoded, n: u64) -> Result<Vec<u64>, DecodeError> {
    let Encoded {
        first,
        order,
        scale,
        data,
    } = encoded;
    if !matches!(order, 1 | 2) || *scale == 0 {
        return Err(DecodeError::Encoding {
            order: *order,
            scale: *scale,
        });
    }
    if n == 0 {
        return match data.len() {
            0 => Ok(Vec::new()),
            extra => Err(DecodeError::Trailing { extra }),
        };
    }
    let possible = data.len() as u64 + 1;
    if n > possible {
        return Err(DecodeError::TooMany {
            claimed: n,
            possible,
        });
    }
    let mut values = Vec::with_capacity(n as usize);
    values.push(*first);
    let mut value = *first;
    let mut delta = 0i64;
    let mut at = 0;
    for _ in 1..n {
        let mut raw = 0u64;
        let mut shift = 0;
        loop {
            let Some(&byte) = data.get(at) else {
                return Err(DecodeError::BadVarint { at });
            };
            at += 1;
            if shift == 63 && byte > 1 {
                return Err(DecodeError::BadVarint { at: at - 1 });
            }
            raw |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(DecodeError::BadVarint { at });
            }
        }
        let stored = unzigzag(raw).wrapping_mul(*scale as i64);
        delta = if *order == 2 {
            delta.wrapping_add(stored)
        } else {
            stored
        };
        value = value.wrapping_add(delta as u64);
        values.push(value);
    }
    if at != data.len() {
        return Err(DecodeError::Trailing {
            extra: data.len() - at,
        });
    }
    Ok(values)
}

/// Packs booleans into bytes, least significant bit first.
pub fn pack_bits(bits: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; bits.len().div_ceil(8)];
    for (i, _) in bits.iter().enumerate().filter(|(_, bit)| **bit) {
        out[i / 8] |= 1 << (i % 8);
    }
    out
}

/// Unpacks `n` booleans; `None` when `bytes` does not hold exactly `n` bits (rounded up to bytes).
pub fn unpack_bits(bytes: &[u8], n: usize) -> Option<Vec<bool>> {
    if bytes.len() != n.div_ceil(8) {
        return None;
    }
    Some((0..n).map(|i| bytes[i / 8] & (1 << (i % 8)) != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steps_of_pages_take_one_byte() {
        let values: Vec<u64> = (0..100).map(|i| (1 << 30) + (i % 10) * 4096).collect();
        let encoded = encode(&values, 1);
        assert_eq!(encoded.scale, 4096);
        assert_eq!(encoded.data.len(), 99);
        assert_eq!(decode(&encoded, 100).unwrap(), values);
    }

    #[test]
    fn regular_times_take_one_byte_each() {
        let times: Vec<u64> = (0..100).map(|i| i * 50_000_000).collect();
        let encoded = encode(&times, 2);
        assert_eq!(encoded.data.len(), 99);
        assert_eq!(decode(&encoded, 100).unwrap(), times);
    }

    #[test]
    fn claims_beyond_the_data_are_refused_before_allocating() {
        let encoded = encode(&[1, 2, 3], 1);
        let err = decode(&encoded, 1 << 40).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooMany {
                claimed: 1 << 40,
                possible: 3
            }
        );
    }

    #[test]
    fn malformed_columns_are_errors() {
        let bad_varint = Encoded {
            first: 0,
            order: 1,
            scale: 1,
            data: vec![0x80, 0x80],
        };
        assert!(matches!(
            decode(&bad_varint, 2),
            Err(DecodeError::BadVarint { .. })
        ));
        let overlong = Encoded {
            data: vec![0xff; 11],
            ..bad_varint.clone()
        };
        assert!(matches!(
            decode(&overlong, 2),
            Err(DecodeError::BadVarint { .. })
        ));
        let zero_scale = Encoded {
            scale: 0,
            data: vec![],
            ..bad_varint
        };
        assert!(matches!(
            decode(&zero_scale, 1),
            Err(DecodeError::Encoding { .. })
        ));
        let trailing = encode(&[1, 2, 3], 1);
        assert_eq!(
            decode(&trailing, 2),
            Err(DecodeError::Trailing { extra: 1 })
        );
    }

    #[test]
    fn bits_round_trip() {
        let bits = [true, false, true, true, false, false, false, false, true];
        let packed = pack_bits(&bits);
        assert_eq!(packed, vec![0b0000_1101, 0b1]);
        assert_eq!(unpack_bits(&packed, bits.len()).unwrap(), bits);
        assert_eq!(unpack_bits(&packed, 20), None);
    }

    proptest! {
        #[test]
        fn any_values_round_trip(values in proptest::collection::vec(any::<u64>(), 0..200), order in 1u8..=2) {
            let encoded = encode(&values, order);
            prop_assert_eq!(decode(&encoded, values.len() as u64).unwrap(), values);
        }

        #[test]
        fn any_bytes_decode_without_panic(data in proptest::collection::vec(any::<u8>(), 0..64), n in 0u64..100, order in 0u8..4, scale in 0u64..5) {
            let _ = decode(&Encoded { first: 7, order, scale, data }, n);
        }
    }
}
