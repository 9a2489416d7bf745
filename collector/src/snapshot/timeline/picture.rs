//! What a picture of a range of steps shows ([`DeviceTimeline::picture`]), and what is under a
//! point of it ([`DeviceTimeline::hit`]).

use super::*;

/// A band drawn on its own, sampled: its bottom at the samples where it changed.
#[derive(Clone, Debug, PartialEq)]
pub struct DrawnBand {
    /// The band.
    pub band: u32,
    /// Its site.
    pub site: u32,
    /// Bytes (the band's height).
    pub size: u64,
    /// (step, bottom in bytes): the first at its start (or the range's), the last at its end
    /// (or the range's); between two, the bottom moves linearly (a slide within one sample).
    /// The bottom is the bytes alive of every block allocated before it, the smaller blocks
    /// included: a band's place does not depend on the threshold (the picture's pixels).
    pub points: Vec<(u32, u64)>,
}

/// What a picture of a range of steps shows: the layout sampled at most once a column.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Picture {
    /// The first and last step shown.
    pub range: (u32, u32),
    /// Blocks of at least this many bytes are bands of their own.
    pub threshold: u64,
    /// The bands of their own.
    pub bands: Vec<DrawnBand>,
    /// The steps sampled, in order.
    pub samples: Vec<u32>,
    /// The sites summed in bands of their own ([`SUMMARY_SITES`] at most), bottom to top; then
    /// one band for the rest.
    pub summary_sites: Vec<u32>,
    /// Per sample, `summary_sites.len() + 2` levels: the bytes of the bands of their own, then
    /// those plus each summary site's smaller blocks in turn, the last being the bytes alive.
    /// Where no block is a band of its own (a threshold above every block), they are a chart of
    /// the bytes alive by site; otherwise the smaller blocks lie in their places between the
    /// bands, and only the last level (the top of them all) is a place.
    pub levels: Vec<u64>,
    /// Per sample, the most bytes alive at any step since the sample before (spikes between
    /// samples stay visible).
    pub peaks: Vec<u64>,
}

impl Picture {
    /// The levels at sample `i`.
    pub fn levels_at(&self, i: usize) -> &[u64] {
        let n = self.summary_sites.len() + 2;
        self.levels.get(i * n..(i + 1) * n).unwrap_or(&[])
    }

    /// The sample nearest to `step`.
    pub fn sample_near(&self, step: f64) -> Option<u32> {
        let i = self.samples.partition_point(|&s| f64::from(s) <= step);
        let before = i.checked_sub(1).and_then(|i| self.samples.get(i));
        let after = self.samples.get(i);
        match (before, after) {
            (Some(&b), Some(&a)) => Some(if step - f64::from(b) <= f64::from(a) - step {
                b
            } else {
                a
            }),
            (Some(&b), None) => Some(b),
            (None, a) => a.copied(),
        }
    }

    /// The most bytes drawn anywhere (for the y axis).
    pub fn top(&self) -> u64 {
        self.peaks.iter().copied().max().unwrap_or(0)
    }
}

