//! What the kernel said of the job's memory when it ended (the `exit` record's `kernel`, since
//! 1.6): the memory cgroups its processes ran in, with their limits, peaks and OOM-kill counts
//! read at the start and after the end; the host's OOM-kill count; the kernel log's OOM kills;
//! the processes of the job's tree at their largest. A collector outside the job reads all of
//! it after the job is gone, which is how a death that prints nothing is told: the OOM killer of
//! a container's limit, the host's OOM killer, or a kill from outside.

use serde::{Deserialize, Serialize};

/// What the kernel said of the job's memory, read after the job ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMemory {
    /// The memory cgroups the job's processes ran in (a container's, a SLURM job's, a pod's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<CgroupMemory>,
    /// The host's OOM kills (`/proc/vmstat` `oom_kill`) when the job started.
    #[serde(default)]
    pub host_oom_kills_before: Option<u64>,
    /// The same count after the job ended.
    #[serde(default)]
    pub host_oom_kills_after: Option<u64>,
    /// The OOM kills the kernel log told of while the job ran, when it was readable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kills: Vec<KernelKill>,
    /// Whether the kernel log could be read (`/dev/kmsg`).
    #[serde(default)]
    pub log_read: bool,
    /// The job's processes, the largest at its peak first (at most a few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<TreeProcess>,
    /// What could not be read, one sentence each, naming the file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// One memory cgroup of the job's processes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMemory {
    /// Its path in the hierarchy, as `/proc/PID/cgroup` names it (`/docker/3f…`, `/tmtest`).
    pub path: String,
    /// Cgroup version: 1 or 2.
    pub version: u8,
    /// The limit that applies to it: its own or an ancestor's, the smallest (bytes).
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// The path of the cgroup that sets that limit, when it is an ancestor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_from: Option<String>,
    /// The most it ever held (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`), bytes.
    #[serde(default)]
    pub peak_bytes: Option<u64>,
    /// What it held after the job ended, bytes.
    #[serde(default)]
    pub usage_bytes: Option<u64>,
    /// Its OOM kills when first seen (v1 `memory.oom_control` `oom_kill`, v2 `memory.events`
    /// `oom_kill`).
    #[serde(default)]
    pub oom_kills_before: Option<u64>,
    /// The same count after the job ended.
    #[serde(default)]
    pub oom_kills_after: Option<u64>,
    /// Whole-group OOM kills (v2 `memory.events` `oom_group_kill`) after the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_kills_after: Option<u64>,
}

impl CgroupMemory {
    /// The OOM kills counted while the job ran.
    pub fn kills_during(&self) -> Option<u64> {
        Some(self.oom_kills_after?.saturating_sub(self.oom_kills_before?))
    }
}

/// An OOM kill the kernel log told of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelKill {
    /// The process killed.
    pub pid: u32,
    /// Its name, as the kernel gives it.
    pub name: String,
    /// Whether it was a process of the job's tree.
    pub in_job: bool,
    /// The cgroup whose limit was reached (`oom_memcg=`); `None` when the host ran out.
    #[serde(default)]
    pub memcg: Option<String>,
    /// Its resident memory when killed (anonymous, file and shared), bytes.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    /// The kernel's line, as it was.
    pub line: String,
}

/// One process of the job's tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeProcess {
    /// Its pid.
    pub pid: u32,
    /// Its name (`/proc/PID/comm`: `python3`, `pt_data_worker` for a DataLoader worker).
    pub name: String,
    /// Its rank, from its environment (`RANK`), when it has one.
    #[serde(default)]
    pub rank: Option<u32>,
    /// Whether it is the process the collector started.
    #[serde(default)]
    pub root: bool,
    /// Its most resident memory at a sample, bytes.
    pub peak_rss_bytes: u64,
    /// When it was last seen, nanoseconds after the start (it ended before the job when this is
    /// well before the exit).
    pub last_seen_ns: u64,
}

impl TreeProcess {
    /// How a person names it: "the trainer (pid 41)", "a DataLoader worker (pid 57)", "rank 1".
    pub fn describe(&self) -> String {
        let what = if self.name == "pt_data_worker" {
            "a DataLoader worker".to_owned()
        } else if let Some(rank) = self.rank {
            format!("rank {rank}")
        } else if self.root {
            "the job's process".to_owned()
        } else {
            "a child process".to_owned()
        };
        format!("{what} (pid {}, {})", self.pid, self.name)
    }
}
