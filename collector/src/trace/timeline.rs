//! The memory timelines of `prof.export_memory_timeline` as a [`Recording`]: the raw form
//! (`*.raw.json.gz`, rows `[time_ns, action, bytes, category]`) and the JSON form (`*.json`,
//! `[times_us, sizes]`, one list of bytes per category for each time). Allocated memory is the
//! sum of the categories; the categories become the recording's categories (parameters,
//! gradients, optimizer state; the rest is `total`'s remainder) and one curve each.
//!
//! The category index is PyTorch's `_CATEGORY_TO_INDEX` (`torch/profiler/_memory_profiler.py`):
//! the order of `_CATEGORY_TO_COLORS`, which is not the order of the `Category` enum.

use serde_json::Value;

use super::TraceError;
use crate::recording::{
    AllocatorSample, Categories, Chunk, Column, Device, End, Header, Note, Origin, Record,
    Recording, SeriesKey, SeriesKind,
};

/// The categories by index, as PyTorch's `_CATEGORY_TO_INDEX` numbers them (7: none known).
pub const CATEGORIES: [&str; 8] = [
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
];

const PARAMETER: usize = 0;
const OPTIMIZER_STATE: usize = 1;
const GRADIENT: usize = 5;

/// At most this many category records (taken at instants evenly spread over the timeline).
const CATEGORY_POINTS: usize = 256;

/// The bytes per category after each distinct time.
struct Levels {
    /// Nanoseconds since the epoch.
    times_ns: Vec<i64>,
    sizes: Vec<[i64; 8]>,
}

/// A memory timeline's JSON as a recording.
pub fn read_timeline(bytes: &[u8]) -> Result<Recording, TraceError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|err| super::json_error(&err))?;
    let Value::Array(top) = value else {
        return Err(TraceError::NotATrace {
            found: "JSON that is not an array".to_owned(),
        });
    };
    // `[times, sizes]`: two arrays, the second of arrays.
    let json_form = top.len() == 2
        && top[0]
            .as_array()
            .is_some_and(|t| t.iter().all(Value::is_number))
        && top[1]
            .as_array()
            .is_some_and(|s| s.iter().all(Value::is_array));
    let (levels, rows, form) = if json_form {
        (
            json_levels(&top)?,
            top[0].as_array().map_or(0, Vec::len),
            "JSON",
        )
    } else {
        (raw_levels(&top)?, top.len(), "raw")
    };
    Ok(to_recording(&levels, rows, form))
}

/// `[[time_ns, action, bytes, category], …]`, time -1 for memory that existed before profiling
/// (placed at the first time, as PyTorch's own plot does).
fn raw_levels(rows: &[Value]) -> Result<Levels, TraceError> {
    let bad = |row: usize, why: &str| TraceError::Timeline {
        row,
        why: why.to_owned(),
    };
    let mut parsed = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let Some(cells) = row.as_array().filter(|c| c.len() == 4) else {
            return Err(bad(i, "not [time, action, bytes, category]"));
        };
        let int = |k: usize| cells[k].as_i64();
        let (Some(t), Some(action), Some(bytes), Some(category)) = (int(0), int(1), int(2), int(3))
        else {
            return Err(bad(i, "a cell that is not a whole number"));
        };
        if !(1..=4).contains(&action) {
            return Err(bad(i, "an action other than 1-4"));
        }
        let Some(category) = usize::try_from(category).ok().filter(|&c| c < 8) else {
            return Err(bad(i, "a category other than 0-7"));
        };
        parsed.push((t, bytes, category));
    }
    let first = parsed
        .iter()
        .map(|p| p.0)
        .filter(|&t| t >= 0)
        .min()
        .unwrap_or(0);
    let mut levels = Levels {
        times_ns: Vec::new(),
        sizes: Vec::new(),
    };
    let mut now = [0i64; 8];
    for (k, &(t, bytes, category)) in parsed.iter().enumerate() {
        let t = if t < 0 { first } else { t };
        now[category] = now[category].saturating_add(bytes);
        let last_at_t = parsed.get(k + 1).is_none_or(|next| {
            let next_t = if next.0 < 0 { first } else { next.0 };
            next_t != t
        });
        if last_at_t {
            levels.times_ns.push(t);
            levels.sizes.push(now);
        }
    }
    Ok(levels)
}

