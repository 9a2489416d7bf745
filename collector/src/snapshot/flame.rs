//! The flame graph of a snapshot's memory, per device: the bytes alive at one step of the trace
//! (or, over the whole trace, each block's bytes × the steps it lived, as memviz-neo weighs it) by
//! the stack that allocated them, outermost frame at the root.
//!
//! By default a stack is cut at its site ([`Snapshot::site`]: the first frame of the user's own
//! code): the library frames inside it (PyTorch's, an installed package's) are folded into it, so
//! the leaves are the lines a user can change, and only Python frames lead to it. Unfolded, every
//! frame is shown, C++ ones too. Blocks without a
//! Python frame are one leaf ("C++ only"), blocks without frames another ("allocated before the
//! history was recorded").
//!
//! The same numbers as Brendan Gregg's folded stacks (`a;b;c 1234` a line) for speedscope,
//! inferno or `flamegraph.pl`: [`Flame::folded`].

use foldhash::{HashMap, HashMapExt};

use super::timeline::{DeviceTimeline, NEVER};
use super::{BEFORE_HISTORY, CPP_ONLY, Frame, SiteKey, Snapshot};

/// What a flame graph weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weigh {
    /// The bytes alive at a step of the trace (the state after that many of its entries).
    LiveAt(u32),
    /// Over the whole trace: each block's bytes × the steps it was alive.
    BytesTimesLifetime,
}

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// Everything (node 0).
    Root,
    /// A frame of the stacks.
    Frame(Frame),
    /// Stacks without a Python frame.
    CppOnly,
    /// Blocks without a stack: allocated before the history was recorded.
    BeforeHistory,
}

/// One node: a frame under its parent, with what the stacks through it weigh.
#[derive(Clone, Debug, PartialEq)]
pub struct FlameNode {
    /// What it stands for.
    pub label: Label,
    /// Its parent (node 0, the root, is its own).
    pub parent: u32,
    /// How deep: 0 for the root.
    pub depth: u32,
    /// Bytes, or byte-steps ([`Weigh::BytesTimesLifetime`]).
    pub weight: f64,
    /// Blocks under it.
    pub blocks: u64,
    /// Its children, heaviest first.
    pub children: Vec<u32>,
}

/// A device's flame graph.
#[derive(Clone, Debug)]
pub struct Flame {
    /// The nodes; 0 is the root.
    pub nodes: Vec<FlameNode>,
    /// What it weighs.
    pub weigh: Weigh,
    /// Whether library frames inside a site are shown.
    pub unfolded: bool,
    /// Each stack weighed, with the node its path ends at, by stack.
    pub leaves: Vec<(u32, u32)>,
}

impl Flame {
    /// The flame graph of `device`'s blocks (its timeline, laid out from `snapshot`).
    pub fn new(snapshot: &Snapshot, device: &DeviceTimeline, weigh: Weigh, unfold: bool) -> Self {
        // Blocks by stack first: many blocks share one.
        let mut stacks: HashMap<u32, (f64, u64)> = HashMap::new();
        let mut add = |block: super::timeline::BlockInfo, factor: f64| {
            let entry = stacks.entry(block.stack).or_insert((0.0, 0));
            entry.0 += block.size as f64 * factor;
            entry.1 += 1;
        };
        match weigh {
            Weigh::LiveAt(step) => {
                let mut live = Vec::new();
                device.live_at(step, &mut live);
                for block in live.into_iter().filter_map(|b| device.block(snapshot, b)) {
                    add(block, 1.0);
                }
            }
            Weigh::BytesTimesLifetime => {
                let end = device.end();
                for band in 0..device.band_count() as u32 {
                    // Each block looked up once: its life, then its stack and size.
                    if let Some(block) = device.block(snapshot, band) {
                        let free = if block.free_step == NEVER {
                            end
                        } else {
                            block.free_step
                        };
                        let life = f64::from(free.saturating_sub(block.alloc_step));
                        add(block, life);
                    }
                }
            }
        }
        let mut flame = Self {
            nodes: vec![FlameNode {
                label: Label::Root,
                parent: 0,
                depth: 0,
                weight: 0.0,
                blocks: 0,
                children: Vec::new(),
            }],
            weigh,
            unfolded: unfold,
            leaves: Vec::new(),
        };
        let mut index: HashMap<(u32, Label), u32> = HashMap::new();
        let mut ordered: Vec<(u32, (f64, u64))> = stacks.into_iter().collect();
        ordered.sort_unstable_by_key(|(stack, _)| *stack);
        for (stack, (weight, blocks)) in ordered {
            let mut at = 0u32;
            flame.nodes[0].weight += weight;
            flame.nodes[0].blocks += blocks;
            for label in path(snapshot, stack, unfold) {
                let next = *index.entry((at, label)).or_insert_with(|| {
                    let id = flame.nodes.len() as u32;
                    let depth = flame.nodes[at as usize].depth + 1;
                    flame.nodes.push(FlameNode {
                        label,
                        parent: at,
                        depth,
                        weight: 0.0,
                        blocks: 0,
                        children: Vec::new(),
                    });
                    flame.nodes[at as usize].children.push(id);
                    id
                });
                let node = &mut flame.nodes[next as usize];
                node.weight += weight;
                node.blocks += blocks;
                at = next;
            }
            flame.leaves.push((stack, at));
        }
        let weights: Vec<f64> = flame.nodes.iter().map(|n| n.weight).collect();
        for node in &mut flame.nodes {
            node.children.sort_by(|&a, &b| {
                weights[b as usize]
                    .total_cmp(&weights[a as usize])
                    .then(a.cmp(&b))
            });
        }
        flame
    }

