//! Laying out one device's trace as bands ([`DeviceTimeline::lay_out`]), and the checkpoints
//! that let a step's live bands be read without a sweep.

use super::*;

impl DeviceTimeline {
    /// Lays out the entries `first..first + len` of one device.
    pub(super) fn lay_out(
        snapshot: &Snapshot,
        device: u32,
        first: usize,
        len: usize,
        legacy_free: &[u32],
        sites: &mut Sites<'_>,
    ) -> Self {
        let mut lacks = Lacks {
            entries_left_out: len.saturating_sub(MAX_STEPS),
            ..Lacks::default()
        };
        let len = len.min(MAX_STEPS);
        let ends = |a: Action| match a {
            Action::FreeCompleted => true,
            Action::Other(i) => legacy_free.contains(&u32::from(i)),
            _ => false,
        };
        // Bands allocated in the trace, and those freed without being allocated, apart: the
        // latter go below the former once their number is known.
        let mut traced: Vec<Band> = Vec::with_capacity(len / 3 + 1);
        let mut freed_first: Vec<Band> = Vec::new();
        // The frees in order, by (list, index): PRE marks `freed_first`.
        let mut frees: Vec<u32> = Vec::with_capacity(len / 3 + 1);
        // Each address' latest block (PRE marks `freed_first`), and whether it is alive.
        let mut latest: HashMap<u64, (u32, bool)> = HashMap::with_capacity(1024);
        let mut segments_seen: foldhash::HashSet<u64> = foldhash::HashSet::default();
        // The segments' bytes as the trace changes them, and at each out-of-memory entry
        // (with the bytes it said were free).
        let mut reserved: i128 = 0;
        let mut ooms: Vec<(i128, u64)> = Vec::new();
        let mut annotated: Vec<(u64, u32)> = Vec::new();
        for k in 0..len {
            let g = first + k;
            let Some(e) = snapshot.entries.get(g) else {
                break;
            };
            let step = k as u32 + 1;
            match e.action() {
                Action::Alloc => {
                    if let Some((at, alive)) = latest.get_mut(&e.addr)
                        && *alive
                    {
                        lacks.allocs_over_live += 1;
                        frees.push(*at);
                        let band = if *at & PRE != 0 {
                            &mut freed_first[(*at & INDEX) as usize]
                        } else {
                            &mut traced[*at as usize]
                        };
                        band.free = step;
                    }
                    let site = sites.of(e.stack);
                    latest.insert(e.addr, (traced.len() as u32, true));
                    traced.push(Band {
                        alloc: step,
                        free: NEVER,
                        source: g as u32,
                        site,
                        size: e.size,
                    });
                }
                a if ends(a) => match latest.get_mut(&e.addr) {
                    Some((at, alive)) => {
                        if *alive {
                            *alive = false;
                            frees.push(*at);
                            traced[*at as usize].free = step;
                        }
                        // Else a repeat of a free already seen.
                    }
                    None => {
                        lacks.frees_without_alloc += 1;
                        let at = PRE | freed_first.len() as u32;
                        latest.insert(e.addr, (at, false));
                        frees.push(at);
                        let site = sites.of(e.stack);
                        freed_first.push(Band {
                            alloc: 0,
                            free: step,
                            source: PRE | g as u32,
                            site,
                            size: e.size,
                        });
                    }
                },
                Action::SegmentAlloc | Action::SegmentMap => {
                    segments_seen.insert(e.addr);
                    reserved += i128::from(e.size);
                }
                Action::SegmentFree | Action::SegmentUnmap => reserved -= i128::from(e.size),
                Action::Oom => ooms.push((reserved, snapshot.entries.device_free(g))),
                Action::Annotate => annotated.push((e.addr, step)),
                _ => {}
            }
        }
        // The blocks the segments hold that the trace never mentions.
        let mut resident: Vec<Resident> = Vec::new();
        let mut resident_bands: Vec<Band> = Vec::new();
        let mut reserved_end: u64 = 0;
        for s in snapshot.segments.iter().filter(|s| s.device == device) {
            reserved_end += s.total_size;
            if !segments_seen.contains(&s.address) {
                lacks.segments_without_alloc += 1;
            }
            for b in &s.blocks {
                if b.state != BlockState::ActiveAllocated {
                    continue;
                }
                match latest.get(&b.address) {
                    Some((_, true)) => {}
                    Some((_, false)) => lacks.unexplained_live += 1,
                    None => {
                        lacks.blocks_before_trace += 1;
                        let site = sites.of(b.stack);
                        resident_bands.push(Band {
                            alloc: 0,
                            free: NEVER,
                            source: PRE | RESIDENT | resident.len() as u32,
                            site,
                            size: b.asked(),
                        });
                        resident.push(Resident {
                            addr: b.address,
                            stack: b.stack,
                            stream: s.stream,
                        });
                    }
                }
            }
        }
        drop(latest);
        // Stacking order: resident, then freed-first with the last freed lowest (so that
        // none slides when they go: the first freed is on top), then the trace's allocations.
        let n_resident = resident_bands.len() as u32;
        let n_freed = freed_first.len() as u32;
        let offset = n_resident + n_freed;
        let mut bands = resident_bands;
        bands.reserve_exact(freed_first.len() + traced.len());
        bands.extend(freed_first.iter().rev());
        bands.extend_from_slice(&traced);
        drop(traced);
        drop(freed_first);
        for f in &mut frees {
            *f = if *f & PRE != 0 {
                n_resident + (n_freed - 1 - (*f & INDEX))
            } else {
                offset + *f
            };
        }
        let steps = len as u32;
        let round = |n: usize| {
            n >= 1000
                && (n.is_power_of_two() || {
                    let mut m = n;
                    while m.is_multiple_of(10) {
                        m /= 10;
                    }
                    m == 1
                })
        };
        // PyTorch says so itself when its ring buffer wrapped.
        lacks.ring_overflowed = snapshot.ring_overflowed();
        lacks.ring_wrapped =
            lacks.ring_overflowed.is_none() && lacks.frees_without_alloc > 0 && round(len);
        bands.shrink_to_fit();
        frees.shrink_to_fit();
        let capacity = (!ooms.is_empty()).then(|| {
            ooms.iter()
                .map(|&(at, free)| {
                    let held = i128::from(reserved_end) - (reserved - at);
                    (held.max(0) as u64).saturating_add(free)
                })
                .max()
                .unwrap_or(0)
        });
        let mut timeline = Self {
            device,
            first,
            steps,
            bands,
            frees,
            resident,
            every: 1,
            starts: Vec::new(),
            live: Vec::new(),
            peak: 0,
            peak_step: 0,
            end_bytes: 0,
            capacity,
            lacks,
            annotated: {
                annotated.sort_unstable();
                annotated.shrink_to_fit();
                annotated
            },
        };
        timeline.checkpoints(sites);
        timeline
    }

