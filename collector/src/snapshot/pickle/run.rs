//! The pickle machine's loop: one opcode at a time, over the bytes, with no recursion. (About 600
//! lines on purpose: one `match` over the ~70 opcodes, each arm next to its neighbours.)

use super::{Fields, MAX_STACK, Machine, Obj, Value};
use crate::snapshot::SnapshotError;

/// The pickle opcodes, named as CPython's `pickle.py` names them.
pub(super) mod op {
    // protocols 0 and 1
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    // protocol 2
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    // protocol 3
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    // protocol 4
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    // protocol 5
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

impl Machine<'_> {
    /// Runs the machine over its bytes: the top-level value once STOP is read, or `None` when
    /// the bytes end (between opcodes or inside one) and more are to come: every opcode before
    /// [`Machine::read_to`] has run, the rest waits for the next bytes.
    pub(crate) fn run_window(&mut self) -> Result<Option<Value>, SnapshotError> {
        self.pending = false;
        match self.run() {
            Ok(top) => Ok(Some(top)),
            Err(_) if self.pending => {
                // Every opcode reads its arguments before it changes anything, so the one that
                // was cut short runs again, whole, over the next bytes.
                self.pos = self.op_start;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Runs the machine to STOP and returns the top-level value.
    pub(crate) fn run(&mut self) -> Result<Value, SnapshotError> {
        loop {
            let at = self.pos;
            self.op_start = at;
            if at >= self.bytes.len() {
                return Err(self.past_the_end(
                    "the file ends before the pickle's STOP opcode (truncated)".to_owned(),
                ));
            }
            let code = self.bytes[at];
            self.pos += 1;
            match code {
                op::PROTO => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.err(at, format!("pickle protocol {proto} is newer than 5, the newest this reader knows")));
                    }
                }
                op::FRAME => {
                    self.le::<8>()?; // FRAME: a length hint
                }
                op::STOP => {
                    let value = self.pop(at)?;
                    return Ok(value);
                }
                op::MARK => {
                    if self.marks.len() >= MAX_STACK {
                        return Err(self.err(
                            at,
                            format!(
                                "more than {MAX_STACK} MARKs are open (not what a pickler writes)"
                            ),
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                op::POP => {
                    self.pop(at)?;
                }
                op::POP_MARK => {
                    self.pop_mark(at)?;
                }
                op::DUP => {
                    let top = self.top(at)?;
                    self.mark_shared(top);
                    self.push(top)?;
                }
                op::NONE => self.push(Value::None)?,
                op::NEWTRUE => self.push(Value::Bool(true))?,
                op::NEWFALSE => self.push(Value::Bool(false))?,
                op::BININT => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                op::BININT1 => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                op::BININT2 => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                op::LONG1 => {
                    let n = self.u8()?;
                    let bytes = self.take(u64::from(n), "LONG1")?;
                    let v = long(bytes);
                    self.push(v)?;
                }
                op::LONG4 => {
                    let n = i32::from_le_bytes(self.le()?);
                    if n < 0 {
                        return Err(self.err(at, "LONG4 with a negative length"));
                    }
                    let bytes = self.take(n as u64, "LONG4")?;
                    let v = long(bytes);
                    self.push(v)?;
                }
                op::INT | op::LONG => {
                    let line = self.line()?;
                    let v =
                        text_int(line).ok_or_else(|| self.err(at, "INT/LONG holds no number"))?;
                    self.push(v)?;
                }
                op::FLOAT => {
                    let line = self.line()?;
                    let v = std::str::from_utf8(line)
                        .ok()
                        .and_then(|s| s.trim().parse::<f64>().ok())
                        .ok_or_else(|| self.err(at, "FLOAT holds no number"))?;
                    self.push(Value::Float(v))?;
                }
                op::BINFLOAT => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.push(Value::Float(v))?;
                }
                op::SHORT_BINUNICODE
                | op::BINUNICODE
                | op::BINUNICODE8
                | op::SHORT_BINSTRING
                | op::BINSTRING => {
                    let n = match code {
                        op::SHORT_BINUNICODE | op::SHORT_BINSTRING => u64::from(self.u8()?),
                        op::BINUNICODE => u64::from(u32::from_le_bytes(self.le()?)),
                        op::BINSTRING => {
                            let n = i32::from_le_bytes(self.le()?);
                            u64::try_from(n)
                                .map_err(|_| self.err(at, "BINSTRING with a negative length"))?
                        }
                        _ => u64::from_le_bytes(self.le()?),
                    };
                    let bytes = self.take(n, "a string")?;
                    let id = match std::str::from_utf8(bytes) {
                        Ok(s) => self.intern(s),
                        Err(_) if matches!(code, op::SHORT_BINSTRING | op::BINSTRING) => {
                            // Python 2 byte strings: read them as Latin-1.
                            let s: String = bytes.iter().map(|&b| char::from(b)).collect();
                            self.intern(&s)
                        }
                        Err(_) => return Err(self.err(at, "a string is not valid UTF-8")),
                    };
                    self.push(Value::Str(id))?;
                }
                op::SHORT_BINBYTES | op::BINBYTES | op::BINBYTES8 | op::BYTEARRAY8 => {
                    let n = match code {
                        op::SHORT_BINBYTES => u64::from(self.u8()?),
                        op::BINBYTES => u64::from(u32::from_le_bytes(self.le()?)),
                        _ => u64::from_le_bytes(self.le()?),
                    };
                    self.take(n, "bytes")?;
                    self.push(Value::Bytes(n))?;
                }
                op::EMPTY_LIST => {
                    let v = self.alloc(Obj::List(Vec::new()));
                    self.push(v)?;
                }
                op::EMPTY_TUPLE => {
                    let v = self.alloc(Obj::Tuple(Vec::new()));
                    self.push(v)?;
                }
                op::EMPTY_DICT => {
                    if self.fast_entry()? {
                        continue;
                    }
                    let v = self.alloc(Obj::Dict(Vec::new()));
                    self.push(v)?;
                }
                op::EMPTY_SET => {
                    let v = self.alloc(Obj::Set(Vec::new()));
                    self.push(v)?;
                }
                op::LIST => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::List(items));
                    self.push(v)?;
                }
                op::TUPLE => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::Tuple(items));
                    self.push(v)?;
                }
                op::FROZENSET => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::Set(items));
                    self.push(v)?;
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1 + 1);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.err(
                            at,
                            "TUPLE with too few values on the stack (corrupt opcodes)",
                        ));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.alloc(Obj::Tuple(items));
                    self.push(v)?;
                }
                op::DICT => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(
                            self.err(at, "DICT with an odd number of values (corrupt opcodes)")
                        );
                    }
                    let pairs = items.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect();
                    let v = self.alloc(Obj::Dict(pairs));
                    self.push(v)?;
                    let index = self.stack.len() - 1;
                    self.finished_dict(at, index)?;
                }
                op::APPEND => {
                    let item = self.pop(at)?;
                    let list = self.top(at)?;
                    self.extend_list(at, list, std::iter::once(item))?;
                }
                op::APPENDS => {
                    let mark = self.pop_mark_index(at)?;
                    let list = self.below(at, mark)?;
                    // The items leave the stack as they are added (no vector of them between).
                    let mut stack = std::mem::take(&mut self.stack);
                    let added = self.extend_list(at, list, stack.drain(mark..));
                    self.stack = stack;
                    added?;
                }
                op::ADDITEMS => {
                    let items = self.pop_mark(at)?;
                    let set = self.top(at)?;
                    match set {
                        Value::Obj(i) => match self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
                            Some(Obj::Set(v)) => v.extend(items),
                            _ => {
                                return Err(self.err(at, "ADDITEMS on something that is not a set"));
                            }
                        },
                        _ => return Err(self.err(at, "ADDITEMS on something that is not a set")),
                    }
                }
                op::SETITEM => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    let pair = self.stack.len().saturating_sub(2);
                    if pair < floor || self.stack.len() < 2 {
                        return Err(self.err(at, "the stack is empty (corrupt opcodes)"));
                    }
                    self.set_items(at, pair)?;
                }
                op::SETITEMS => {
                    let mark = self.pop_mark_index(at)?;
                    if !(self.stack.len() - mark).is_multiple_of(2) {
                        return Err(self.err(
                            at,
                            "SETITEMS with an odd number of values (corrupt opcodes)",
                        ));
                    }
                    self.set_items(at, mark)?;
                }
                op::BINGET | op::LONG_BINGET => {
                    // A run of GETs (a frames list is twenty in a row) is read here, one after
                    // the other, without going back through the dispatch.
                    let (mut code, mut at) = (code, at);
                    loop {
                        let i = if code == op::BINGET {
                            u32::from(self.u8()?)
                        } else {
                            u32::from_le_bytes(self.le()?)
                        };
                        let v = self.memo_get(at, i)?;
                        self.push(v)?;
                        match self.bytes.get(self.pos) {
                            Some(&next @ (op::BINGET | op::LONG_BINGET)) => {
                                (code, at) = (next, self.pos);
                                self.op_start = at;
                                self.pos += 1;
                            }
                            _ => break,
                        }
                    }
                }
                op::GET => {
                    let line = self.line()?;
                    let i = parse_index(line).ok_or_else(|| self.err(at, "GET holds no index"))?;
                    let v = self.memo_get(at, i)?;
                    self.push(v)?;
                }
                op::BINPUT => {
                    let i = self.u8()?;
                    let v = self.top(at)?;
                    self.memo_put(u32::from(i), v);
                }
                op::LONG_BINPUT => {
                    let i = u32::from_le_bytes(self.le()?);
                    let v = self.top(at)?;
                    self.memo_put(i, v);
                }
                op::PUT => {
                    let line = self.line()?;
                    let i = parse_index(line).ok_or_else(|| self.err(at, "PUT holds no index"))?;
                    let v = self.top(at)?;
                    self.memo_put(i, v);
                }
                op::MEMOIZE => {
                    let v = self.top(at)?;
                    let i = u32::try_from(self.memo.len())
                        .map_err(|_| self.err(at, "too many memo entries"))?;
                    self.memo_put(i, v);
                }
                op::GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let full = global_name(module, name);
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                op::STACK_GLOBAL => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let text = |v: Value, m: &Self| match v {
                        Value::Str(i) => m.strings.get(i as usize).map(|s| s.to_string()),
                        _ => None,
                    };
                    let full = match (text(module, self), text(name, self)) {
                        (Some(m), Some(n)) => format!("{m}.{n}"),
                        _ => return Err(self.err(at, "STACK_GLOBAL needs two strings")),
                    };
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                // Calls and instances: the result is an opaque object named by its class.
                op::REDUCE | op::NEWOBJ => {
                    self.pop(at)?;
                    let class = self.pop(at)?;
                    self.push(opaque_of(class))?;
                }
                op::NEWOBJ_EX => {
                    self.pop(at)?;
                    self.pop(at)?;
                    let class = self.pop(at)?;
                    self.push(opaque_of(class))?;
                }
                op::BUILD => {
                    self.pop(at)?; // the state; the object stays opaque
                }
                op::OBJ => {
                    let items = self.pop_mark(at)?;
                    let class = items.first().copied().unwrap_or(Value::None);
                    self.push(opaque_of(class))?;
                }
                op::INST => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.pop_mark(at)?;
                    let full = global_name(module, name);
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                op::BINPERSID => {
                    self.pop(at)?;
                    let id = self.intern("persistent id");
                    self.push(Value::Opaque(id))?;
                }
                op::PERSID => {
                    self.line()?;
                    let id = self.intern("persistent id");
                    self.push(Value::Opaque(id))?;
                }
                op::EXT1 | op::EXT2 | op::EXT4 => {
                    let n = match code {
                        op::EXT1 => 1,
                        op::EXT2 => 2,
                        _ => 4,
                    };
                    self.take(n as u64, "an extension code")?;
                    let id = self.intern("extension object");
                    self.push(Value::Opaque(id))?;
                }
                op::NEXT_BUFFER => {
                    let id = self.intern("out-of-band buffer");
                    self.push(Value::Opaque(id))?;
                }
                op::READONLY_BUFFER => {}
                op::STRING | op::UNICODE => {
                    let line = self.line()?;
                    let s = String::from_utf8_lossy(line);
                    let s = if code == op::STRING {
                        s.trim_matches(|c| c == '\'' || c == '"').to_owned()
                    } else {
                        s.into_owned()
                    };
                    let id = self.intern(&s);
                    self.push(Value::Str(id))?;
                }
                other => {
                    return Err(self.err(
                        at,
                        format!("unknown opcode 0x{other:02x} (not a pickle, or a corrupt one)"),
                    ));
                }
            }
        }
    }

    #[inline]
    pub(super) fn push(&mut self, value: Value) -> Result<(), SnapshotError> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.err(
                self.pos,
                format!(
                    "more than {MAX_STACK} values wait on the stack (not what a pickler writes)"
                ),
            ));
        }
        self.stack.push(value);
        Ok(())
    }

    pub(super) fn extend_list(
        &mut self,
        at: usize,
        list: Value,
        items: impl Iterator<Item = Value>,
    ) -> Result<(), SnapshotError> {
        match list {
            Value::Obj(i) => match self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
                Some(obj @ (Obj::List(_) | Obj::EntryRun { .. })) => {
                    let mut items = items;
                    loop {
                        match obj {
                            // A list of anything else (frames): the items at once.
                            Obj::List(v) if !v.is_empty() => {
                                v.extend(items);
                                break;
                            }
                            _ => match items.next() {
                                Some(item) => {
                                    if let Obj::List(v) = obj
                                        && !matches!(item, Value::Entry(_))
                                    {
                                        // It stays a list: room for the rest at once.
                                        v.reserve(items.size_hint().0 + 1);
                                    }
                                    append(obj, item);
                                }
                                None => break,
                            },
                        }
                    }
                    Ok(())
                }
                _ => Err(self.err(
                    at,
                    "APPEND to something that is not a list (corrupt opcodes)",
                )),
            },
            // Appending to an opaque object (a list subclass): ignore the items.
            Value::Opaque(_) => Ok(()),
            _ => Err(self.err(
                at,
                "APPEND to something that is not a list (corrupt opcodes)",
            )),
        }
    }

    /// Adds the key/value pairs from stack position `from` on to the dict just below them, and
    /// takes them off the stack. A dict that is still empty and gets all it holds at once (what
    /// a pickler writes for a frame or a trace entry) is made compact from the stack directly.
    pub(super) fn set_items(&mut self, at: usize, from: usize) -> Result<(), SnapshotError> {
        let index = from
            .checked_sub(1)
            .ok_or_else(|| self.err(at, "SETITEM with no dict (corrupt opcodes)"))?;
        let dict = self.below(at, from)?;
        let not_a_dict = "SETITEM on something that is not a dict (corrupt opcodes)";
        let i = match dict {
            Value::Obj(i) => i,
            Value::Opaque(_) => {
                self.stack.truncate(from);
                return Ok(());
            }
            _ => return Err(self.err(at, not_a_dict)),
        };
        let empty = match self.arena.get(i as usize).map(|s| &s.obj) {
            Some(Obj::Dict(pairs)) => pairs.is_empty(),
            _ => return Err(self.err(at, not_a_dict)),
        };
        if empty {
            let fields = Fields::of(pairs(&self.stack[from..]));
            if let Some(compact) = self.compact(at, &fields)? {
                self.stack.truncate(from);
                self.replace(i, index, compact);
                return Ok(());
            }
        }
        if let Some(Obj::Dict(held)) = self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
            held.extend(pairs(&self.stack[from..]));
        }
        self.stack.truncate(from);
        if empty {
            // Its items were judged just above: neither a frame nor a trace entry.
            return Ok(());
        }
        self.finished_dict(at, index)
    }
}

