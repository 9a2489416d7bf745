//! The trace entry's fast path: a dict of plain items (numbers, strings, memo references and at
//! most one list of frames) read straight from the bytes into its [`Fields`], without a stack,
//! an arena slot or a dispatch per opcode. A trace entry is nearly all of a snapshot, and nearly
//! every one is such a dict; anything else it meets (a container it does not know, an opcode it
//! does not read, the end of the window, an entry the general path would refuse) makes it give
//! up having changed nothing the general path would not do the same way, and the general path
//! reads the dict from its start. So both paths leave the same machine: the same strings, frames
//! and stacks in the same order, the same memo, the same entries.

use super::memo::Memo;
use super::run::op;
use super::{Fields, Machine, Value};
use super::{K_ACTION, K_FRAMES, K_POOL_ID};
use crate::snapshot::PoolId;

/// Where the reading of a dict's items stands: `p` in the bytes, and the memo entries its
/// MEMOIZE/BINPUT opcodes will write once the whole dict is read.
#[derive(Clone, Copy)]
struct Cursor {
    p: usize,
    /// The next index MEMOIZE gives (the memo's length while nothing is pending).
    next_memo: u32,
    /// The memo's length when the dict began: entries from here on are pending.
    first_pending: u32,
    /// The trace entry read holds a list of frames (in `fast_frames`).
    has_frames: bool,
}

/// What a memo entry written inside the dict will hold once it is committed.
#[derive(Clone, Copy)]
pub(super) enum Pending {
    Value(Value),
    /// The dict itself: the trace entry it becomes.
    Dict,
    /// The list of frames: the stack it becomes.
    Frames,
}