    /// The checkpoints (spaced so that they hold no more than one entry per band), the peak,
    /// and each site's bytes × steps.
    fn checkpoints(&mut self, sites: &mut Sites<'_>) {
        let end = self.end();
        let mut lifetimes: f64 = 0.0;
        for b in &self.bands {
            let life = f64::from(b.free.min(end) - b.alloc);
            lifetimes += life;
            if let Some(w) = sites.weight.get_mut(b.site as usize) {
                *w += life * b.size as f64;
            }
        }
        let per_band = lifetimes / self.bands.len().max(1) as f64;
        self.every = ((2.0 * per_band).ceil() as u32).clamp(64, 1 << 20);
        // The peak, by one merge of allocations and frees in step order.
        let (mut total, mut peak, mut peak_step) = (0u64, 0u64, 0u32);
        let (mut a, mut f) = (0usize, 0usize);
        while a < self.bands.len() || f < self.frees.len() {
            let next_alloc = self.bands.get(a).map_or(u32::MAX, |b| b.alloc);
            let next_free = self
                .frees
                .get(f)
                .map_or(u32::MAX, |&i| self.bands[i as usize].free);
            if next_free <= next_alloc {
                total -= self.bands[self.frees[f] as usize].size;
                f += 1;
            } else {
                total += self.bands[a].size;
                a += 1;
                // Bands appearing together (before the trace) count once they all have.
                if self.bands.get(a).is_none_or(|b| b.alloc != next_alloc) && total > peak {
                    peak = total;
                    peak_step = next_alloc;
                }
            }
        }
        self.peak = peak;
        self.peak_step = peak_step;
        self.end_bytes = total;
        // Checkpoint c: the bands alive at step c × every (the last at the end), from
        // checkpoint c - 1 and the bands allocated since.
        let every = self.every;
        let mut starts = vec![0u32];
        let mut live: Vec<u32> = Vec::new();
        let mut next = 0usize; // the first band not allocated by the checkpoint
        let mut previous = (0usize, 0usize);
        let mut at = 0u32;
        loop {
            let begin = live.len();
            for i in previous.0..previous.1 {
                let b = live[i];
                if self.end_of(&self.bands[b as usize]) > at {
                    live.push(b);
                }
            }
            while next < self.bands.len() && self.bands[next].alloc <= at {
                if self.end_of(&self.bands[next]) > at {
                    live.push(next as u32);
                }
                next += 1;
            }
            starts.push(live.len() as u32);
            previous = (begin, live.len());
            if at >= end {
                break;
            }
            at = at.saturating_add(every).min(end);
        }
        self.starts = starts;
        self.live = live;
        self.starts.shrink_to_fit();
        self.live.shrink_to_fit();
    }
}