/// Key/value pairs laid out one after the other.
fn pairs(items: &[Value]) -> impl Iterator<Item = (Value, Value)> + '_ {
    items.chunks_exact(2).map(|kv| (kv[0], kv[1]))
}

/// Appends `item` to a list: a list of trace entries in order stays a run of them.
#[inline]
fn append(list: &mut Obj, item: Value) {
    match (&mut *list, item) {
        (Obj::List(items), Value::Entry(id)) if items.is_empty() => {
            *list = Obj::EntryRun { first: id, len: 1 };
        }
        (Obj::List(items), item) => items.push(item),
        (Obj::EntryRun { first, len }, Value::Entry(id))
            if first.checked_add(*len) == Some(id) && *len < u32::MAX =>
        {
            *len += 1;
        }
        (Obj::EntryRun { first, len }, item) => {
            let mut items: Vec<Value> = (*first..*first + *len).map(Value::Entry).collect();
            items.push(item);
            *list = Obj::List(items);
        }
        _ => {}
    }
}

/// `module.name` of a GLOBAL or INST.
fn global_name(module: &[u8], name: &[u8]) -> String {
    format!(
        "{}.{}",
        String::from_utf8_lossy(module),
        String::from_utf8_lossy(name)
    )
}

fn opaque_of(class: Value) -> Value {
    match class {
        Value::Opaque(id) => Value::Opaque(id),
        _ => Value::Opaque(0), // "name": an unnamed object
    }
}

