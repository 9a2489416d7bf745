//! What the kernel says of the job's memory, for a death that prints nothing: the memory cgroups
//! its processes run in (a container's `--memory`, a pod's limit, SLURM's `--mem`), their limits,
//! peaks and OOM-kill counts, read when first seen and after the job ended; the host's OOM-kill
//! count (`/proc/vmstat`); and the OOM kills the kernel log (`/dev/kmsg`) told of while the job
//! ran. Nothing here can harm the job: what cannot be read is named and left out.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use collector::recording::{CgroupMemory, KernelKill, KernelMemory};

use super::host::ProcessTree;

/// Where the memory controller is mounted.
#[derive(Clone, Debug, Default)]
pub struct Mounts {
    /// cgroup v1's `memory` hierarchy: (its mount point, the hierarchy's path mounted there).
    pub v1: Option<(PathBuf, String)>,
    /// cgroup v2's unified hierarchy, when its root has the memory controller.
    pub v2: Option<(PathBuf, String)>,
}

impl Mounts {
    /// The mounts `/proc/self/mountinfo` lists.
    pub fn of_this_machine() -> Self {
        fs::read_to_string("/proc/self/mountinfo")
            .map(|text| Self::parse(&text))
            .unwrap_or_default()
    }

    /// Reads mountinfo's lines: `id parent major:minor root mount-point options… - type source
    /// super-options`.
    pub fn parse(mountinfo: &str) -> Self {
        let mut mounts = Self::default();
        for line in mountinfo.lines() {
            let Some((head, tail)) = line.split_once(" - ") else {
                continue;
            };
            let head: Vec<&str> = head.split(' ').collect();
            let tail: Vec<&str> = tail.split(' ').collect();
            let (Some(root), Some(point), Some(kind)) = (head.get(3), head.get(4), tail.first())
            else {
                continue;
            };
            let point = PathBuf::from(unescape(point));
            let root = unescape(root);
            match *kind {
                "cgroup"
                    if mounts.v1.is_none()
                        && tail
                            .get(2)
                            .is_some_and(|o| o.split(',').any(|o| o == "memory")) =>
                {
                    mounts.v1 = Some((point, root));
                }
                "cgroup2"
                    if mounts.v2.is_none()
                        && fs::read_to_string(point.join("cgroup.controllers"))
                            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) =>
                {
                    mounts.v2 = Some((point, root));
                }
                _ => {}
            }
        }
        mounts
    }

    /// The memory cgroups a process' `/proc/PID/cgroup` names, as (version, path, folder).
    pub fn cgroups_of(&self, proc_cgroup: &str) -> Vec<(u8, String, PathBuf)> {
        let mut out = Vec::new();
        for line in proc_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (version, mount) = if id == "0" && controllers.is_empty() {
                (2, &self.v2)
            } else if controllers.split(',').any(|c| c == "memory") {
                (1, &self.v1)
            } else {
                continue;
            };
            if let Some((point, root)) = mount {
                let inside = path.strip_prefix(root.as_str()).unwrap_or(path);
                let folder = point.join(inside.trim_start_matches('/'));
                out.push((version, path.to_owned(), folder));
            }
        }
        out
    }
}

/// `\040` and the like in mountinfo's paths.
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Limits at or above this are "no limit" (v1 writes 2^63 rounded down to a page).
const NO_LIMIT: u64 = 1 << 62;

