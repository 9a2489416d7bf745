//! Allocation sites of two snapshots side by side ([`compare_snapshots`]).

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;
use serde::Serialize;

use super::Pair;
use crate::snapshot::{BlockState, LiveIndex, Snapshot};

/// Where a block was allocated, as a person names it: the one rule and the one spelling the
/// report, the viewer and the leak suspects share ([`Snapshot::site`], [`Snapshot::site_name`]:
/// the stack's first frame of the user's own code, else an installed package's, else PyTorch's or
/// Python's, its file by its last two path parts, so that two checkouts name a line alike;
/// [`crate::snapshot::CPP_ONLY`] or [`crate::snapshot::BEFORE_HISTORY`] without a Python frame).
pub fn site_of(snapshot: &Snapshot, stack: u32) -> String {
    snapshot.site_name(snapshot.site(stack))
}

/// What one snapshot holds, by device and by site: what a comparison reads off it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotFacts {
    /// Per device: (reserved, allocated) from the segments (`None` without segments).
    pub held: BTreeMap<u32, (u64, u64)>,
    /// Per device: the most allocated at any time of the trace (`None` without a trace).
    pub trace_peak: BTreeMap<u32, u64>,
    /// Per (device, site): live bytes and blocks at the snapshot.
    pub sites: BTreeMap<(u32, String), (u64, usize)>,
    /// Whether the live blocks are the segments' (else the trace's, replayed to its end).
    pub from_segments: bool,
}

impl SnapshotFacts {
    /// Reads them off a snapshot. The blocks alive are the segments' active blocks (allocated or
    /// waiting to be freed: what the allocator counts as allocated), with their sizes as the
    /// allocator rounded them; a snapshot without segments has its trace replayed to the end.
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut names: HashMap<u32, String> = HashMap::default();
        let mut site = |stack: u32| {
            names
                .entry(stack)
                .or_insert_with(|| site_of(snapshot, stack))
                .clone()
        };
        // Pinned host memory keyed alike in every snapshot (its index follows the CUDA devices).
        let key = |device: u32| {
            if Some(device) == snapshot.host {
                crate::format::HOST_DEVICE
            } else {
                device
            }
        };
        let mut sites: BTreeMap<(u32, String), (u64, usize)> = BTreeMap::new();
        let mut held: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let from_segments = !snapshot.segments.is_empty();
        if from_segments {
            for segment in &snapshot.segments {
                let h = held.entry(key(segment.device)).or_default();
                h.0 += segment.total_size;
                for block in &segment.blocks {
                    if block.state == BlockState::Inactive {
                        continue;
                    }
                    h.1 += block.size;
                    let s = sites
                        .entry((key(segment.device), site(block.stack)))
                        .or_default();
                    s.0 += block.size;
                    s.1 += 1;
                }
            }
        } else {
            for block in LiveIndex::new(snapshot).at(i64::MAX, None) {
                let s = sites
                    .entry((key(block.device), site(block.stack)))
                    .or_default();
                s.0 += block.size;
                s.1 += 1;
            }
        }
        let mut trace_peak: BTreeMap<u32, u64> = BTreeMap::new();
        if !snapshot.entries.is_empty() {
            let trace = snapshot.to_recording();
            for sample in trace.allocator.iter() {
                let peak = trace_peak.entry(key(sample.device)).or_default();
                *peak = (*peak).max(sample.allocated);
            }
        }
        Self {
            held,
            trace_peak,
            sites,
            from_segments,
        }
    }

    /// The devices it says anything about.
    pub fn devices(&self) -> BTreeSet<u32> {
        self.held
            .keys()
            .chain(self.trace_peak.keys())
            .copied()
            .chain(self.sites.keys().map(|(d, _)| *d))
            .collect()
    }

    /// Live bytes and blocks on a device.
    pub fn live(&self, device: u32) -> (u64, usize) {
        self.sites
            .iter()
            .filter(|((d, _), _)| *d == device)
            .fold((0, 0), |(b, n), (_, (bytes, blocks))| {
                (b + bytes, n + blocks)
            })
    }
}

/// One device of two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotDevice {
    /// The device.
    pub device: u32,
    /// Bytes reserved by the allocator (its segments).
    pub reserved: Pair,
    /// Bytes allocated: held by tensors or waiting to be freed.
    pub allocated: Pair,
    /// Reserved − allocated: the allocator's cache, free inside its segments (not fragmentation,
    /// which is free memory in pieces smaller than the requests: the snapshot verdict's finding).
    pub cached: Pair,
    /// The most allocated at any time of the trace.
    pub trace_peak: Pair,
    /// Bytes alive at the snapshot (the sum over the sites).
    pub live_bytes: Pair,
    /// Blocks alive at the snapshot.
    pub live_blocks: Pair,
}

/// Whether a site holds memory in both snapshots or in one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteStatus {
    /// In both.
    Both,
    /// Only in B.
    New,
    /// Only in A.
    Gone,
}

