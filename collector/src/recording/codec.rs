//! The column codec: integers as scaled, delta-encoded, zig-zag LEB128 varints (or, for a
//! column of equal values in the record kinds that allow it, the value alone: order 0).
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

/// Binary GCD: shifts and subtractions, no division.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    if a == 0 || b == 0 {
        return a | b;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            (a, b) = (b, a);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

/// Divides by `scale` values known to be multiples of it, without a division instruction:
/// shift out the power of two, then multiply by the inverse of the odd part modulo 2^64.
struct ExactDivisor {
    shift: u32,
    inverse: u64,
}

impl ExactDivisor {
    fn new(scale: u64) -> Self {
        let shift = scale.trailing_zeros();
        let odd = scale >> shift;
        // Newton's iteration doubles the correct low bits each time: 3 → 6 → … → 96 ≥ 64.
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        Self { shift, inverse }
    }

    fn divide(&self, multiple: i64) -> i64 {
        (multiple >> self.shift).wrapping_mul(self.inverse as i64)
    }
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
    let divisor = ExactDivisor::new(scale);
    let mut data = Vec::with_capacity(diffs.len() + diffs.len() / 2);
    for stored in diffs {
        push_varint(&mut data, zigzag(divisor.divide(stored)));
    }
    Encoded {
        first,
        order,
        scale,
        data,
    }
}

/// The most values a constant column (order 0) may claim: it has no data bytes to bound it.
pub const MAX_CONSTANT: u64 = 1 << 16;

/// Like [`encode`], but a column whose values are all equal is stored as order 0 (`first` only,
/// no data): the probe's columns (pid, device, counters that stay zero) mostly are. Only for
/// record kinds added with order 0 (format 1.3's `allocators` and `phases`), at most
/// [`MAX_CONSTANT`] values: readers of 1.2 and before know only orders 1 and 2.
pub fn encode_or_constant(values: &[u64], order: u8) -> Encoded {
    match values.split_first() {
        Some((&first, rest))
            if rest.iter().all(|&v| v == first) && values.len() as u64 <= MAX_CONSTANT =>
        {
            Encoded {
                first,
                order: 0,
                scale: 1,
                data: Vec::new(),
            }
        }
        _ => encode(values, order),
    }
}

/// Decodes `n` values. Never allocates more than one `u64` per byte of data (plus one).
pub fn decode(encoded: &Encoded, n: u64) -> Result<Vec<u64>, DecodeError> {
    let mut values = Vec::new();
    decode_into(
        encoded.first,
        encoded.order,
        encoded.scale,
        &encoded.data,
        n,
        &mut values,
    )?;
    Ok(values)
}

/// Decodes `n` values from their stored parts and appends them to `values`; on error `values`
/// is left as it was. Never reserves more than one `u64` per byte of data (plus one).
pub fn decode_into(
    first: u64,
    order: u8,
    scale: u64,
    data: &[u8],
    n: u64,
    values: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    let (order, scale, first) = (&order, &scale, &first);
    if *order == 0 && *scale != 0 {
        // Every value is `first`.
        if !data.is_empty() {
            return Err(DecodeError::Trailing { extra: data.len() });
        }
        if n > MAX_CONSTANT {
            return Err(DecodeError::TooMany {
                claimed: n,
                possible: MAX_CONSTANT,
            });
        }
        values.extend(std::iter::repeat_n(*first, n as usize));
        return Ok(());
    }
    if !matches!(order, 1 | 2) || *scale == 0 {
        return Err(DecodeError::Encoding {
            order: *order,
            scale: *scale,
        });
    }
    if n == 0 {
        return match data.len() {
            0 => Ok(()),
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
    let old_len = values.len();
    values.reserve(n as usize);
    values.push(*first);
    let mut value = *first;
    let mut delta = 0i64;
    let mut at = 0;
    for _ in 1..n {
        let mut raw = 0u64;
        let mut shift = 0;
        loop {
            let Some(&byte) = data.get(at) else {
                values.truncate(old_len);
                return Err(DecodeError::BadVarint { at });
            };
            at += 1;
            if shift == 63 && byte > 1 {
                values.truncate(old_len);
                return Err(DecodeError::BadVarint { at: at - 1 });
            }
            raw |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
            shift += 7;
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
        values.truncate(old_len);
        return Err(DecodeError::Trailing {
            extra: data.len() - at,
        });
    }
    Ok(())
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
    fn equal_values_are_stored_as_their_value_alone_and_bounded() {
        let constant = encode_or_constant(&[7; 1000], 1);
        assert_eq!((constant.order, constant.first), (0, 7));
        assert!(constant.data.is_empty());
        assert_eq!(decode(&constant, 1000).unwrap(), vec![7; 1000]);
        // Not all equal: the usual encoding.
        assert_eq!(encode_or_constant(&[7, 8], 1), encode(&[7, 8], 1));
        // A constant column cannot claim more values than MAX_CONSTANT, nor carry data.
        assert!(matches!(
            decode(&constant, MAX_CONSTANT + 1),
            Err(DecodeError::TooMany { .. })
        ));
        let with_data = Encoded {
            data: vec![0],
            ..constant
        };
        assert_eq!(
            decode(&with_data, 2),
            Err(DecodeError::Trailing { extra: 1 })
        );
    }

    #[test]
    fn exact_division_matches_division() {
        for scale in [
            1u64,
            2,
            3,
            1000,
            4096,
            100_000,
            2 << 20,
            (1 << 63) + 1,
            1 << 63,
        ] {
            let divisor = ExactDivisor::new(scale);
            for k in [-5i64, -1, 0, 1, 7, 1 << 20] {
                let multiple = k.wrapping_mul(scale as i64);
                let expected = (i128::from(multiple) / i128::from(scale as i64)) as i64;
                if scale as i64 > 0 {
                    assert_eq!(divisor.divide(multiple), expected, "{multiple} / {scale}");
                }
                // Whatever the scale, multiplying back gives the multiple: what decode does.
                assert_eq!(
                    divisor.divide(multiple).wrapping_mul(scale as i64),
                    multiple
                );
            }
        }
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(0, 18), 18);
        assert_eq!(gcd(4096, 2 << 20), 4096);
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
