//! A column of `u64` held in half the memory when it can be: memory moves in pages (the caching
//! allocator's blocks are multiples of 512 bytes, NVML reports whole pages, `/proc` counts 4 KiB
//! pages), so every value of a series is usually a multiple of one power of two, and the
//! quotients fit in 32 bits (`u32` × 4 KiB is 16 TiB). A column holds them so, and switches to
//! plain `u64` for good once a value does not fit. A column whose values are all the same (the
//! allocator's retry count, a snapshot's unknown numbers) is held as that value and a count.

/// A growable column of `u64`, stored as `u32` multiples of a power of two while every value is
/// one (see the module documentation). Read it by index ([`Values::at`]) or by iterator.
#[derive(Clone, Default)]
pub struct Values(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` times `value`; `reserve`: the room asked for, made once the values differ.
    Same {
        value: u64,
        len: usize,
        reserve: usize,
    },
    /// Every value is `stored << shift`. `shift` is 64 while every value is 0 (no unit yet);
    /// `max` is the largest stored number.
    Narrow {
        shift: u32,
        max: u32,
        stored: Vec<u32>,
    },
    /// The values as they are.
    Wide(Vec<u64>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Same {
            value: 0,
            len: 0,
            reserve: 0,
        }
    }
}

impl Values {
    /// An empty column.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Same { len, .. } => *len,
            Repr::Narrow { stored, .. } => stored.len(),
            Repr::Wide(values) => values.len(),
        }
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at `i`. Panics when `i` is out of bounds, as indexing a slice does.
    #[inline]
    pub fn at(&self, i: usize) -> u64 {
        match &self.0 {
            Repr::Same { value, len, .. } => {
                assert!(i < *len, "index {i} out of a column of {len}");
                *value
            }
            Repr::Narrow { shift, stored, .. } => widen(stored[i], *shift),
            Repr::Wide(values) => values[i],
        }
    }

    /// The value at `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < self.len()).then(|| self.at(i))
    }

    /// The first value.
    pub fn first(&self) -> Option<u64> {
        self.get(0)
    }

    /// The last value.
    pub fn last(&self) -> Option<u64> {
        self.len().checked_sub(1).map(|i| self.at(i))
    }

    /// The values in order.
    pub fn iter(&self) -> Iter<'_> {
        self.range(0..self.len())
    }

    /// The values of `range`, in order. Panics when it is out of bounds, as slicing does.
    pub fn range(&self, range: std::ops::Range<usize>) -> Iter<'_> {
        Iter(match &self.0 {
            Repr::Same { value, len, .. } => {
                assert!(
                    range.start <= range.end && range.end <= *len,
                    "range {range:?} out of a column of {len}"
                );
                IterRepr::Same(*value, range.len())
            }
            Repr::Narrow { shift, stored, .. } => IterRepr::Narrow(stored[range].iter(), *shift),
            Repr::Wide(values) => IterRepr::Wide(values[range].iter()),
        })
    }

    /// The values as a vector of `u64`.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    /// Appends one value.
    #[inline]
    pub fn push(&mut self, value: u64) {
        match &mut self.0 {
            Repr::Same {
                value: same, len, ..
            } if *len == 0 || *same == value => {
                *same = value;
                *len += 1;
            }
            // The usual value: a multiple of the unit that fits.
            Repr::Narrow { shift, max, stored } if in_unit(*shift, value, value) => {
                let q = (value >> *shift) as u32;
                *max = (*max).max(q);
                stored.push(q);
            }
            Repr::Wide(values) => values.push(value),
            Repr::Same { .. } | Repr::Narrow { .. } => self.extend_from_slice(&[value]),
        }
    }

    /// Appends `values`: one check of the batch, then one pass.
    pub fn extend_from_slice(&mut self, values: &[u64]) {
        let Some(&first) = values.first() else {
            return;
        };
        if let Repr::Same { value, len, .. } = &mut self.0 {
            let same = if *len == 0 { first } else { *value };
            if values.iter().all(|&v| v == same) {
                *value = same;
                *len += values.len();
                return;
            }
            self.materialize();
        }
        let (bits, top) = values
            .iter()
            .fold((0u64, 0u64), |(bits, top), &v| (bits | v, top.max(v)));
        if let Repr::Narrow { shift, max, stored } = &mut self.0
            && in_unit(*shift, bits, top)
        {
            // The usual batch: multiples of the unit that fit.
            let shift = *shift;
            *max = (*max).max((top >> shift) as u32);
            stored.extend(values.iter().map(|&v| (v >> shift) as u32));
            return;
        }
        match self.narrow_for(bits, top) {
            Some((shift, stored)) => stored.extend(values.iter().map(|&v| narrow(v, shift))),
            None => {
                if let Repr::Wide(wide) = &mut self.0 {
                    wide.extend_from_slice(values);
                }
            }
        }
    }

    /// Appends another column's values.
    pub fn extend_from(&mut self, other: &Values) {
        match &other.0 {
            Repr::Same { value, len, .. } => match &mut self.0 {
                Repr::Same {
                    value: mine,
                    len: n,
                    ..
                } if *n == 0 || *mine == *value => {
                    *mine = *value;
                    *n += len;
                }
                _ => self.extend(std::iter::repeat_n(*value, *len)),
            },
            Repr::Wide(values) => self.extend_from_slice(values),
            Repr::Narrow { shift, max, stored } => {
                if self.is_empty() {
                    *self = other.clone();
                    return;
                }
                self.materialize();
                let top = widen(*max, *shift);
                let bits = if *max == 0 { 0 } else { 1u64 << shift };
                match self.narrow_for(bits, top) {
                    Some((to, into)) => {
                        into.extend(stored.iter().map(|&v| narrow(widen(v, *shift), to)))
                    }
                    None => self.extend_from_slice(&other.to_vec()),
                }
            }
        }
    }

    /// Makes room for exactly `n` more values as the column holds them now (a vector that grows
    /// by copying, as wasm's do, leaves holes as large as itself behind).
    pub fn reserve_exact(&mut self, n: usize) {
        match &mut self.0 {
            Repr::Same { len, reserve, .. } => *reserve = (*reserve).max(*len + n),
            Repr::Narrow { stored, .. } => stored.reserve_exact(n),
            Repr::Wide(values) => values.reserve_exact(n),
        }
    }

    /// Makes room for at least `n` more values (amortized, as `Vec::reserve`).
    pub fn reserve(&mut self, n: usize) {
        match &mut self.0 {
            Repr::Same { len, reserve, .. } => *reserve = (*reserve).max(*len + n),
            Repr::Narrow { stored, .. } => stored.reserve(n),
            Repr::Wide(values) => values.reserve(n),
        }
    }

    /// Keeps the first `n` values.
    pub fn truncate(&mut self, n: usize) {
        match &mut self.0 {
            Repr::Same { len, .. } => *len = (*len).min(n),
            // `max` stays an upper bound of what is stored.
            Repr::Narrow { stored, .. } => stored.truncate(n),
            Repr::Wide(values) => values.truncate(n),
        }
    }

    /// Gives back memory reserved for growth.
    pub fn shrink_to_fit(&mut self) {
        match &mut self.0 {
            Repr::Same { reserve, .. } => *reserve = 0,
            Repr::Narrow { stored, .. } => stored.shrink_to_fit(),
            Repr::Wide(values) => values.shrink_to_fit(),
        }
    }

    /// Bytes of memory held (reserved included).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Same { .. } => 0,
            Repr::Narrow { stored, .. } => stored.capacity() * 4,
            Repr::Wide(values) => values.capacity() * 8,
        }
    }

    /// Whether it is held in 32 bits a value or less (as multiples of a power of two, or as one
    /// value repeated).
    pub fn is_narrow(&self) -> bool {
        !matches!(self.0, Repr::Wide(_))
    }

    /// Turns a column of one value repeated into one that holds each value.
    fn materialize(&mut self) {
        let Repr::Same {
            value,
            len,
            reserve,
        } = self.0
        else {
            return;
        };
        let room = len.max(reserve);
        let shift = value.trailing_zeros();
        self.0 = match u32::try_from(value.checked_shr(shift).unwrap_or(0)) {
            Ok(q) => {
                let mut stored = Vec::with_capacity(room);
                stored.resize(len, q);
                Repr::Narrow {
                    shift,
                    max: q,
                    stored,
                }
            }
            Err(_) => {
                let mut values = Vec::with_capacity(room);
                values.resize(len, value);
                Repr::Wide(values)
            }
        };
    }

    /// Makes room for values whose bits together are `bits` and whose largest is `top`: the
    /// stored vector and the shift to store them with while narrow (rescaled first if their unit
    /// is finer), `None` after switching to wide when they do not fit.
    fn narrow_for(&mut self, bits: u64, top: u64) -> Option<(u32, &mut Vec<u32>)> {
        self.materialize();
        let fit = match &mut self.0 {
            Repr::Same { .. } | Repr::Wide(_) => return None,
            Repr::Narrow { shift, max, stored } => {
                let wanted = (*shift).min(bits.trailing_zeros());
                let fits = |v: u64| v.checked_shr(wanted).unwrap_or(0) <= u64::from(u32::MAX);
                // A finer unit: what is stored must still fit once rescaled.
                let fit = fits(top) && (*max == 0 || fits(widen(*max, *shift)));
                if fit {
                    if *max > 0 && wanted < *shift {
                        let by = *shift - wanted;
                        stored.iter_mut().for_each(|v| *v <<= by);
                        *max <<= by;
                    }
                    *shift = wanted;
                    *max = (*max).max(narrow(top, wanted));
                }
                fit
            }
        };
        if !fit {
            self.0 = Repr::Wide(self.to_vec());
        }
        match &mut self.0 {
            Repr::Narrow { shift, stored, .. } => Some((*shift, stored)),
            Repr::Same { .. } | Repr::Wide(_) => None,
        }
    }
}