/// `[times_us, sizes]`: each entry of sizes is `[0, bytes of category 0, …, of category 7]`.
fn json_levels(top: &[Value]) -> Result<Levels, TraceError> {
    let (Some(times), Some(sizes)) = (top[0].as_array(), top[1].as_array()) else {
        return Err(TraceError::NotATrace {
            found: "an array that is not [times, sizes]".to_owned(),
        });
    };
    if times.len() != sizes.len() {
        return Err(TraceError::Timeline {
            row: times.len().min(sizes.len()),
            why: format!("{} times and {} sizes", times.len(), sizes.len()),
        });
    }
    let mut levels = Levels {
        times_ns: Vec::with_capacity(times.len()),
        sizes: Vec::with_capacity(times.len()),
    };
    for (i, (t, row)) in times.iter().zip(sizes).enumerate() {
        let cells = row.as_array().map(Vec::as_slice).unwrap_or_default();
        let values: Option<Vec<i64>> = cells.iter().map(Value::as_i64).collect();
        let (Some(t), Some(values)) = (t.as_i64(), values) else {
            return Err(TraceError::Timeline {
                row: i,
                why: "a time or size that is not a whole number".to_owned(),
            });
        };
        // PyTorch writes a leading 0, then one size per category.
        let per = values
            .get(values.len().saturating_sub(8)..)
            .unwrap_or_default();
        if values.len() < 8 {
            return Err(TraceError::Timeline {
                row: i,
                why: format!(
                    "{} sizes where 9 (0 and 8 categories) were expected",
                    values.len()
                ),
            });
        }
        let mut now = [0i64; 8];
        now.copy_from_slice(per);
        levels.times_ns.push(t.saturating_mul(1000));
        levels.sizes.push(now);
    }
    Ok(levels)
}