/// [`long`] of the `n` bytes at `at` in `bytes` (`None`: fewer remain). Up to 8 of them are read
/// as one 8-byte number where 8 bytes remain, the extra ones shifted out and the sign extended
/// from the top byte: an entry's address and time, where a loop of a byte at a time was a tenth
/// of the parse in a browser tab.
pub(super) fn long_at(bytes: &[u8], at: usize, n: usize) -> Option<Value> {
    let digits = bytes.get(at..at.checked_add(n)?)?;
    Some(match bytes.get(at..).and_then(|b| b.first_chunk::<8>()) {
        Some(eight) if (1..=8).contains(&n) => {
            let unused = 64 - 8 * n as u32;
            Value::Int(((u64::from_le_bytes(*eight) << unused) as i64) >> unused)
        }
        _ => long(digits),
    })
}

/// A little-endian two's-complement integer of any length.
pub(super) fn long(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Int(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    if bytes.len() <= 8 {
        // Byte by byte into a register: a copy into a buffer went through `memcpy`, whose
        // partial stores then stalled the load of the whole buffer (addresses are LONG1s).
        let mut v = 0u64;
        for (i, &b) in bytes.iter().enumerate() {
            v |= u64::from(b) << (8 * i);
        }
        let unused = 64 - 8 * bytes.len() as u32;
        // Sign-extended from the top byte read (a shift by 64 would overflow: all 8 used).
        let v = if unused == 0 {
            v as i64
        } else {
            ((v << unused) as i64) >> unused
        };
        return Value::Int(v);
    }
    // Longer: fits u64 when the extra bytes are zero (a positive number ≥ 2^63).
    if !negative && bytes[8..].iter().all(|&b| b == 0) {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&bytes[..8]);
        let v = u64::from_le_bytes(buf);
        return match i64::try_from(v) {
            Ok(v) => Value::Int(v),
            Err(_) => Value::U64(v),
        };
    }
    if negative && bytes[8..].iter().all(|&b| b == 0xff) && bytes[7] & 0x80 != 0 {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&bytes[..8]);
        return Value::Int(i64::from_le_bytes(buf));
    }
    // Too large for 64 bits: an approximation (only its size matters to the messages).
    let mut v = 0f64;
    for &b in bytes.iter().rev() {
        v = v * 256.0 + f64::from(if negative { !b } else { b });
    }
    Value::Huge(if negative { -(v + 1.0) } else { v })
}

