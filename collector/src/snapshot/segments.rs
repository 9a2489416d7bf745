//! The segments at the snapshot: each `cudaMalloc` (or expandable range) of the caching
//! allocator, its blocks and the pool it belongs to, and what they hold per device.

use std::collections::BTreeMap;

use super::Snapshot;

/// The state of a block inside a segment when the snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by its tensor, waiting for other streams (`active_pending_free`, or
    /// `active_awaiting_free` in some versions).
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
    /// A state this reader does not know.
    Other,
}

/// A block of a segment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    /// Its address.
    pub address: u64,
    /// Bytes (rounded up by the allocator).
    pub size: u64,
    /// Bytes the tensor asked for.
    pub requested_size: u64,
    /// Its state.
    pub state: BlockState,
    /// Where it was allocated (0: unknown).
    pub stack: u32,
}

impl Block {
    /// The bytes its tensor asked for, as the trace's entries count a block (memory_viz too): the
    /// bytes every view of live blocks adds (the memory timeline, the flame graph, the live
    /// blocks, the allocated curve and its peak); the block's own where the snapshot has no
    /// `requested_size`. The segments' summary counts [`Block::size`], as the allocator does.
    pub fn asked(&self) -> u64 {
        if self.requested_size > 0 {
            self.requested_size
        } else {
            self.size
        }
    }
}

/// A memory pool of the caching allocator, as PyTorch names it (`MempoolId_t`): `(0, 0)` is the
/// default pool; `(N, 0)` a CUDA graph's own pool (made for a capture given no pool); `(0, N)` a
/// pool the job made (`torch.cuda.MemPool()`, `torch.cuda.graph_pool_handle()`). Memory in a
/// private pool serves only allocations made in that pool (a graph's capture and replays, a
/// `torch.cuda.use_mem_pool` context): the rest of the job cannot use its free pieces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct PoolId(pub u64, pub u64);

impl PoolId {
    /// Not the default pool.
    pub fn is_private(self) -> bool {
        self != Self(0, 0)
    }

    /// How a person reads it: "a CUDA graph's own pool (3, 0)", "the job's pool (0, 2)" (one
    /// made by `torch.cuda.MemPool()` or `graph_pool_handle()`).
    pub fn describe(self) -> String {
        let kind = match self {
            Self(0, 0) => "the default pool",
            Self(_, 0) => "a CUDA graph's own pool",
            _ => "the job's pool",
        };
        format!("{kind} ({}, {})", self.0, self.1)
    }
}

/// A segment: one `cudaMalloc` (or an expandable range) of the caching allocator.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// The device.
    pub device: u32,
    /// Its address.
    pub address: u64,
    /// Bytes reserved.
    pub total_size: u64,
    /// Bytes of its blocks held by tensors.
    pub allocated_size: u64,
    /// `small` (≤ 1 MiB blocks) or `large`.
    pub segment_type: String,
    /// The stream.
    pub stream: u64,
    /// The private pool it belongs to (`segment_pool_id`); `None` for the default pool.
    pub pool: Option<PoolId>,
    /// Its blocks, by address.
    pub blocks: Vec<Block>,
}

/// The segments of one device at snapshot time.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SegmentSummary {
    /// The device.
    pub device: u32,
    /// How many segments (private pools' too).
    pub segments: usize,
    /// Bytes reserved (private pools' too: PyTorch's `memory_reserved()` counts them).
    pub reserved: u64,
    /// Bytes held by tensors (`active_allocated`; private pools' too).
    pub allocated: u64,
    /// Bytes freed but waiting for other streams.
    pub pending_free: u64,
    /// Bytes free inside segments (cached), outside private pools: what any allocation can use.
    pub free: u64,
    /// How many free pieces, outside private pools.
    pub free_pieces: usize,
    /// The largest free piece outside private pools: the largest tensor that fits without a
    /// new `cudaMalloc`.
    pub largest_free: u64,
    /// The private pools (CUDA graphs', `torch.cuda.MemPool`s), by id.
    pub pools: Vec<PoolSummary>,
}