fn to_recording(levels: &Levels, rows: usize, form: &str) -> Recording {
    let t0 = levels
        .times_ns
        .iter()
        .copied()
        .filter(|&t| t >= 0)
        .min()
        .unwrap_or(0);
    let t_ns = |t: i64| u64::try_from(t.saturating_sub(t0)).unwrap_or(0);
    let mut header = Header::new(
        u64::try_from(t0).unwrap_or(0),
        String::new(),
        vec![
            crate::recording::Imported::MemoryTimeline
                .command()
                .to_owned(),
        ],
    );
    header.devices = vec![Device {
        index: 0,
        name: "cuda:0".to_owned(),
        uuid: String::new(),
        total_bytes: 0,
    }];
    let mut recording = Recording::new(header);
    let origin = Origin::default();
    let clamp = |v: i64| u64::try_from(v.max(0)).unwrap_or(0);
    let total = |s: &[i64; 8]| clamp(s.iter().sum());
    let mut peak = 0;
    for (t, s) in levels.times_ns.iter().zip(&levels.sizes) {
        let allocated = total(s);
        peak = peak.max(allocated);
        recording.allocator.push(AllocatorSample {
            t_ns: t_ns(*t),
            origin,
            device: 0,
            allocated,
            reserved: allocated,
            peak,
            ..AllocatorSample::default()
        });
    }
    // One curve per category.
    let times: Vec<u64> = levels.times_ns.iter().map(|&t| t_ns(t)).collect();
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: CATEGORIES
            .iter()
            .enumerate()
            .map(|(k, name)| Column {
                series: SeriesKey::device(SeriesKind::Other(format!("category_{name}")), 0),
                values: levels.sizes.iter().map(|s| clamp(s[k])).collect(),
                valid: None,
            })
            .collect(),
    }));
    // The categories at instants spread evenly, numbered as steps.
    let n = levels.times_ns.len();
    let stride = n.div_ceil(CATEGORY_POINTS).max(1);
    let picks = (0..n)
        .step_by(stride)
        .chain((n > 0 && !(n - 1).is_multiple_of(stride)).then(|| n - 1));
    for (k, i) in picks.enumerate() {
        let s = &levels.sizes[i];
        recording.push(Record::Categories(Categories {
            t_ns: t_ns(levels.times_ns[i]),
            origin,
            step: Some(k as u64),
            device: Some(0),
            parameters: clamp(s[PARAMETER]),
            gradients: clamp(s[GRADIENT]),
            gradients_at_last_end: None,
            optimizer_state: vec![clamp(s[OPTIMIZER_STATE])],
            total: Some(total(s)),
        }));
    }
    let last = levels.sizes.last().copied().unwrap_or_default();
    let at_end: Vec<String> = CATEGORIES
        .iter()
        .zip(last)
        .filter(|(_, b)| *b != 0)
        .map(|(name, b)| format!("{name} {}", crate::format::format_bytes(clamp(b) as f64)))
        .collect();
    recording.push(Record::Note(Note {
        t_ns: 0,
        text: format!(
            "imported from a PyTorch memory timeline (export_memory_timeline, {form} form): {rows} rows, {n} instants; at the end: {}; the file names no device (shown as cuda:0), no steps (the categories are taken at {} instants, numbered as steps) and no reserved memory (shown equal to allocated)",
            if at_end.is_empty() {
                "nothing".to_owned()
            } else {
                at_end.join(", ")
            },
            recording.categories.len(),
        ),
    }));
    // The profiler wrote the file whole: the recording is complete (how the job ended is not
    // in it).
    recording.end = Some(End {
        t_ns: recording.duration_ns(),
        records: 0,
        samples: recording.sample_count(),
        dropped: 0,
    });
    recording.shrink_to_fit();
    recording
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_rows_sum_per_category_and_time() {
        // Preexisting 100 of parameters; at 2000 ns, 50 of activations, then 30 of gradients
        // at 3000 ns while the activations are freed.
        let raw = br#"[[-1, 1, 100, 0], [2000, 2, 50, 4], [3000, 2, 30, 5], [3000, 4, -50, 4]]"#;
        let r = read_timeline(raw).expect("a timeline");
        let allocated: Vec<(u64, u64)> =
            r.allocator.iter().map(|s| (s.t_ns, s.allocated)).collect();
        assert_eq!(allocated, [(0, 150), (1000, 130)]);
        let last = r.categories.last().expect("categories");
        assert_eq!(
            (last.parameters, last.gradients, last.total),
            (100, 30, Some(130))
        );
        assert_eq!(last.rest(), Some(0));
        let activation = r
            .series(&SeriesKey::device(
                SeriesKind::Other("category_activation".to_owned()),
                0,
            ))
            .expect("a curve");
        assert_eq!(activation.values.iter().collect::<Vec<_>>(), [50, 0]);
    }

    #[test]
    fn the_json_form_reads_too() {
        let json =
            br#"[[10, 20], [[0, 100, 0, 0, 0, 0, 0, 0, 0], [0, 100, 8, 0, 0, 0, 30, 0, 0]]]"#;
        let r = read_timeline(json).expect("a timeline");
        let allocated: Vec<(u64, u64)> =
            r.allocator.iter().map(|s| (s.t_ns, s.allocated)).collect();
        assert_eq!(allocated, [(0, 100), (10_000, 138)]);
        let last = r.categories.last().expect("categories");
        assert_eq!(last.optimizer_state, [8]);
        assert_eq!(last.gradients, 30);
    }

    #[test]
    fn bad_rows_are_named() {
        let err = read_timeline(b"[[1, 2, 3]]").expect_err("bad row");
        assert_eq!(
            err.to_string(),
            "a memory timeline with a bad row 0: not [time, action, bytes, category]"
        );
        let err = read_timeline(b"[[1, 2, 3, 9]]").expect_err("bad category");
        assert!(err.to_string().contains("category other than 0-7"), "{err}");
    }
}
