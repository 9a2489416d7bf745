//! Host memory of the job's whole process tree, from `/proc`.
//!
//! The tree (the root and all its descendants: DataLoader workers, subprocesses) is found from
//! `/proc/PID/task/TID/children` once a second; resident memory is read from every member's
//! `statm` at each sample. Resident memory counts pages shared between processes (forked
//! workers) once per process, as `ps` and `top` do.

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

/// The job's process tree, and its resident memory.
pub struct ProcessTree {
    root: u32,
    pids: Vec<u32>,
    refreshed: Option<Instant>,
    page_bytes: u64,
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

    /// Whether the root process still runs (a zombie, exited but not yet reaped, does not).
    pub fn root_alive(&self) -> bool {
        let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", self.root)) else {
            return false;
        };
        // The state follows the command name, which is in parentheses and may contain anything.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        !matches!(state, Some("Z" | "X") | None)
    }

    /// Resident bytes of the whole tree; `None` when no process of it could be read (it ended).
    /// A process with no resident pages has exited (a zombie) and does not count.
    pub fn rss_bytes(&mut self) -> Option<u64> {
        let page_bytes = self.page_bytes;
        let mut total = None;
        for &pid in self.pids() {
            if let Some(pages) = resident_pages(pid).filter(|&pages| pages > 0) {
                *total.get_or_insert(0) += pages * page_bytes;
            }
        }
        total
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
        let rss = tree.rss_bytes().unwrap();
        assert!(rss > 1 << 20, "{rss}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_missing_process_has_no_memory() {
        let mut tree = ProcessTree::new(u32::MAX - 1);
        assert_eq!(tree.rss_bytes(), None);
        assert!(!tree.root_alive());
    }
}