/// One memory cgroup read: its numbers now, and what could not be read.
fn read_cgroup(version: u8, path: &str, folder: &Path, top: &Path) -> (CgroupMemory, Vec<String>) {
    let unreadable = std::cell::RefCell::new(Vec::new());
    let read = |name: &str| -> Option<String> {
        let file = folder.join(name);
        match fs::read_to_string(&file) {
            Ok(text) => Some(text),
            Err(err) => {
                unreadable
                    .borrow_mut()
                    .push(format!("{}: {err}", file.display()));
                None
            }
        }
    };
    // A file read that does not hold what it should is named, with what it held.
    let number = |name: &str| {
        let text = read(name)?;
        let value = text.trim().parse::<u64>().ok();
        if value.is_none() {
            unreadable.borrow_mut().push(format!(
                "{}: not a number of bytes: {:?}",
                folder.join(name).display(),
                text.trim()
            ));
        }
        value
    };
    // A count in a file of `key value` lines; `missing`: why a kernel may lack the line (`None`:
    // its lack is not worth a word), where a line that is there but holds no number always is.
    let field = |text: &Option<String>, name: &str, key: &str, missing: Option<&str>| {
        let line = text
            .as_deref()?
            .lines()
            .find_map(|l| l.split_once(' ').filter(|(k, _)| *k == key));
        let value = line.and_then(|(_, v)| v.trim().parse::<u64>().ok());
        let why = match (line, missing) {
            (Some((_, v)), _) if value.is_none() => Some(format!(": {:?}", v.trim())),
            (None, Some(missing)) => Some(missing.to_owned()),
            _ => None,
        };
        if let Some(why) = why {
            unreadable.borrow_mut().push(format!(
                "{}: no {key} count{why}",
                folder.join(name).display()
            ));
        }
        value
    };
    let mut memory = CgroupMemory {
        path: path.to_owned(),
        version,
        ..CgroupMemory::default()
    };
    if version == 1 {
        let oom = read("memory.oom_control");
        memory.oom_kills_after = field(
            &oom,
            "memory.oom_control",
            "oom_kill",
            Some(" (a kernel before 4.13)"),
        );
        memory.peak_bytes = number("memory.max_usage_in_bytes");
        memory.usage_bytes = number("memory.usage_in_bytes");
    } else {
        let events = read("memory.events");
        memory.oom_kills_after = field(&events, "memory.events", "oom_kill", Some(""));
        memory.group_kills_after = field(&events, "memory.events", "oom_group_kill", None);
        memory.peak_bytes = number("memory.peak");
        memory.usage_bytes = number("memory.current");
    }
    // The limit that applies: the smallest of its own and its ancestors' (up to the mount).
    let limit_file = if version == 1 {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    let mut dir = Some(folder);
    let mut logical = Some(path.trim_end_matches('/'));
    while let (Some(d), Some(l)) = (dir, logical) {
        let limit = fs::read_to_string(d.join(limit_file))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&b| b < NO_LIMIT);
        if let Some(limit) = limit
            && memory.limit_bytes.is_none_or(|m| limit < m)
        {
            memory.limit_bytes = Some(limit);
            memory.limit_from =
                (d != folder).then(|| if l.is_empty() { "/" } else { l }.to_owned());
        }
        if d == top || !d.starts_with(top) {
            break;
        }
        dir = d.parent();
        logical = l.rsplit_once('/').map(|(parent, _)| parent);
    }
    (memory, unreadable.into_inner())
}