impl DeviceTimeline {
    /// The picture of steps `from..=to`, sampled at most `columns + 1` times: blocks of at
    /// least `threshold` bytes as bands of their own, smaller ones summed per site (the
    /// `summary_sites`, then the rest in one band) on top of them.
    pub fn picture(
        &self,
        from: u32,
        to: u32,
        columns: u32,
        threshold: u64,
        summary_sites: &[u32],
    ) -> Picture {
        let to = to.min(self.end());
        let from = from.min(to);
        let span = to - from;
        let columns = columns.max(1);
        let samples: Vec<u32> = if span <= columns {
            (from..=to).collect()
        } else {
            let mut s: Vec<u32> = (0..=columns)
                .map(|c| from + ((u64::from(span) * u64::from(c)) / u64::from(columns)) as u32)
                .collect();
            s.dedup();
            s
        };
        let summary_sites: Vec<u32> = summary_sites.iter().take(SUMMARY_SITES).copied().collect();
        let n_levels = summary_sites.len() + 2;
        // A site's summary band: its place among `summary_sites`, else the last (the rest).
        let mut slot_of: HashMap<u32, usize> = HashMap::new();
        for (i, &s) in summary_sites.iter().enumerate() {
            slot_of.insert(s, i);
        }
        let rest = summary_sites.len();
        let slot = |site: u32| slot_of.get(&site).copied().unwrap_or(rest);
        let mut small = vec![0u64; summary_sites.len() + 1];
        // The bands of their own alive: (band, its place in `bands` once drawn, last bottom).
        let mut drawn: Vec<(u32, u32, u64)> = Vec::new();
        // The smaller blocks' bytes alive below each of them in the stack (the blocks allocated
        // between it and the band of its own before it), and the last above them all.
        let mut gaps: Vec<u64> = vec![0];
        let mut drawn_total = 0u64;
        let mut bands: Vec<DrawnBand> = Vec::new();
        let mut scratch = Vec::new();
        let mut total = self.live_at(from, &mut scratch);
        for &b in &scratch {
            let band = &self.bands[b as usize];
            if band.size >= threshold {
                drawn.push((b, u32::MAX, 0));
                gaps.push(0);
                drawn_total += band.size;
            } else {
                small[slot(band.site)] += band.size;
                *gaps.last_mut().unwrap_or(&mut 0) += band.size;
            }
        }
        drop(scratch);
        let mut picture = Picture {
            range: (from, to),
            threshold,
            summary_sites,
            levels: Vec::with_capacity(samples.len() * n_levels),
            peaks: Vec::with_capacity(samples.len()),
            ..Picture::default()
        };
        // The next allocation and free after `from`.
        let mut a = self.bands.partition_point(|b| b.alloc <= from);
        let mut f = self
            .frees
            .partition_point(|&i| self.bands[i as usize].free <= from);
        let mut prev_sample: Option<u32> = None;
        let mut changed = true;
        for &x in &samples {
            let mut peak = total;
            // The steps since the previous sample, in order (frees before allocations of a
            // step: an address reused at once).
            loop {
                let next_free = self
                    .frees
                    .get(f)
                    .map_or(u32::MAX, |&i| self.bands[i as usize].free);
                let next_alloc = self.bands.get(a).map_or(u32::MAX, |b| b.alloc);
                let next = next_free.min(next_alloc);
                if next > x {
                    break;
                }
                if next_free <= next_alloc {
                    let i = self.frees[f];
                    f += 1;
                    let band = &self.bands[i as usize];
                    total -= band.size;
                    if band.size >= threshold {
                        if let Ok(at) = drawn.binary_search_by_key(&i, |d| d.0) {
                            let (_, pos, bottom) = drawn.remove(at);
                            if let Some(d) = bands.get_mut(pos as usize) {
                                d.points.push((band.free, bottom));
                            }
                            // The smaller blocks below it and above it are one run now.
                            let above = gaps.remove(at + 1);
                            gaps[at] += above;
                            changed = true;
                        }
                        drawn_total -= band.size;
                    } else {
                        small[slot(band.site)] -= band.size;
                        // The bands of their own above it slide down.
                        let at = drawn.partition_point(|d| d.0 < i);
                        gaps[at] -= band.size;
                        changed |= at < drawn.len();
                    }
                } else {
                    let band = &self.bands[a];
                    total += band.size;
                    peak = peak.max(total);
                    if band.size >= threshold {
                        drawn.push((a as u32, u32::MAX, 0));
                        gaps.push(0);
                        drawn_total += band.size;
                        changed = true;
                    } else {
                        small[slot(band.site)] += band.size;
                        // Allocated after every band alive: on top of them.
                        *gaps.last_mut().unwrap_or(&mut 0) += band.size;
                    }
                    a += 1;
                }
            }
            // The bands of their own at this sample.
            if changed {
                let mut bottom = 0u64;
                for (d, below) in drawn.iter_mut().zip(&gaps) {
                    bottom += below;
                    let band = &self.bands[d.0 as usize];
                    if d.1 == u32::MAX {
                        d.1 = bands.len() as u32;
                        bands.push(DrawnBand {
                            band: d.0,
                            site: band.site,
                            size: band.size,
                            points: vec![(band.alloc.max(from), bottom)],
                        });
                    } else if d.2 != bottom
                        && let Some(drawn_band) = bands.get_mut(d.1 as usize)
                    {
                        // Flat until the sample before, then sliding to here.
                        if let Some(p) = prev_sample
                            && drawn_band.points.last().is_some_and(|l| l.0 < p)
                        {
                            drawn_band.points.push((p, d.2));
                        }
                        drawn_band.points.push((x, bottom));
                    }
                    d.2 = bottom;
                    bottom += band.size;
                }
                changed = false;
            }
            picture.samples.push(x);
            let mut level = drawn_total;
            picture.levels.push(level);
            for s in &small {
                level += s;
                picture.levels.push(level);
            }
            picture.peaks.push(peak.max(total));
            prev_sample = Some(x);
        }
        // The bands still alive end at the range's end.
        for d in &drawn {
            if let Some(drawn_band) = bands.get_mut(d.1 as usize) {
                let end = self.end_of(&self.bands[d.0 as usize]).min(to);
                if drawn_band.points.last().is_some_and(|l| l.0 < end) {
                    drawn_band.points.push((end, d.2));
                }
            }
        }
        picture.bands = bands;
        picture
    }

    /// What lies at `step`, `y` bytes up, as `picture` stacks it: a band of its own, or a run
    /// of smaller blocks between two (named by the site that holds the most of it).
    pub fn hit(&self, snapshot: &Snapshot, picture: &Picture, step: u32, y: u64) -> Option<Hit> {
        let mut live = Vec::new();
        self.live_at(step, &mut live);
        let mut bottom = 0u64;
        // The run of smaller blocks under way: its bytes and blocks by site.
        let mut run: HashMap<u32, (u64, usize)> = HashMap::new();
        let run_hit = |run: &mut HashMap<u32, (u64, usize)>, top: u64| {
            let bytes: u64 = run.values().map(|r| r.0).sum();
            let hit = (top - bytes..top).contains(&y).then(|| Hit::Small {
                // The most bytes, the first site on a tie.
                site: run
                    .iter()
                    .max_by_key(|(site, r)| (r.0, std::cmp::Reverse(**site)))
                    .map(|(site, _)| *site),
                bytes,
                blocks: run.values().map(|r| r.1).sum(),
            });
            run.clear();
            hit
        };
        for &b in &live {
            let band = &self.bands[b as usize];
            if band.size >= picture.threshold {
                if let Some(hit) = run_hit(&mut run, bottom) {
                    return Some(hit);
                }
                if (bottom..bottom + band.size).contains(&y) {
                    return self.block(snapshot, b).map(Hit::Block);
                }
            } else {
                let r = run.entry(band.site).or_default();
                r.0 += band.size;
                r.1 += 1;
            }
            bottom += band.size;
        }
        run_hit(&mut run, bottom)
    }
}