/// Whether values whose bits together are `bits` and whose largest is `top` are stored as they
/// are with `shift`: multiples of its unit that fit in 32 bits (never while there is no unit).
#[inline]
fn in_unit(shift: u32, bits: u64, top: u64) -> bool {
    shift < 64 && bits.trailing_zeros() >= shift && top >> shift <= u64::from(u32::MAX)
}

// `shift` is 64 only while every value is 0.
#[inline]
fn widen(stored: u32, shift: u32) -> u64 {
    u64::from(stored).checked_shl(shift).unwrap_or(0)
}

#[inline]
fn narrow(value: u64, shift: u32) -> u32 {
    value.checked_shr(shift).unwrap_or(0) as u32
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Values {}

impl From<Vec<u64>> for Values {
    fn from(values: Vec<u64>) -> Self {
        let mut column = Values::new();
        column.extend_from_slice(&values);
        column
    }
}

impl From<&[u64]> for Values {
    fn from(values: &[u64]) -> Self {
        let mut column = Values::new();
        column.extend_from_slice(values);
        column
    }
}

impl FromIterator<u64> for Values {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut column = Values::new();
        column.extend(iter);
        column
    }
}

impl Extend<u64> for Values {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, iter: I) {
        let mut batch = [0u64; 256];
        let mut iter = iter.into_iter();
        loop {
            let mut n = 0;
            for (slot, v) in batch.iter_mut().zip(&mut iter) {
                *slot = v;
                n += 1;
            }
            self.extend_from_slice(&batch[..n]);
            if n < batch.len() {
                return;
            }
        }
    }
}