    /// What everything weighs.
    pub fn total(&self) -> f64 {
        self.nodes[0].weight
    }

    /// A node's name: `name (dir/file:line)` as a site is named ([`Snapshot::frame_text_short`]),
    /// or what it stands for.
    pub fn name(&self, snapshot: &Snapshot, node: u32) -> String {
        match self.nodes.get(node as usize).map(|n| n.label) {
            Some(Label::Frame(frame)) => snapshot.frame_text_short(&frame),
            Some(Label::CppOnly) => CPP_ONLY.to_owned(),
            Some(Label::BeforeHistory) => BEFORE_HISTORY.to_owned(),
            Some(Label::Root) | None => "all".to_owned(),
        }
    }

    /// The stacks whose path goes through `node` (every stack for the root), sorted: the blocks
    /// they allocated are the node's.
    pub fn stacks_under(&self, node: u32) -> Vec<u32> {
        self.leaves
            .iter()
            .filter(|&&(_, leaf)| {
                let mut at = leaf;
                loop {
                    if at == node {
                        return true;
                    }
                    if at == 0 {
                        return false;
                    }
                    at = self.nodes[at as usize].parent;
                }
            })
            .map(|&(stack, _)| stack)
            .collect()
    }

    /// The nodes from the root's child down to `node`.
    pub fn path_to(&self, node: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = node;
        while at != 0 && (at as usize) < self.nodes.len() {
            out.push(at);
            at = self.nodes[at as usize].parent;
        }
        out.reverse();
        out
    }

    /// Folded stacks: a line per leaf (or node with weight of its own), its frames from the
    /// outermost joined by `;` (a `;` in a name becomes `:`), a space, its weight rounded to a
    /// whole number. Heaviest paths first.
    pub fn folded(&self, snapshot: &Snapshot) -> String {
        let mut out = String::new();
        let mut stack = vec![0u32];
        while let Some(node) = stack.pop() {
            let n = &self.nodes[node as usize];
            let below: f64 = n
                .children
                .iter()
                .map(|&c| self.nodes[c as usize].weight)
                .sum();
            let own = n.weight - below;
            if node != 0 && own > 0.5 {
                let names: Vec<String> = self
                    .path_to(node)
                    .into_iter()
                    .map(|p| self.name(snapshot, p).replace(';', ":"))
                    .collect();
                out.push_str(&format!("{} {}\n", names.join(";"), own.round() as u64));
            }
            stack.extend(n.children.iter().rev());
        }
        out
    }
}

/// A stack's labels from the outermost frame in: cut at its site unless `unfold`.
fn path(snapshot: &Snapshot, stack: u32, unfold: bool) -> Vec<Label> {
    let frames: Vec<Frame> = snapshot.stack(stack).copied().collect();
    if frames.is_empty() {
        return vec![Label::BeforeHistory];
    }
    let inner = if unfold {
        0
    } else {
        match snapshot.site(stack) {
            SiteKey::Frame(site) => frames.iter().position(|f| *f == site).unwrap_or(0),
            SiteKey::CppOnly => return vec![Label::CppOnly],
            SiteKey::NoFrames => return vec![Label::BeforeHistory],
        }
    };
    if unfold {
        return frames.iter().rev().map(|&f| Label::Frame(f)).collect();
    }
    // Outside the site, the Python frames only (the interpreter's own C frames between them
    // are noise to the reader).
    frames[inner..]
        .iter()
        .rev()
        .filter(|f| snapshot.string(f.filename).ends_with(".py"))
        .map(|&f| Label::Frame(f))
        .collect()
}
