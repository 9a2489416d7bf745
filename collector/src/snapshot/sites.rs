//! Where a block was allocated, as a person names it: the first frame of the user's own code in
//! its stack (not PyTorch's, not the Python standard library's, not an installed package's), and
//! live blocks grouped by that site — the one grouping the report, its JSON, the leak suspects
//! and the viewer's Blocks tab share. The whole stack stays with each site.

use foldhash::{HashMap, HashSet};

use super::{Frame, LiveBlock, PoolId, Snapshot};

/// The site of blocks whose stack holds no frame: PyTorch records stacks only once
/// `torch.cuda.memory._record_memory_history()` runs, so these were allocated before it.
pub const BEFORE_HISTORY: &str = "allocated before the history was recorded";

/// The site of blocks whose stack holds C++ frames only (allocations made outside Python, such
/// as the autograd engine's in a backward pass).
pub const CPP_ONLY: &str = "C++ only";

/// An allocation site: what live blocks are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKey {
    /// A Python frame: the user's first, else the first frame outside PyTorch and the standard
    /// library, else the first Python frame ([`Snapshot::site`]).
    Frame(Frame),
    /// Only C++ frames.
    CppOnly,
    /// No frames.
    NoFrames,
}

/// What wrote a Python frame's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Owner {
    /// The user's own code.
    User,
    /// An installed package other than PyTorch (`site-packages/`, `dist-packages/`).
    Package,
    /// PyTorch itself (with the code Inductor generates), or the Python standard library (`lib/python3.x/`, `<frozen …>`), or a
    /// `__torch_function__` / `__torch_dispatch__` wrapper.
    Internal,
}

/// Who wrote the Python frame in `file` running the function `name`.
pub(crate) fn owner(file: &str, name: &str) -> Owner {
    let file = file.replace('\\', "/");
    // PyTorch's own files, and the code Inductor and FX generate for compiled functions.
    let generated = file
        .rsplit('/')
        .next()
        .is_some_and(|f| f.starts_with("fx_generated_"));
    let torch = file.contains("/torch/")
        || file.starts_with("torch/")
        || file.contains("/torchinductor_")
        || generated;
    if torch
        || file.starts_with('<')
        || standard_library(&file)
        || name.contains("__torch_function__")
        || name.contains("__torch_dispatch__")
    {
        Owner::Internal
    } else if file.contains("/site-packages/") || file.contains("/dist-packages/") {
        Owner::Package
    } else {
        Owner::User
    }
}

/// Whether a file (with `/` separators) is the Python standard library's: under
/// `lib/python3.x/` (or `lib64/`, any prefix: a virtual environment's base, pyenv, conda) or a
/// Windows installation's `Lib/`, and not in an installed package.
fn standard_library(file: &str) -> bool {
    if file.contains("/site-packages/") || file.contains("/dist-packages/") {
        return false;
    }
    let parts: Vec<&str> = file.split('/').collect();
    parts.windows(2).any(|w| {
        let version = w[1]
            .strip_prefix("python")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'));
        (matches!(w[0], "lib" | "lib64") && version) || w[0] == "Lib"
    })
}

impl Snapshot {
    /// The site of a stack: the first Python frame of the user's own code (outside PyTorch, the
    /// Python standard library, `site-packages` and `dist-packages`, and not a
    /// `__torch_function__` wrapper); without one, the first Python frame outside PyTorch and the
    /// standard library (an installed package's, e.g. vLLM's); without that, the first Python
    /// frame; then [`SiteKey::CppOnly`] or [`SiteKey::NoFrames`].
    pub fn site(&self, stack: u32) -> SiteKey {
        let mut best: Option<(Owner, Frame)> = None;
        let mut any = false;
        for f in self.stack_read(stack) {
            any = true;
            let file = self.string(f.filename);
            if !file.ends_with(".py") {
                continue;
            }
            let owner = owner(file, self.string(f.name));
            if best.is_none_or(|(o, _)| owner < o) {
                best = Some((owner, *f));
                if owner == Owner::User {
                    break;
                }
            }
        }
        match best {
            Some((_, frame)) => SiteKey::Frame(frame),
            None if any => SiteKey::CppOnly,
            None => SiteKey::NoFrames,
        }
    }

    /// A site as every face names it: `name (dir/file.py:line)` ([`Snapshot::frame_text_short`]),
    /// or [`CPP_ONLY`], or [`BEFORE_HISTORY`].
    pub fn site_name(&self, site: SiteKey) -> String {
        match site {
            SiteKey::Frame(f) => self.frame_text_short(&f),
            SiteKey::CppOnly => CPP_ONLY.to_owned(),
            SiteKey::NoFrames => BEFORE_HISTORY.to_owned(),
        }
    }
}

/// Live blocks from one allocation site on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteGroup {
    /// The device.
    pub device: u32,
    /// The site.
    pub site: SiteKey,
    /// The private pool its blocks are in ([`Snapshot::pool_at`]); `None`: the default pool.
    pub pool: Option<PoolId>,
    /// The stack of the site's largest block (its whole stack is shown for the site).
    pub stack: u32,
    /// How many distinct stacks reach the site.
    pub stacks: usize,
    /// The blocks' places in the list grouped, in its order (largest first).
    pub blocks: Vec<usize>,
    /// Their bytes.
    pub bytes: u64,
}

