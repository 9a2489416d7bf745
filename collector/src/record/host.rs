//! Host memory of the job's whole process tree, from `/proc`.
//!
//! The tree (the root and all its descendants: DataLoader workers, subprocesses) is found from
//! `/proc/PID/task/TID/children` once a second; resident memory is read from every member's
//! `statm` at each sample. Resident memory counts pages shared between processes (forked
//! workers) once per process, as `ps` and `top` do. Each member is remembered (its name, rank,
//! cgroups, most resident memory, when last seen) for the report of a job that was killed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::{Duration, Instant};

use collector::recording::TreeProcess;

/// The job's process tree, and its resident memory.
pub struct ProcessTree {
    root: u32,
    pids: Vec<u32>,
    refreshed: Option<Instant>,
    page_bytes: u64,
    members: BTreeMap<u32, Member>,
}

/// A process of the tree, as first seen and since.
#[derive(Clone, Debug)]
pub struct Member {
    /// `/proc/PID/comm`.
    pub name: String,
    /// `RANK` in its environment.
    pub rank: Option<u32>,
    /// `/proc/PID/cgroup`, as it was when first seen.
    pub cgroups: String,
    /// Most resident pages at a sample.
    pub peak_pages: u64,
    /// When last seen with resident pages, nanoseconds after the start.
    pub last_seen_ns: u64,
}

const REFRESH: Duration = Duration::from_secs(1);

impl ProcessTree {
    /// The tree under `root` (found on first use).
    pub fn new(root: u32) -> Self {
        let page_bytes = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map_or(4096, |size| size as u64);
        Self {
            root,
            pids: Vec::new(),
            refreshed: None,
            page_bytes,
            members: BTreeMap::new(),
        }
    }

    /// The processes of the tree, the root first; refreshed at most once a second.
    pub fn pids(&mut self) -> &[u32] {
        if self.refreshed.is_none_or(|at| at.elapsed() >= REFRESH) {
            self.pids = descendants(self.root);
            self.refreshed = Some(Instant::now());
        }
        &self.pids
    }

    /// Every process seen in the tree so far, by pid (a pid the kernel gave again to a new
    /// process of the tree keeps the first one's name).
    pub fn members(&self) -> &BTreeMap<u32, Member> {
        &self.members
    }

    /// The processes seen, the largest at its peak first, at most `n`.
    pub fn largest(&self, n: usize) -> Vec<TreeProcess> {
        let mut all: Vec<TreeProcess> = self
            .members
            .iter()
            .map(|(&pid, m)| TreeProcess {
                pid,
                name: m.name.clone(),
                rank: m.rank,
                root: pid == self.root,
                peak_rss_bytes: m.peak_pages * self.page_bytes,
                last_seen_ns: m.last_seen_ns,
            })
            .collect();
        all.sort_by_key(|p| std::cmp::Reverse(p.peak_rss_bytes));
        all.truncate(n);
        all
    }

    /// Whether the root process still runs (a zombie, exited but not yet reaped, does not).
    pub fn root_alive(&self) -> bool {
        alive(self.root)
    }

    /// Resident bytes of the whole tree at `t_ns`; `None` when no process of it could be read
    /// (it ended). A process with no resident pages has exited (a zombie) and does not count.
    pub fn rss_bytes(&mut self, t_ns: u64) -> Option<u64> {
        let page_bytes = self.page_bytes;
        self.pids();
        let mut total = None;
        for &pid in &self.pids {
            let Some(pages) = resident_pages(pid).filter(|&pages| pages > 0) else {
                continue;
            };
            *total.get_or_insert(0) += pages * page_bytes;
            let member = self.members.entry(pid).or_insert_with(|| Member::read(pid));
            member.peak_pages = member.peak_pages.max(pages);
            member.last_seen_ns = t_ns;
        }
        total
    }
}

impl Member {
    /// What `/proc` says of a process first seen.
    fn read(pid: u32) -> Self {
        let text = |file: &str| fs::read_to_string(format!("/proc/{pid}/{file}")).ok();
        let rank = fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0)
                    .find_map(|var| var.strip_prefix(b"RANK="))
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            });
        Self {
            name: text("comm").map_or_else(String::new, |c| c.trim_end().to_owned()),
            rank,
            cgroups: text("cgroup").unwrap_or_default(),
            peak_pages: 0,
            last_seen_ns: 0,
        }
    }
}

/// `root` and every process below it, root first.
fn descendants(root: u32) -> Vec<u32> {
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        if !seen.insert(pid) {
            continue;
        }
        order.push(pid);
        todo.extend(children(pid));
    }
    order
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(text) = fs::read_to_string(path) {
            out.extend(
                text.split_ascii_whitespace()
                    .filter_map(|s| s.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Resident pages of one process (the second field of `statm`).
fn resident_pages(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid` runs (a zombie, exited but not yet reaped, does not).
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain anything.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_children_and_their_memory() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let mut tree = ProcessTree::new(me);
        assert!(tree.pids().contains(&me));
        assert!(tree.pids().contains(&child.id()));
        let rss = tree.rss_bytes(7).unwrap();
        assert!(rss > 1 << 20, "{rss}");
        let sleep = &tree.members()[&child.id()];
        assert_eq!(sleep.name, "sleep");
        assert_eq!(sleep.last_seen_ns, 7);
        assert!(
            tree.members()[&me].cgroups.contains(':'),
            "{:?}",
            tree.members()[&me]
        );
        let largest = tree.largest(8);
        assert!(largest.iter().any(|p| p.root && p.pid == me), "{largest:?}");
        assert!(
            largest
                .windows(2)
                .all(|w| w[0].peak_rss_bytes >= w[1].peak_rss_bytes),
            "{largest:?}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_missing_process_has_no_memory() {
        let mut tree = ProcessTree::new(u32::MAX - 1);
        assert_eq!(tree.rss_bytes(0), None);
        assert!(!tree.root_alive());
    }
}