/// What one private pool holds on a device at snapshot time.
#[derive(Clone, Copy, Debug, PartialEq, Default, serde::Serialize)]
pub struct PoolSummary {
    /// The pool.
    pub pool: PoolId,
    /// How many segments.
    pub segments: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes held by tensors.
    pub allocated: u64,
    /// Bytes free that only the pool's own allocations can use.
    pub free: u64,
}

/// How many pools a sentence names; the rest are counted.
const POOLS_NAMED: usize = 3;

impl SegmentSummary {
    /// Bytes the tensors hold or have freed but not yet given back (what the allocator counts as
    /// allocated).
    pub fn in_use(&self) -> u64 {
        self.allocated + self.pending_free
    }

    /// Bytes free inside the private pools' segments.
    pub fn free_in_pools(&self) -> u64 {
        self.pools.iter().map(|p| p.free).sum()
    }

    /// ", X free in private pools" when there are any (after what is free outside them).
    pub fn free_in_pools_text(&self) -> String {
        if self.pools.is_empty() {
            return String::new();
        }
        format!(
            ", {} free in private pools",
            crate::format::format_bytes(self.free_in_pools() as f64)
        )
    }

    /// The private pools, one sentence (`None` without any): what they reserve and hold, and
    /// each pool's share.
    pub fn pools_text(&self) -> Option<String> {
        if self.pools.is_empty() {
            return None;
        }
        let b = |v: u64| crate::format::format_bytes(v as f64);
        let sum = |f: fn(&PoolSummary) -> u64| self.pools.iter().map(f).sum::<u64>();
        let segments = self.pools.iter().map(|p| p.segments).sum();
        let mut largest = self.pools.clone();
        largest.sort_by_key(|p| std::cmp::Reverse(p.reserved));
        let mut named: Vec<String> = largest
            .iter()
            .take(POOLS_NAMED)
            .map(|p| {
                format!(
                    "{} {} ({} allocated)",
                    p.pool.describe(),
                    b(p.reserved),
                    b(p.allocated)
                )
            })
            .collect();
        if largest.len() > POOLS_NAMED {
            named.push(format!("{} more", largest.len() - POOLS_NAMED));
        }
        Some(format!(
            "in private pools: {} reserved in {} — {} allocated, {} free that only the pool's own allocations (its graph's capture and replays, its `use_mem_pool` context) can use: {}",
            b(sum(|p| p.reserved)),
            crate::format::count(segments, "segment"),
            b(sum(|p| p.allocated)),
            b(sum(|p| p.free)),
            named.join("; ")
        ))
    }
}

impl Snapshot {
    /// The segments' state per device at snapshot time.
    pub fn segment_summary(&self) -> Vec<SegmentSummary> {
        let mut out: BTreeMap<u32, SegmentSummary> = BTreeMap::new();
        for s in &self.segments {
            let sum = out.entry(s.device).or_insert_with(|| SegmentSummary {
                device: s.device,
                ..SegmentSummary::default()
            });
            sum.segments += 1;
            sum.reserved += s.total_size;
            let mut pool = s.pool.map(|id| {
                let at = match sum.pools.binary_search_by_key(&id, |p| p.pool) {
                    Ok(at) => at,
                    Err(at) => {
                        sum.pools.insert(
                            at,
                            PoolSummary {
                                pool: id,
                                ..PoolSummary::default()
                            },
                        );
                        at
                    }
                };
                sum.pools[at].segments += 1;
                sum.pools[at].reserved += s.total_size;
                at
            });
            for b in &s.blocks {
                match (b.state, pool.as_mut()) {
                    (BlockState::ActiveAllocated, at) => {
                        sum.allocated += b.size;
                        if let Some(&mut at) = at {
                            sum.pools[at].allocated += b.size;
                        }
                    }
                    (BlockState::ActivePendingFree, _) => sum.pending_free += b.size,
                    // A private pool's free pieces serve only its own allocations.
                    (BlockState::Inactive, Some(&mut at)) => sum.pools[at].free += b.size,
                    (BlockState::Inactive, None) => {
                        sum.free += b.size;
                        sum.free_pieces += 1;
                        sum.largest_free = sum.largest_free.max(b.size);
                    }
                    (BlockState::Other, _) => {}
                }
            }
        }
        out.into_values().collect()
    }
}