/// One allocation site in two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteChange {
    /// The device.
    pub device: u32,
    /// The site ([`site_of`]).
    pub site: String,
    /// In both, new in B or gone from it.
    pub status: SiteStatus,
    /// Live bytes.
    pub bytes: Pair,
    /// Live blocks.
    pub blocks: Pair,
}

/// Two snapshots compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotDiff {
    /// Per device, every device either snapshot describes.
    pub devices: Vec<SnapshotDevice>,
    /// Per site, the largest change first (a site absent from a side counts as 0 bytes there).
    pub sites: Vec<SiteChange>,
    /// What a reader must know: devices in one snapshot only, a side without segments or trace.
    pub notes: Vec<String>,
}

impl SnapshotDiff {
    /// Why nothing can be compared (no device in common), or `None` when something can.
    pub fn nothing_comparable(&self) -> Option<String> {
        let common = self
            .devices
            .iter()
            .any(|d| d.live_bytes.both() || d.reserved.both() || d.trace_peak.both());
        (!common).then(|| {
            let list = |pick: fn(&SnapshotDevice) -> Option<f64>| {
                let names: Vec<String> = self
                    .devices
                    .iter()
                    .filter(|d| pick(d).is_some())
                    .map(|d| super::device_name(d.device))
                    .collect();
                if names.is_empty() {
                    "no device".to_owned()
                } else {
                    names.join(", ")
                }
            };
            format!(
                "no device in common: A holds {}, B holds {}",
                list(|d| d.live_bytes.a),
                list(|d| d.live_bytes.b)
            )
        })
    }
}

/// Compares two snapshots.
pub fn compare_snapshots(a: &SnapshotFacts, b: &SnapshotFacts) -> SnapshotDiff {
    let (da, db) = (a.devices(), b.devices());
    let mut notes = Vec::new();
    super::devices_in_one(&da, &db, &mut notes);
    for (side, facts) in [("A", a), ("B", b)] {
        if !facts.from_segments {
            notes.push(format!("{side} has no segments: what is alive is its trace replayed to the end, and reserved memory is unknown"));
        }
        if facts.trace_peak.is_empty() {
            notes.push(format!(
                "{side} has no trace: its peak is unknown (record one with torch.cuda.memory._record_memory_history())"
            ));
        }
    }
    let devices = da
        .union(&db)
        .map(|&device| {
            let in_a = da.contains(&device);
            let in_b = db.contains(&device);
            let held = |f: &SnapshotFacts, pick: fn((u64, u64)) -> u64| {
                f.held.get(&device).map(|&h| pick(h) as f64)
            };
            let live = |f: &SnapshotFacts, present: bool| {
                let (bytes, blocks) = f.live(device);
                (
                    present.then_some(bytes as f64),
                    present.then_some(blocks as f64),
                )
            };
            let (la, na) = live(a, in_a);
            let (lb, nb) = live(b, in_b);
            let cached =
                |f: &SnapshotFacts| f.held.get(&device).map(|&(r, al)| r as f64 - al as f64);
            SnapshotDevice {
                device,
                reserved: Pair::new(held(a, |h| h.0), held(b, |h| h.0)),
                allocated: Pair::new(held(a, |h| h.1), held(b, |h| h.1)),
                cached: Pair::new(cached(a), cached(b)),
                trace_peak: Pair::new(
                    a.trace_peak.get(&device).map(|&p| p as f64),
                    b.trace_peak.get(&device).map(|&p| p as f64),
                ),
                live_bytes: Pair::new(la, lb),
                live_blocks: Pair::new(na, nb),
            }
        })
        .collect();
    let common: BTreeSet<u32> = da.intersection(&db).copied().collect();
    let keys: BTreeSet<&(u32, String)> = a
        .sites
        .keys()
        .chain(b.sites.keys())
        .filter(|(d, _)| common.contains(d))
        .collect();
    let mut sites: Vec<SiteChange> = keys
        .into_iter()
        .map(|key| {
            let sa = a.sites.get(key);
            let sb = b.sites.get(key);
            let status = match (sa, sb) {
                (Some(_), None) => SiteStatus::Gone,
                (None, Some(_)) => SiteStatus::New,
                _ => SiteStatus::Both,
            };
            let side = |s: Option<&(u64, usize)>| s.copied().unwrap_or_default();
            let (ba, na) = side(sa);
            let (bb, nb) = side(sb);
            SiteChange {
                device: key.0,
                site: key.1.clone(),
                status,
                bytes: Pair::new(Some(ba as f64), Some(bb as f64)),
                blocks: Pair::new(Some(na as f64), Some(nb as f64)),
            }
        })
        .collect();
    sites.sort_by(|x, y| {
        let size = |s: &SiteChange| s.bytes.change.unwrap_or(0.0).abs();
        size(y)
            .total_cmp(&size(x))
            .then(x.device.cmp(&y.device))
            .then(x.site.cmp(&y.site))
    });
    SnapshotDiff {
        devices,
        sites,
        notes,
    }
}