impl<'a> IntoIterator for &'a Values {
    type Item = u64;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The values of a [`Values`], in order.
#[derive(Clone, Debug)]
pub struct Iter<'a>(IterRepr<'a>);

#[derive(Clone, Debug)]
enum IterRepr<'a> {
    /// The value, and how many times it is left.
    Same(u64, usize),
    Narrow(std::slice::Iter<'a, u32>, u32),
    Wide(std::slice::Iter<'a, u64>),
}

impl Iterator for Iter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        match &mut self.0 {
            IterRepr::Same(value, left) => same_next(*value, left),
            IterRepr::Narrow(iter, shift) => iter.next().map(|&v| widen(v, *shift)),
            IterRepr::Wide(iter) => iter.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len();
        (n, Some(n))
    }

    fn nth(&mut self, n: usize) -> Option<u64> {
        match &mut self.0 {
            IterRepr::Same(value, left) => {
                *left = left.saturating_sub(n);
                same_next(*value, left)
            }
            IterRepr::Narrow(iter, shift) => iter.nth(n).map(|&v| widen(v, *shift)),
            IterRepr::Wide(iter) => iter.nth(n).copied(),
        }
    }

    fn fold<B, F: FnMut(B, u64) -> B>(self, init: B, mut f: F) -> B {
        match self.0 {
            IterRepr::Same(value, left) => (0..left).fold(init, |acc, _| f(acc, value)),
            IterRepr::Narrow(iter, shift) => iter.fold(init, |acc, &v| f(acc, widen(v, shift))),
            IterRepr::Wide(iter) => iter.fold(init, |acc, &v| f(acc, v)),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<u64> {
        match &mut self.0 {
            IterRepr::Same(value, left) => same_next(*value, left),
            IterRepr::Narrow(iter, shift) => iter.next_back().map(|&v| widen(v, *shift)),
            IterRepr::Wide(iter) => iter.next_back().copied(),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {
    fn len(&self) -> usize {
        match &self.0 {
            IterRepr::Same(_, left) => *left,
            IterRepr::Narrow(iter, _) => iter.len(),
            IterRepr::Wide(iter) => iter.len(),
        }
    }
}

/// The next of `left` repeats of `value`.
#[inline]
fn same_next(value: u64, left: &mut usize) -> Option<u64> {
    let more = *left > 0;
    *left = left.saturating_sub(1);
    more.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pages_are_held_in_four_bytes_each() {
        let pages: Vec<u64> = (0..1000u64).map(|i| (1 << 30) + i * 4096).collect();
        let column = Values::from(pages.clone());
        assert!(column.is_narrow());
        assert_eq!(column.heap_bytes(), 4000);
        assert_eq!(column.to_vec(), pages);
        assert_eq!(column.at(999), pages[999]);
        assert_eq!(column.last(), pages.last().copied());
    }

    #[test]
    fn a_finer_unit_rescales_and_a_value_too_large_widens() {
        let mut column = Values::from(vec![0, 0, 1 << 38, 3 << 38]);
        assert!(column.is_narrow());
        column.push(512);
        assert!(column.is_narrow(), "3 × 2^38 / 512 still fits in 32 bits");
        assert_eq!(column.to_vec(), vec![0, 0, 1 << 38, 3 << 38, 512]);
        column.push(1);
        assert!(
            !column.is_narrow(),
            "3 × 2^38 in bytes does not fit in 32 bits"
        );
        assert_eq!(column.to_vec(), vec![0, 0, 1 << 38, 3 << 38, 512, 1]);
        column.push(7);
        assert_eq!(column.last(), Some(7));
    }

    #[test]
    fn a_column_of_one_value_holds_no_vector_until_another_comes() {
        let mut column = Values::new();
        column.reserve_exact(1000);
        for _ in 0..1000 {
            column.push(0);
        }
        column.extend_from_slice(&[0; 24]);
        assert_eq!((column.len(), column.heap_bytes()), (1024, 0));
        assert_eq!(column.at(1023), 0);
        assert_eq!(column.range(10..20).count(), 10);
        column.truncate(1000);
        column.push(3 << 20);
        assert_eq!(column.len(), 1001);
        assert!(column.is_narrow());
        assert!(
            column.heap_bytes() >= 4000,
            "the values, in the room asked for"
        );
        assert_eq!(column.last(), Some(3 << 20));
        assert_eq!(column.iter().filter(|&v| v == 0).count(), 1000);
        let mut big = Values::from(vec![u64::MAX; 5]);
        assert_eq!(big.heap_bytes(), 0);
        big.push(1);
        assert!(!big.is_narrow());
        assert_eq!(
            big.to_vec(),
            vec![u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX, 1]
        );
    }

    #[test]
    fn columns_appended_to_each_other_keep_their_values() {
        let mut a = Values::from(vec![4096, 8192]);
        a.extend_from(&Values::from(vec![1 << 20, 0]));
        a.extend_from(&Values::from(vec![6]));
        a.extend_from(&Values::from(vec![u64::MAX]));
        assert_eq!(a.to_vec(), vec![4096, 8192, 1 << 20, 0, 6, u64::MAX]);
    }

    proptest! {
        #[test]
        fn any_values_in_any_batches_are_kept(
            batches in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![any::<u64>(), (0u64..1 << 20).prop_map(|v| v << 12), Just(0u64), Just(7 << 30)],
                    0..20,
                ),
                0..8,
            ),
            one_by_one in any::<bool>(),
            repeated in any::<bool>(),
        ) {
            // Batches of one value repeated, or of any values.
            let batches: Vec<Vec<u64>> = if repeated {
                batches.iter().map(|b| vec![b.first().copied().unwrap_or(0); b.len()]).collect()
            } else {
                batches
            };
            let mut column = Values::new();
            let mut expected = Vec::new();
            for batch in &batches {
                if one_by_one {
                    batch.iter().for_each(|&v| column.push(v));
                } else {
                    column.extend_from(&Values::from(batch.clone()));
                }
                expected.extend_from_slice(batch);
            }
            prop_assert_eq!(column.len(), expected.len());
            prop_assert_eq!(column.to_vec(), expected.clone());
            prop_assert_eq!(column.iter().rev().collect::<Vec<_>>(),
                expected.iter().rev().copied().collect::<Vec<_>>());
            for (i, &v) in expected.iter().enumerate() {
                prop_assert_eq!(column.at(i), v);
            }
        }
    }
}
