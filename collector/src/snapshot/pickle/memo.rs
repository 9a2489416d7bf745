//! The memo, 8 bytes per entry.

use std::collections::HashMap;

use super::{Value, push_gently};

/// The memo: 8 bytes per entry, since a snapshot memoizes two or three objects per allocation.
/// Containers, strings and the compact values they become are stored as a tag and a `u32`; the
/// rare wide value (a memoized number: a pickler never memoizes one, a hostile file might) goes
/// to a side table.
#[derive(Default)]
pub(super) struct Memo {
    dense: Vec<u64>,
    /// Entries at indices beyond the dense vector (a pickler never writes them; a hostile file
    /// might, and must not make us allocate billions of slots).
    sparse: HashMap<u32, Value>,
    wide: Vec<Value>,
}

impl Memo {
    const NONE: u64 = 0;
    const FALSE: u64 = 1;
    const TRUE: u64 = 2;
    const STR: u64 = 3;
    const OBJ: u64 = 4;
    const FRAME: u64 = 5;
    const STACK: u64 = 6;
    const ENTRY: u64 = 7;
    const OPAQUE: u64 = 8;
    const WIDE: u64 = 9;

    /// How many entries are set (what MEMOIZE numbers the next one, as Python's unpickler does).
    pub(super) fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    pub(super) fn get(&self, index: u32) -> Option<Value> {
        match self.dense.get(index as usize) {
            Some(&packed) => Some(self.unpack(packed)),
            None => self.sparse.get(&index).copied(),
        }
    }

    pub(super) fn set(&mut self, index: u32, value: Value) {
        let i = index as usize;
        if i > self.dense.len() {
            self.sparse.insert(index, value);
            return;
        }
        let packed = self.pack(value);
        if i < self.dense.len() {
            self.dense[i] = packed;
        } else {
            push_gently(&mut self.dense, packed);
            self.sparse.remove(&index);
        }
    }

    pub(super) fn pack(&mut self, value: Value) -> u64 {
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
            Value::Int(_) | Value::U64(_) | Value::Huge(_) | Value::Float(_) | Value::Bytes(_) => {
                let Ok(i) = u32::try_from(self.wide.len()) else {
                    // More wide values than a file of 4 GiB could hold: keep it unknown.
                    return Self::NONE;
                };
                self.wide.push(value);
                (Self::WIDE, i)
            }
        };
        (tag << 32) | u64::from(payload)
    }

    pub(super) fn unpack(&self, packed: u64) -> Value {
        let payload = packed as u32;
        match packed >> 32 {
            Self::FALSE => Value::Bool(false),
            Self::TRUE => Value::Bool(true),
            Self::STR => Value::Str(payload),
            Self::OBJ => Value::Obj(payload),
            Self::FRAME => Value::Frame(payload),
            Self::STACK => Value::Stack(payload),
            Self::ENTRY => Value::Entry(payload),
            Self::OPAQUE => Value::Opaque(payload),
            Self::WIDE => self
                .wide
                .get(payload as usize)
                .copied()
                .unwrap_or(Value::None),
            _ => Value::None,
        }
    }
}