impl Machine<'_> {
    /// At an EMPTY_DICT (its opcode read): reads the dict through its SETITEMS if it is a trace
    /// entry of plain items, pushes the entry and returns `true`; otherwise returns `false`
    /// with the position unmoved, for the general path.
    pub(super) fn fast_entry(&mut self) -> Result<bool, crate::snapshot::SnapshotError> {
        if !self.fast {
            return Ok(false);
        }
        let Some(next_memo) = self.memo.next_dense() else {
            return Ok(false);
        };
        self.fast_memo.clear();
        self.fast_frames.clear();
        let mut c = Cursor {
            p: self.pos,
            next_memo,
            first_pending: next_memo,
            has_frames: false,
        };
        let mut fields = Fields::empty();
        if self
            .fast_items(&mut c, &mut fields, Pending::Dict, true)
            .is_none()
        {
            return Ok(false);
        }
        let setitems = c.p - 1;
        // Only what `compact` makes a trace entry goes on (a block's frames list, say, is
        // interned when its entry is).
        if fields.frame_shaped() || !matches!(fields.get(K_ACTION), Some(Value::Str(_))) {
            return Ok(false);
        }
        // Commit: what the general path does when it reaches this dict's SETITEMS.
        let stack = if c.has_frames {
            let frames = std::mem::take(&mut self.fast_frames);
            let id = self.intern_stack(&frames);
            self.fast_frames = frames;
            fields.set(K_FRAMES, Value::Stack(id));
            Some(id)
        } else {
            None
        };
        let Ok(Some(entry @ Value::Entry(_))) = self.compact(setitems, &fields) else {
            // Not a trace entry after all, or one the general path must refuse (with its message).
            return Ok(false);
        };
        for i in 0..self.fast_memo.len() {
            let (index, pending) = self.fast_memo[i];
            let value = match pending {
                Pending::Value(v) => v,
                Pending::Dict => entry,
                Pending::Frames => Value::Stack(stack.unwrap_or(0)),
            };
            self.memo_put(index, value);
        }
        self.pos = c.p;
        self.push(entry)?;
        Ok(true)
    }

    /// Reads a dict's optional memo opcode, its MARK, its key/value pairs and its SETITEMS.
    /// `entry`: the dict may hold a list of frames (a trace entry); otherwise (a frame) only
    /// plain values.
    fn fast_items(
        &mut self,
        c: &mut Cursor,
        fields: &mut Fields,
        me: Pending,
        entry: bool,
    ) -> Option<()> {
        self.fast_memoize(c, me)?;
        if self.fast_op(c)? != op::MARK {
            return None;
        }
        loop {
            let code = self.fast_op(c)?;
            if code == op::SETITEMS {
                return Some(());
            }
            let key = match code {
                op::BINGET | op::LONG_BINGET => self.fast_get_index(c, code, Memo::STR)?,
                _ => match self.fast_value(c, code)? {
                    Value::Str(key) => key,
                    _ => return None,
                },
            };
            let code = self.fast_op(c)?;
            let value = if code == op::EMPTY_LIST
                && entry
                && key == K_FRAMES
                && fields.get(K_FRAMES).is_none()
            {
                c.has_frames = true;
                self.fast_frames_list(c)?;
                // Set at the commit, once the stack is interned.
                Value::None
            } else if entry && key == K_POOL_ID && code != op::BINGET && code != op::LONG_BINGET {
                self.fast_pool(c, code)?
            } else {
                self.fast_value(c, code)?
            };
            fields.add(key, value);
        }
    }

    /// A plain value starting with opcode `code` (already read): a number, None, a bool, a
    /// string (and its memo opcode), or a memo reference to anything but a container.
    #[inline(always)]
    fn fast_value(&mut self, c: &mut Cursor, code: u8) -> Option<Value> {
        let bytes = self.bytes;
        let value = match code {
            op::BINGET | op::LONG_BINGET => {
                let i = self.fast_memo_index(c, code)?;
                self.fast_get(c, i)?
            }
            op::BININT1 => {
                let v = *bytes.get(c.p)?;
                c.p += 1;
                Value::Int(i64::from(v))
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(*bytes.get(c.p..)?.first_chunk::<2>()?);
                c.p += 2;
                Value::Int(i64::from(v))
            }
            op::BININT => {
                let v = i32::from_le_bytes(*bytes.get(c.p..)?.first_chunk::<4>()?);
                c.p += 4;
                Value::Int(i64::from(v))
            }
            op::LONG1 => {
                let n = usize::from(*bytes.get(c.p)?);
                let v = super::run::long_at(bytes, c.p + 1, n)?;
                c.p += 1 + n;
                v
            }
            op::NONE => Value::None,
            op::NEWTRUE => Value::Bool(true),
            op::NEWFALSE => Value::Bool(false),
            op::BINFLOAT => {
                let v = f64::from_be_bytes(*bytes.get(c.p..)?.first_chunk::<8>()?);
                c.p += 8;
                Value::Float(v)
            }
            op::SHORT_BINUNICODE | op::BINUNICODE => {
                let n = if code == op::SHORT_BINUNICODE {
                    let n = usize::from(*bytes.get(c.p)?);
                    c.p += 1;
                    n
                } else {
                    let n = u32::from_le_bytes(*bytes.get(c.p..)?.first_chunk::<4>()?);
                    c.p += 4;
                    usize::try_from(n).ok()?
                };
                let text = std::str::from_utf8(bytes.get(c.p..c.p.checked_add(n)?)?).ok()?;
                c.p += n;
                // Interning is what the general path does with this string at this point too.
                let v = Value::Str(self.intern(text));
                self.fast_memoize(c, Pending::Value(v))?;
                v
            }
            _ => return None,
        };
        match value {
            Value::Obj(_) => None, // a container: its sharing is the general path's to track
            v => Some(v),
        }
    }

    /// A trace entry's `pool_id`, its first opcode (`code`) read: two integers and TUPLE2 (and
    /// its memo opcode), made compact as the general path makes it once the entry is read.
    fn fast_pool(&mut self, c: &mut Cursor, code: u8) -> Option<Value> {
        let a = self.fast_value(c, code)?.as_u64()?;
        let code = self.fast_op(c)?;
        let b = self.fast_value(c, code)?.as_u64()?;
        if self.fast_op(c)? != op::TUPLE2 {
            return None;
        }
        let pool = self.intern_pool(PoolId(a, b));
        self.fast_memoize(c, Pending::Value(pool))?;
        Some(pool)
    }

    /// A list of frames, its EMPTY_LIST read: its memo opcode, then its frames (memo references
    /// or new frame dicts) in one MARK … APPENDS, one item and APPEND, or none.
    fn fast_frames_list(&mut self, c: &mut Cursor) -> Option<()> {
        self.fast_memoize(c, Pending::Frames)?;
        let at = c.p;
        match self.fast_op(c)? {
            op::MARK => loop {
                let code = self.fast_op(c)?;
                if code == op::APPENDS {
                    // Lists of over 1,000 items come in several batches: the general path's.
                    return (self.fast_peek(c)? != op::MARK).then_some(());
                }
                // Most frames are memo references: read here, without a call.
                let frame = match code {
                    op::BINGET | op::LONG_BINGET => self.fast_get_index(c, code, Memo::FRAME)?,
                    _ => self.fast_frame(c, code)?,
                };
                self.fast_frames.push(frame);
            },
            code => {
                // One frame and APPEND, or an empty list followed by the entry's next key.
                let mut one = *c;
                let before = self.fast_memo.len();
                if let Some(frame) = self.fast_frame(&mut one, code)
                    && self.fast_op(&mut one) == Some(op::APPEND)
                {
                    self.fast_frames.push(frame);
                    *c = one;
                } else {
                    self.fast_memo.truncate(before);
                    c.p = at;
                }
                Some(())
            }
        }
    }

    /// A frame in a list of frames: a memo reference to one, or a new `{name, filename, line}`.
    fn fast_frame(&mut self, c: &mut Cursor, code: u8) -> Option<u32> {
        let value = if code == op::EMPTY_DICT {
            let slot = self.fast_memo.len();
            let mut fields = Fields::empty();
            self.fast_items(c, &mut fields, Pending::Dict, false)?;
            if !fields.frame_shaped() {
                return None;
            }
            // A frame (or `None`: not one after all), interned now, as the general path interns
            // it at its SETITEMS.
            let frame = self.compact(c.p - 1, &fields).ok()??;
            // Its memo entry (if it has one: the first written from its opcodes) holds the frame.
            if let Some(first) = self.fast_memo.get_mut(slot)
                && matches!(first.1, Pending::Dict)
            {
                first.1 = Pending::Value(frame);
            }
            frame
        } else {
            self.fast_value(c, code)?
        };
        match value {
            Value::Frame(f) => Some(f),
            _ => None,
        }
    }

    /// The memo opcode that may follow a value: its entry is written at the commit. Only the
    /// next index (what picklers write); any other is the general path's.
    #[inline]
    fn fast_memoize(&mut self, c: &mut Cursor, value: Pending) -> Option<()> {
        let bytes = self.bytes;
        let (index, len) = match *bytes.get(c.p)? {
            op::MEMOIZE => (c.next_memo, 1),
            op::BINPUT => (u32::from(*bytes.get(c.p + 1)?), 2),
            op::LONG_BINPUT => (
                u32::from_le_bytes(*bytes.get(c.p + 1..)?.first_chunk::<4>()?),
                5,
            ),
            _ => return Some(()),
        };
        if index != c.next_memo {
            return None;
        }
        c.p += len;
        c.next_memo += 1;
        self.fast_memo.push((index, value));
        Some(())
    }

    /// A memo entry: one written earlier in this dict, else the memo's.
    #[inline(always)]
    fn fast_get(&self, c: &Cursor, index: u32) -> Option<Value> {
        if index < c.first_pending {
            return self.memo.get(index);
        }
        self.fast_get_pending(index)
    }

    /// A BINGET's or LONG_BINGET's (`code`, read) string or frame (`tag`): its index.
    #[inline(always)]
    fn fast_get_index(&self, c: &mut Cursor, code: u8, tag: u32) -> Option<u32> {
        let index = self.fast_memo_index(c, code)?;
        if index < c.first_pending {
            return self.memo.get_index(index, tag);
        }
        match (self.fast_get_pending(index)?, tag) {
            (Value::Str(i), Memo::STR) | (Value::Frame(i), Memo::FRAME) => Some(i),
            _ => None,
        }
    }

    /// The memo index a BINGET or LONG_BINGET (`code`, read) names.
    #[inline(always)]
    fn fast_memo_index(&self, c: &mut Cursor, code: u8) -> Option<u32> {
        if code == op::BINGET {
            let i = u32::from(*self.bytes.get(c.p)?);
            c.p += 1;
            Some(i)
        } else {
            let i = u32::from_le_bytes(*self.bytes.get(c.p..)?.first_chunk::<4>()?);
            c.p += 4;
            Some(i)
        }
    }

    #[cold]
    fn fast_get_pending(&self, index: u32) -> Option<Value> {
        match self.fast_memo.iter().rev().find(|(i, _)| *i == index)?.1 {
            Pending::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The next opcode, past any FRAME (a length hint between opcodes).
    #[inline]
    fn fast_op(&self, c: &mut Cursor) -> Option<u8> {
        loop {
            let code = *self.bytes.get(c.p)?;
            if code == op::FRAME {
                self.bytes.get(c.p + 8)?;
                c.p += 9;
                continue;
            }
            c.p += 1;
            return Some(code);
        }
    }

    fn fast_peek(&self, c: &Cursor) -> Option<u8> {
        self.fast_op(&mut c.clone())
    }
}