impl SiteGroup {
    /// The site as a person reads it, with the private pool its blocks are in.
    pub fn name(&self, snapshot: &Snapshot) -> String {
        in_pool(snapshot.site_name(self.site), self.pool)
    }
}

/// A site's name, with the private pool its blocks are in: "forward (model.py:42), in a CUDA
/// graph's pool (1, 0)".
pub fn in_pool(site: String, pool: Option<PoolId>) -> String {
    match pool {
        Some(pool) => format!("{site}, in {}", pool.describe()),
        None => site,
    }
}

/// Blocks (largest first) grouped by device, allocation site ([`Snapshot::site`]) and private
/// pool, the largest group first: the blocks a site holds in a CUDA graph's pool (its static
/// tensors) are a group of their own.
pub fn group_by_site(snapshot: &Snapshot, blocks: &[LiveBlock]) -> Vec<SiteGroup> {
    // A site per stack, worked out once per stack (there are far fewer stacks than blocks).
    let mut site_of: HashMap<u32, SiteKey> = HashMap::default();
    let pools = snapshot.private_segments();
    let mut at: HashMap<(u32, SiteKey, Option<PoolId>), usize> = HashMap::default();
    let mut groups: Vec<SiteGroup> = Vec::new();
    let mut seen: HashSet<(u32, u32, Option<PoolId>)> = HashSet::default();
    for (i, b) in blocks.iter().enumerate() {
        let site = *site_of
            .entry(b.stack)
            .or_insert_with(|| snapshot.site(b.stack));
        let pool = pools.pool_at(b.device, b.addr);
        let g = *at.entry((b.device, site, pool)).or_insert_with(|| {
            groups.push(SiteGroup {
                device: b.device,
                site,
                pool,
                stack: b.stack,
                stacks: 0,
                blocks: Vec::new(),
                bytes: 0,
            });
            groups.len() - 1
        });
        let group = &mut groups[g];
        if seen.insert((b.device, b.stack, pool)) {
            group.stacks += 1;
        }
        group.blocks.push(i);
        group.bytes += b.size;
    }
    // A stack belongs to one site on a device: (device, stack, pool) tells groups apart.
    groups.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.device.cmp(&b.device))
            .then(a.stack.cmp(&b.stack))
            .then(a.pool.cmp(&b.pool))
    });
    groups
}

/// The segments of private pools at the snapshot, by device and address: which pool a block is
/// in. Pools' segments stay while their graphs or pools live, so the segments at the snapshot
/// tell the pool of the blocks alive then and, but for a pool's segment freed since, before.
pub struct PrivateSegments(Vec<(u32, u64, u64, PoolId)>);

impl PrivateSegments {
    /// The private pool holding `addr` on `device`, if any.
    pub fn pool_at(&self, device: u32, addr: u64) -> Option<PoolId> {
        if self.0.is_empty() {
            return None;
        }
        let after = self
            .0
            .partition_point(|&(d, start, _, _)| (d, start) <= (device, addr));
        let &(d, start, end, pool) = self.0.get(after.checked_sub(1)?)?;
        (d == device && start <= addr && addr < end).then_some(pool)
    }
}

impl Snapshot {
    /// The segments of private pools, for [`PrivateSegments::pool_at`].
    pub fn private_segments(&self) -> PrivateSegments {
        let mut spans: Vec<(u32, u64, u64, PoolId)> = self
            .segments
            .iter()
            .filter_map(|s| {
                let pool = s.pool?;
                Some((
                    s.device,
                    s.address,
                    s.address.saturating_add(s.total_size),
                    pool,
                ))
            })
            .collect();
        spans.sort_unstable();
        PrivateSegments(spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_wrote_a_frame() {
        for (file, name, expected) in [
            (
                "/home/u/work/cs336_basics/optimizer.py",
                "step",
                Owner::User,
            ),
            (
                "/usr/local/lib/python3.10/dist-packages/torch/utils/_device.py",
                "__torch_function__",
                Owner::Internal,
            ),
            (
                "/home/u/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
                "_call_impl",
                Owner::Internal,
            ),
            (
                "/home/u/pytorch/torch/nn/functional.py",
                "linear",
                Owner::Internal,
            ),
            (
                "/usr/lib/python3.10/contextlib.py",
                "__enter__",
                Owner::Internal,
            ),
            (
                "/home/u/.pyenv/versions/3.11.4/lib/python3.11/threading.py",
                "run",
                Owner::Internal,
            ),
            (
                "C:\\Python311\\Lib\\contextlib.py",
                "__enter__",
                Owner::Internal,
            ),
            ("<frozen runpy>", "_run_module_as_main", Owner::Internal),
            (
                "/home/u/.venv/lib/python3.12/site-packages/einops/einops.py",
                "einsum",
                Owner::Package,
            ),
            (
                "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py",
                "_allocate_kv_cache",
                Owner::Package,
            ),
            (
                "/tmp/torchinductor_u/nq/cnqtho2nij4af6swya42kmd2tvb2py3b.py",
                "call",
                Owner::Internal,
            ),
            // A user's folder that merely starts like one of Python's.
            ("/home/u/lib/pythonic/train.py", "train", Owner::User),
            (
                "/home/u/work/tensors.py",
                "__torch_function__",
                Owner::Internal,
            ),
        ] {
            assert_eq!(owner(file, name), expected, "{file} {name}");
        }
    }
}