/// The host's OOM kills so far (`/proc/vmstat`, since Linux 4.13).
fn host_oom_kills() -> Option<u64> {
    let text = fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// Watches the job's memory cgroups and the kernel log from the start to after the end.
pub struct Watch {
    mounts: Mounts,
    /// Each cgroup seen, by (version, path): its folder and its numbers when first seen.
    cgroups: BTreeMap<(u8, String), (PathBuf, CgroupMemory)>,
    host_before: Option<u64>,
    /// The kernel log, opened at the start and read from its end then.
    log: Result<File, String>,
    unreadable: Vec<String>,
}

impl Watch {
    /// Starts watching: the host's count and the kernel log now, and the cgroups of `pid` (the
    /// collector's own, which the job inherits) as they are before the job starts.
    pub fn start(mounts: Mounts, pid: u32) -> Self {
        let log = File::options()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open("/dev/kmsg")
            .and_then(|mut f| f.seek(SeekFrom::End(0)).map(|_| f))
            .map_err(|err| {
                format!(
                    "/dev/kmsg: {err} (the kernel log is not readable here: `dmesg` on the host names whom the OOM killer killed)"
                )
            });
        let mut watch = Self {
            mounts,
            cgroups: BTreeMap::new(),
            host_before: host_oom_kills(),
            log,
            unreadable: Vec::new(),
        };
        if let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup")) {
            watch.see(&text);
        }
        watch
    }

    /// Takes note of the cgroups a process' `/proc/PID/cgroup` names (their counts when first
    /// seen are the baseline).
    pub fn see(&mut self, proc_cgroup: &str) {
        for (version, path, folder) in self.mounts.cgroups_of(proc_cgroup) {
            let key = (version, path.clone());
            if self.cgroups.contains_key(&key) {
                continue;
            }
            let top = self.top(version);
            let (mut now, unreadable) = read_cgroup(version, &path, &folder, &top);
            now.oom_kills_before = now.oom_kills_after.take();
            self.unreadable.extend(unreadable);
            self.cgroups.insert(key, (folder, now));
        }
    }

    fn top(&self, version: u8) -> PathBuf {
        let mount = if version == 1 {
            &self.mounts.v1
        } else {
            &self.mounts.v2
        };
        mount.as_ref().map(|(p, _)| p.clone()).unwrap_or_default()
    }

    /// After the job ended: every cgroup read again, the host's count, the kernel log's kills.
    pub fn finish(mut self, tree: &ProcessTree) -> KernelMemory {
        for member in tree.members().values() {
            self.see(&member.cgroups);
        }
        let mut memory = KernelMemory {
            host_oom_kills_before: self.host_before,
            host_oom_kills_after: host_oom_kills(),
            processes: tree.largest(6),
            ..KernelMemory::default()
        };
        for ((version, path), (folder, before)) in std::mem::take(&mut self.cgroups) {
            let top = self.top(version);
            let (mut after, unreadable) = read_cgroup(version, &path, &folder, &top);
            after.oom_kills_before = before.oom_kills_before;
            memory.unreadable.extend(unreadable);
            memory.cgroups.push(after);
        }
        match &mut self.log {
            Ok(log) => {
                memory.log_read = true;
                memory.kills = read_kills(log, |pid| tree.members().contains_key(&pid));
            }
            Err(why) => memory.unreadable.push(why.clone()),
        }
        self.unreadable.extend(memory.unreadable);
        self.unreadable.dedup();
        memory.unreadable = self.unreadable;
        memory
    }
}

/// The OOM kills in what the kernel log holds from here on (one record a read; a record
/// overwritten before it was read is skipped).
fn read_kills(log: &mut File, in_job: impl Fn(u32) -> bool) -> Vec<KernelKill> {
    let mut messages = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match log.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                if let Some((_, message)) = record.split_once(';') {
                    messages.push(message.lines().next().unwrap_or("").to_owned());
                }
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            // EPIPE: records were overwritten; the next read goes on from the oldest kept.
            Err(err) if err.raw_os_error() == Some(nix::libc::EPIPE) => continue,
            Err(_) => break,
        }
        if messages.len() > 100_000 {
            break;
        }
    }
    parse_kills(messages.iter().map(String::as_str), in_job)
}

