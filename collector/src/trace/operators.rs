//! The operators' spans of a chrome trace (`cat: cpu_op`), kept by thread in 16 bytes each (a
//! big trace holds millions), each name once: what was running when memory peaked.

use std::collections::HashMap;

/// An operator's span, its name among [`Operators::names`].
#[derive(Clone, Copy, Debug)]
struct Op {
    begin: f64,
    dur: f32,
    name: u32,
}

const _: () = assert!(std::mem::size_of::<Op>() == 16);

/// A thread's id as the spans keep it: its low 32 bits (`u32::MAX`: none given).
pub(super) fn thread(tid: Option<i64>) -> u32 {
    tid.map_or(u32::MAX, |t| t as u32)
}

/// How many of the operators around a moment are named (the innermost).
const AROUND: usize = 3;

/// Every operator's span of a trace, by thread.
#[derive(Default)]
pub(super) struct Operators {
    by_thread: HashMap<u32, Vec<Op>>,
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Operators {
    /// One more span: `name` ran on `thread` ([`thread`]) from `begin` for `dur` (µs).
    pub(super) fn add(&mut self, name: &str, thread: u32, begin: f64, dur: f64) {
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(name.to_owned());
                self.ids.insert(name.to_owned(), id);
                id
            }
        };
        self.by_thread.entry(thread).or_default().push(Op {
            begin,
            dur: dur.max(0.0) as f32,
            name: id,
        });
    }

    /// What was running on `thread` at `ts`, in a phrase: ", while aten::linear › aten::mm ›
    /// aten::empty ran" (the innermost few, outermost first: the innermost is most often the
    /// allocation itself, the ones around it say what made it).
    pub(super) fn running(&self, thread: u32, ts: f64) -> String {
        let mut around: Vec<&Op> = self
            .by_thread
            .get(&thread)
            .into_iter()
            .flatten()
            .filter(|o| o.begin <= ts && ts <= o.begin + f64::from(o.dur))
            .collect();
        around.sort_by(|a, b| a.begin.total_cmp(&b.begin).then(b.dur.total_cmp(&a.dur)));
        let names: Vec<&str> = around
            .iter()
            .skip(around.len().saturating_sub(AROUND))
            .filter_map(|o| self.names.get(o.name as usize).map(String::as_str))
            .collect();
        match names.is_empty() {
            false => format!(", while {} ran", names.join(" › ")),
            true if self.by_thread.is_empty() => {
                ", and the trace holds no operator spans to say what ran".to_owned()
            }
            true => ", in no operator's span on its thread".to_owned(),
        }
    }
}
