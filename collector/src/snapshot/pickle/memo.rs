//! The memo, 4 bytes per entry.

use std::collections::HashMap;

use super::Value;

/// The memo: 4 bytes per entry, since a snapshot memoizes several objects per allocation and
/// the memo is most of what a read holds besides the trace. Containers, strings and the compact
/// values they become are stored as a 4-bit tag and a 28-bit index; the rare wide value (a
/// memoized number: a pickler never memoizes one, a hostile file might; or an index past 2^28)
/// goes to a side table. Entries are kept in blocks of fixed size, so the memo grows without
/// ever moving what it holds (in a browser tab, a vector that grows by copying leaves holes
/// that the rest of the read cannot always reuse).
#[derive(Default)]
pub(super) struct Memo {
    blocks: Vec<Box<[u32; BLOCK]>>,
    /// Entries set in `blocks`, all below this.
    dense: usize,
    /// Entries at indices beyond the dense ones (a pickler never writes them; a hostile file
    /// might, and must not make us allocate billions of slots).
    sparse: HashMap<u32, Value>,
    wide: Vec<Value>,
}

/// Entries per block (256 KiB).
const BLOCK: usize = 1 << 16;

impl Memo {
    const NONE: u32 = 0;
    const FALSE: u32 = 1;
    const TRUE: u32 = 2;
    pub(super) const STR: u32 = 3;
    const OBJ: u32 = 4;
    pub(super) const FRAME: u32 = 5;
    const STACK: u32 = 6;
    const ENTRY: u32 = 7;
    const OPAQUE: u32 = 8;
    const WIDE: u32 = 9;
    const POOL: u32 = 10;
    /// Bits of an entry's index; the tag is above them.
    const BITS: u32 = 28;

    /// How many entries are set (what MEMOIZE numbers the next one, as Python's unpickler does).
    pub(super) fn len(&self) -> usize {
        self.dense + self.sparse.len()
    }

    /// The index held by a dense entry of this tag ([`Memo::STR`], [`Memo::FRAME`]): a string's
    /// or a frame's, read without unpacking a whole value.
    #[inline(always)]
    pub(super) fn get_index(&self, index: u32, tag: u32) -> Option<u32> {
        let i = index as usize;
        if i >= self.dense {
            return None;
        }
        let packed = self.blocks[i / BLOCK][i % BLOCK];
        (packed >> Self::BITS == tag).then_some(packed & ((1 << Self::BITS) - 1))
    }

    /// The index MEMOIZE gives next, while every entry is a dense one.
    pub(super) fn next_dense(&self) -> Option<u32> {
        if self.sparse.is_empty() {
            u32::try_from(self.dense).ok()
        } else {
            None
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, index: u32) -> Option<Value> {
        let i = index as usize;
        if i < self.dense {
            let packed = self.blocks[i / BLOCK][i % BLOCK];
            Some(self.unpack(packed))
        } else {
            self.sparse.get(&index).copied()
        }
    }

    pub(super) fn set(&mut self, index: u32, value: Value) {
        let i = index as usize;
        if i > self.dense {
            self.sparse.insert(index, value);
            return;
        }
        let packed = self.pack(value);
        if i == self.dense {
            if i.is_multiple_of(BLOCK) {
                let block: Box<[u32]> = vec![0; BLOCK].into_boxed_slice();
                if let Ok(block) = block.try_into() {
                    self.blocks.push(block);
                }
            }
            self.dense += 1;
            if !self.sparse.is_empty() {
                self.sparse.remove(&index);
            }
        }
        self.blocks[i / BLOCK][i % BLOCK] = packed;
    }

    pub(super) fn pack(&mut self, value: Value) -> u32 {
        let (tag, payload) = match value {
            Value::None => (Self::NONE, 0),
            Value::Bool(false) => (Self::FALSE, 0),
            Value::Bool(true) => (Self::TRUE, 0),
            Value::Str(i) => (Self::STR, i),
            Value::Obj(i) => (Self::OBJ, i),
            Value::Frame(i) => (Self::FRAME, i),
            Value::Stack(i) => (Self::STACK, i),
            Value::Entry(i) => (Self::ENTRY, i),
            Value::Opaque(i) => (Self::OPAQUE, i),
            Value::Pool(i) => (Self::POOL, i),
            Value::Int(_) | Value::U64(_) | Value::Huge(_) | Value::Float(_) | Value::Bytes(_) => {
                (Self::WIDE, u32::MAX)
            }
        };
        if tag != Self::WIDE && payload >> Self::BITS == 0 {
            return (tag << Self::BITS) | payload;
        }
        match u32::try_from(self.wide.len()) {
            Ok(i) if i >> Self::BITS == 0 => {
                self.wide.push(value);
                (Self::WIDE << Self::BITS) | i
            }
            // More wide values than a file of 4 GiB could hold: keep it unknown.
            _ => Self::NONE,
        }
    }

    #[inline(always)]
    pub(super) fn unpack(&self, packed: u32) -> Value {
        let payload = packed & ((1 << Self::BITS) - 1);
        match packed >> Self::BITS {
            Self::FALSE => Value::Bool(false),
            Self::TRUE => Value::Bool(true),
            Self::STR => Value::Str(payload),
            Self::OBJ => Value::Obj(payload),
            Self::FRAME => Value::Frame(payload),
            Self::STACK => Value::Stack(payload),
            Self::ENTRY => Value::Entry(payload),
            Self::OPAQUE => Value::Opaque(payload),
            Self::POOL => Value::Pool(payload),
            Self::WIDE => self
                .wide
                .get(payload as usize)
                .copied()
                .unwrap_or(Value::None),
            _ => Value::None,
        }
    }
}