/// The kills a kernel log's messages tell of: `oom-kill:constraint=…,oom_memcg=…,task=…,pid=…`
/// and `Memory cgroup out of memory: Killed process PID (NAME) total-vm:…, anon-rss:…kB, …`
/// (or `Out of memory: Killed process …` when the host ran out).
pub fn parse_kills<'a>(
    messages: impl Iterator<Item = &'a str>,
    in_job: impl Fn(u32) -> bool,
) -> Vec<KernelKill> {
    let mut kills: Vec<KernelKill> = Vec::new();
    for message in messages {
        if let Some(fields) = message.strip_prefix("oom-kill:") {
            let get = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
            };
            let Some(pid) = get("pid").and_then(|p| p.parse().ok()) else {
                continue;
            };
            let memcg = (get("constraint") == Some("CONSTRAINT_MEMCG"))
                .then(|| get("oom_memcg").map(str::to_owned))
                .flatten();
            kills.push(KernelKill {
                pid,
                name: get("task").unwrap_or("").to_owned(),
                in_job: in_job(pid),
                memcg,
                rss_bytes: None,
                line: message.to_owned(),
            });
        } else if let Some(at) = message.find("Killed process ") {
            let rest = &message[at + "Killed process ".len()..];
            let Some(pid) = rest.split(' ').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let kb = |key: &str| -> Option<u64> {
                let from = rest.find(key)? + key.len();
                let digits: String = rest[from..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse::<u64>().ok().map(|k| k * 1024)
            };
            let rss = [kb("anon-rss:"), kb("file-rss:"), kb("shmem-rss:")]
                .into_iter()
                .flatten()
                .reduce(|a, b| a + b);
            let name = rest
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(n, _)| n.to_owned());
            match kills.iter_mut().rev().find(|k| k.pid == pid) {
                Some(kill) => {
                    kill.rss_bytes = rss;
                    kill.line = message.to_owned();
                }
                None => kills.push(KernelKill {
                    pid,
                    name: name.unwrap_or_default(),
                    in_job: in_job(pid),
                    memcg: message
                        .starts_with("Memory cgroup out of memory")
                        .then(String::new),
                    rss_bytes: rss,
                    line: message.to_owned(),
                }),
            }
        }
    }
    kills
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_finds_the_memory_controller_of_either_version() {
        let info = "\
30 23 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 23 0:27 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
32 23 0:28 /docker/abc /sys/fs/cgroup/my\\040space rw - cgroup cgroup rw,memory";
        let mounts = Mounts::parse(info);
        assert_eq!(
            mounts.v1,
            Some((PathBuf::from("/sys/fs/cgroup/memory"), "/".to_owned()))
        );
        let found = mounts.cgroups_of("9:name=systemd:/\n4:memory:/tmtest\n0::/\n");
        assert_eq!(
            found,
            vec![(
                1,
                "/tmtest".to_owned(),
                PathBuf::from("/sys/fs/cgroup/memory/tmtest")
            )]
        );
        assert_eq!(unescape("my\\040space"), "my space");
    }

    #[test]
    fn the_kernel_log_names_whom_the_oom_killer_killed() {
        let log = [
            "Tasks state (memory values in pages):",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/tmtest,task_memcg=/tmtest,task=python3,pid=4611,uid=0",
            "Memory cgroup out of memory: Killed process 4611 (python3) total-vm:221464kB, anon-rss:204160kB, file-rss:6568kB, shmem-rss:0kB, UID:0 pgtables:456kB oom_score_adj:0",
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=java,pid=99,uid=0",
            "Out of memory: Killed process 99 (java) total-vm:1kB, anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB",
        ];
        let kills = parse_kills(log.into_iter(), |pid| pid == 4611);
        assert_eq!(kills.len(), 2, "{kills:?}");
        assert_eq!(kills[0].pid, 4611);
        assert_eq!(kills[0].name, "python3");
        assert!(kills[0].in_job);
        assert_eq!(kills[0].memcg.as_deref(), Some("/tmtest"));
        assert_eq!(kills[0].rss_bytes, Some((204160 + 6568) * 1024));
        assert_eq!(kills[1].pid, 99);
        assert!(!kills[1].in_job);
        assert_eq!(kills[1].memcg, None, "the host ran out");
        assert_eq!(kills[1].rss_bytes, Some(1024 * 1024));
    }

    /// A cgroup v2 tree given as a folder: the limit set on an ancestor, the peak, the kills.
    #[test]
    fn a_v2_tree_is_read_with_the_limit_its_ancestor_sets() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pod = root.join("kubepods/pod1");
        let leaf = pod.join("ctr");
        fs::create_dir_all(&leaf).unwrap();
        fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        fs::write(root.join("kubepods/memory.max"), "max\n").unwrap();
        fs::write(pod.join("memory.max"), "314572800\n").unwrap();
        fs::write(leaf.join("memory.max"), "max\n").unwrap();
        fs::write(
            leaf.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\noom_group_kill 0\n",
        )
        .unwrap();
        fs::write(leaf.join("memory.peak"), "310378496\n").unwrap();
        fs::write(leaf.join("memory.current"), "4096\n").unwrap();
        let mounts = Mounts {
            v1: None,
            v2: Some((root.to_owned(), "/".to_owned())),
        };
        let mut watch = Watch::start(mounts, u32::MAX - 1);
        watch.see("0::/kubepods/pod1/ctr\n");
        fs::write(
            leaf.join("memory.events"),
            "low 0\nhigh 0\nmax 40\noom 2\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        let memory = watch.finish(&ProcessTree::new(u32::MAX - 1));
        assert_eq!(memory.cgroups.len(), 1, "{memory:?}");
        let cgroup = &memory.cgroups[0];
        assert_eq!(cgroup.version, 2);
        assert_eq!(cgroup.path, "/kubepods/pod1/ctr");
        assert_eq!(cgroup.limit_bytes, Some(314572800));
        assert_eq!(cgroup.limit_from.as_deref(), Some("/kubepods/pod1"));
        assert_eq!(cgroup.peak_bytes, Some(310378496));
        assert_eq!(cgroup.usage_bytes, Some(4096));
        assert_eq!(cgroup.kills_during(), Some(1));
        assert_eq!(cgroup.group_kills_after, Some(0));
    }

    /// Files that hold something else than numbers (a kernel that writes another format, a file
    /// cut short): each is named with what it held, and what there is still read.
    #[test]
    fn a_cgroup_file_that_holds_no_number_is_named_with_what_it_held() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = dir.path().join("job");
        fs::create_dir_all(&leaf).unwrap();
        fs::write(dir.path().join("cgroup.controllers"), "memory\n").unwrap();
        fs::write(leaf.join("memory.max"), "314572800\n").unwrap();
        fs::write(leaf.join("memory.events"), "low 0\noom_kill many\n").unwrap();
        fs::write(leaf.join("memory.peak"), "").unwrap();
        fs::write(leaf.join("memory.current"), "4096\n").unwrap();
        let mounts = Mounts {
            v1: None,
            v2: Some((dir.path().to_owned(), "/".to_owned())),
        };
        let mut watch = Watch::start(mounts, u32::MAX - 1);
        watch.see("0::/job\n");
        let memory = watch.finish(&ProcessTree::new(u32::MAX - 1));
        let cgroup = &memory.cgroups[0];
        assert_eq!(cgroup.limit_bytes, Some(314572800));
        assert_eq!(cgroup.usage_bytes, Some(4096));
        assert_eq!((cgroup.peak_bytes, cgroup.oom_kills_after), (None, None));
        let named = memory.unreadable.join("\n");
        assert!(
            named.contains("job/memory.events: no oom_kill count: \"many\""),
            "{named}"
        );
        // A kernel before 5.17 has no group kills to count: not worth a word.
        assert!(!named.contains("oom_group_kill"), "{named}");
        assert!(
            named.contains("job/memory.peak: not a number of bytes: \"\""),
            "{named}"
        );
        assert!(!named.contains("memory.current"), "{named}");
    }

    /// Files missing: each is named, and what there is still read.
    #[test]
    fn a_cgroup_missing_its_files_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = dir.path().join("x");
        fs::create_dir_all(&leaf).unwrap();
        fs::write(leaf.join("memory.limit_in_bytes"), "209715200\n").unwrap();
        let mounts = Mounts {
            v1: Some((dir.path().to_owned(), "/".to_owned())),
            v2: None,
        };
        let mut watch = Watch::start(mounts, u32::MAX - 1);
        watch.see("4:memory:/x\n");
        let memory = watch.finish(&ProcessTree::new(u32::MAX - 1));
        let cgroup = &memory.cgroups[0];
        assert_eq!(cgroup.limit_bytes, Some(209715200));
        assert_eq!(cgroup.limit_from, None);
        assert_eq!(cgroup.kills_during(), None);
        let named = memory.unreadable.join("\n");
        assert!(named.contains("x/memory.oom_control"), "{named}");
        assert!(named.contains("x/memory.max_usage_in_bytes"), "{named}");
    }
}