fn text_int(line: &[u8]) -> Option<Value> {
    let s = std::str::from_utf8(line).ok()?.trim().trim_end_matches('L');
    match s {
        "00" => return Some(Value::Bool(false)),
        "01" => return Some(Value::Bool(true)),
        _ => {}
    }
    if let Ok(v) = s.parse::<i64>() {
        return Some(Value::Int(v));
    }
    if let Ok(v) = s.parse::<u64>() {
        return Some(Value::U64(v));
    }
    s.parse::<f64>().ok().map(Value::Huge)
}

fn parse_index(line: &[u8]) -> Option<u32> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_of_up_to_eight_bytes_in_every_width_that_holds_them() {
        let values = [
            0,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            256,
            0x7F00_0000_1234,
            -(1 << 40),
            i64::MAX,
            i64::MIN,
        ];
        for v in values {
            let all = v.to_le_bytes();
            for n in 1..=8 {
                let bytes = &all[..n];
                // The width holds v when the bytes above it are the sign of its top byte.
                let sign = if bytes[n - 1] & 0x80 != 0 { 0xff } else { 0 };
                if all[n..].iter().all(|&b| b == sign) {
                    assert_eq!(long(bytes), Value::Int(v), "{v} in {n} bytes");
                }
            }
        }
    }

    #[test]
    pub(super) fn longs_of_every_width() {
        assert_eq!(long(&[]), Value::Int(0));
        assert_eq!(long(&[0xff]), Value::Int(-1));
        assert_eq!(long(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(long(&[0xff, 0x7f]), Value::Int(32767));
        // 2^63 needs 9 bytes: 00 .. 80 00.
        let mut b = [0u8; 9];
        b[7] = 0x80;
        assert_eq!(long(&b), Value::U64(1 << 63));
        // 2^64 - 1.
        let mut b = [0xffu8; 9];
        b[8] = 0;
        assert_eq!(long(&b), Value::U64(u64::MAX));
        // -2^63 in 9 bytes (sign-extended).
        let mut b = [0u8; 9];
        b[7] = 0x80;
        b[8] = 0xff;
        assert_eq!(long(&b), Value::Int(i64::MIN));
        // 2^80.
        let mut b = [0u8; 11];
        b[10] = 0x01;
        assert_eq!(long(&b), Value::Huge(2f64.powi(80)));
    }
}
