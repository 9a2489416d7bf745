//! The runs in the served folder: found recursively (a recording, a snapshot, a profiler trace or
//! memory timeline is a run; a folder of nodes' recordings of one job, or of per-rank snapshots,
//! is one run), each with its kind, size, age and verdict's headline. What a file is, is read
//! once per version of it (its size and modification time); the headline is judged once per
//! version on a thread of its own, so listing never waits for an analysis.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use collector::open::Kind;
use collector::recording::Header;

/// A run changed within this long ago is growing (the collector flushes at least every second).
pub const GROWING: Duration = Duration::from_secs(10);

/// A growing run is judged again at most this often (each judgement reads it whole).
const REJUDGE: Duration = Duration::from_secs(30);

/// How deep folders are looked into.
const DEPTH: usize = 8;

/// What judges a run: its headline and its JSON report (`collector report --json`), or why it
/// cannot be read.
pub type Judge = fn(&Path) -> Result<(String, String), String>;

/// A version of a file or a folder run: its size, modification time and file count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    size: u64,
    modified_ns: u128,
    files: usize,
}

impl Version {
    /// An HTTP entity tag naming this version (a folder run's bytes are made anew for each
    /// request: a follower asks whether they changed with `If-None-Match`).
    pub fn etag(&self) -> String {
        format!("\"{}-{}-{}\"", self.size, self.modified_ns, self.files)
    }
}

/// One run, as `GET /api/runs` lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Run {
    /// Its path under the served folder, `/`-separated: `GET /runs/NAME`.
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// Its bytes (a folder's: all of its files').
    pub size: u64,
    /// When it last changed, in seconds since the Unix epoch.
    pub modified: u64,
    /// It changed in the last ten seconds: it is probably still written.
    pub growing: bool,
    /// The verdict in one line, once judged (for a growing run, of the version judged last).
    pub headline: Option<String>,
    /// The headline is of this version of the run (not of an earlier one).
    pub judged_current: bool,
    /// Why it cannot be read or judged.
    pub error: Option<String>,
    /// A folder run's files, by their names under the served folder (`GET /runs/NAME` each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    #[serde(skip)]
    pub path: PathBuf,
    #[serde(skip)]
    pub version: Version,
}

/// What a file is, read once per version.
#[derive(Clone)]
struct FileInfo {
    version: Version,
    /// Its kind, or why its first bytes cannot be read.
    kind: Result<Kind, String>,
    /// What its first bytes look like, when they are of no known kind.
    unknown: Option<String>,
    /// A recording's header (to tell nodes of one run), read from its first bytes.
    header: Option<Header>,
}

/// A judgement: of which version, when, and what it said.
struct Judgement {
    version: Version,
    at: Instant,
    result: Result<(String, String), String>,
}

/// The served folder's runs and what is known of them.
pub struct Runs {
    root: PathBuf,
    judge: Judge,
    files: Mutex<HashMap<PathBuf, FileInfo>>,
    judged: Mutex<HashMap<String, Judgement>>,
    pending: Mutex<HashSet<String>>,
    queue: Mutex<Option<mpsc::Sender<Run>>>,
}

impl Runs {
    /// The runs under `root` (canonical), judged by `judge` on a thread of their own.
    pub fn new(root: PathBuf, judge: Judge) -> Arc<Self> {
        let runs = Arc::new(Self {
            root,
            judge,
            files: Mutex::default(),
            judged: Mutex::default(),
            pending: Mutex::default(),
            queue: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel::<Run>();
        let weak = Arc::downgrade(&runs);
        let spawned = std::thread::Builder::new()
            .name("judge".to_owned())
            .spawn(move || {
                for run in rx {
                    let Some(runs) = weak.upgrade() else { break };
                    // What it said is kept; the list shows it.
                    let _ = runs.judge_now(&run);
                    lock(&runs.pending).remove(&run.name);
                }
            });
        if spawned.is_ok() {
            *lock(&runs.queue) = Some(tx);
        }
        runs
    }

    /// The served folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every run under the folder, by name; those not judged in this version are queued.
    pub fn list(&self) -> Vec<Run> {
        let mut runs = Vec::new();
        self.walk(&self.root, 0, &mut runs);
        runs.sort_by(|a, b| a.name.cmp(&b.name));
        let now = SystemTime::now();
        let judged = lock(&self.judged);
        let mut due = Vec::new();
        for run in &mut runs {
            let age = now
                .duration_since(SystemTime::UNIX_EPOCH + Duration::from_secs(run.modified))
                .unwrap_or_default();
            run.growing = age < GROWING;
            if run.error.is_some() {
                continue;
            }
            match judged.get(&run.name) {
                Some(j) => {
                    run.judged_current = j.version == run.version;
                    match &j.result {
                        Ok((headline, _)) => run.headline = Some(headline.clone()),
                        Err(err) if run.judged_current => run.error = Some(err.clone()),
                        Err(_) => {}
                    }
                    // A finished run is judged again at once, a growing one now and then.
                    if !run.judged_current && (!run.growing || j.at.elapsed() >= REJUDGE) {
                        due.push(run.clone());
                    }
                }
                None => due.push(run.clone()),
            }
        }
        drop(judged);
        let queue = lock(&self.queue);
        let mut pending = lock(&self.pending);
        for run in due {
            if let Some(tx) = queue.as_ref()
                && pending.insert(run.name.clone())
                && tx.send(run).is_err()
            {
                break;
            }
        }
        runs
    }

    /// The JSON report of `run`, judged now unless this version was judged already.
    pub fn report(&self, run: &Run) -> Result<String, String> {
        if let Some(j) = lock(&self.judged).get(&run.name)
            && j.version == run.version
        {
            return j.result.clone().map(|(_, json)| json);
        }
        self.judge_now(run).map(|(_, json)| json)
    }

    /// Judges `run` unless its version was judged already, and keeps what was said.
    fn judge_now(&self, run: &Run) -> Result<(String, String), String> {
        if let Some(j) = lock(&self.judged).get(&run.name)
            && j.version == run.version
        {
            return j.result.clone();
        }
        let result = (self.judge)(&run.path);
        lock(&self.judged).insert(
            run.name.clone(),
            Judgement {
                version: run.version,
                at: Instant::now(),
                result: result.clone(),
            },
        );
        result
    }

    /// The runs in `dir` and below.
    fn walk(&self, dir: &Path, depth: usize, runs: &mut Vec<Run>) {
        let mut folders = self.folder(dir, depth, runs);
        if depth < DEPTH {
            folders.sort();
            for folder in folders {
                self.walk(&folder, depth + 1, runs);
            }
        }
    }

    /// The runs `dir` holds itself (at `depth` below the served folder: below it, a folder can
    /// be one run), added to `runs`; its folders, to look into.
    fn folder(&self, dir: &Path, depth: usize, runs: &mut Vec<Run>) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut files = Vec::new();
        let mut folders = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            // A symbolic link is followed only when it stays inside the folder.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink()
                && !std::fs::canonicalize(&path).is_ok_and(|p| p.starts_with(&self.root))
            {
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() && !kind.is_symlink() => folders.push(path),
                Ok(meta) if meta.is_file() => files.push((path, meta)),
                _ => {}
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let infos: Vec<(PathBuf, std::fs::Metadata, FileInfo)> = files
            .into_iter()
            .map(|(path, meta)| {
                let info = self.info(&path, &meta);
                (path, meta, info)
            })
            .collect();
        let mut members = HashSet::new();
        if depth > 0
            && let Some((kind, chosen)) = folder_run(&infos)
        {
            let size = chosen.iter().map(|&i| infos[i].1.len()).sum();
            let modified_ns = chosen
                .iter()
                .map(|&i| modified_ns(&infos[i].1))
                .max()
                .unwrap_or(0);
            let mut run = self.run(dir, kind, size, modified_ns, chosen.len(), None);
            run.files = chosen.iter().map(|&i| self.name(&infos[i].0)).collect();
            runs.push(run);
            members.extend(chosen);
        }
        for (i, (path, meta, info)) in infos.iter().enumerate() {
            if members.contains(&i) {
                continue;
            }
            let (kind, error) = match &info.kind {
                Ok(Kind::Unknown) if !named_like_a_run(path) => continue,
                Ok(Kind::Compressed) => continue,
                Ok(Kind::Unknown) => (Kind::Unknown, info.unknown.clone()),
                Ok(kind) => (*kind, None),
                Err(err) => (Kind::Unknown, Some(err.clone())),
            };
            runs.push(self.run(path, kind, meta.len(), modified_ns(meta), 1, error));
        }
        folders
    }

    /// The run at `path` (a file, or a folder that is one run) as [`Runs::list`] would list it,
    /// its headline aside: only the folder holding it is read, not the whole tree (a viewer
    /// following a run asks several times a second).
    pub fn run_at(&self, path: &Path) -> Option<Run> {
        let inside = path.strip_prefix(&self.root).ok()?;
        let depth = inside.components().count();
        if depth > DEPTH + 1 {
            return None;
        }
        let mut runs = Vec::new();
        if path.is_dir() {
            // A folder is a run in its parent's listing only when it is read as one itself.
            self.folder(path, depth, &mut runs);
        } else {
            self.folder(path.parent()?, depth.checked_sub(1)?, &mut runs);
        }
        runs.into_iter().find(|r| r.path == path)
    }

    fn run(
        &self,
        path: &Path,
        kind: Kind,
        size: u64,
        modified_ns: u128,
        files: usize,
        error: Option<String>,
    ) -> Run {
        Run {
            name: self.name(path),
            kind,
            size,
            modified: u64::try_from(modified_ns / 1_000_000_000).unwrap_or(u64::MAX),
            growing: false,
            headline: None,
            judged_current: false,
            error,
            files: Vec::new(),
            path: path.to_owned(),
            version: Version {
                size,
                modified_ns,
                files,
            },
        }
    }

    /// A path's name under the served folder, `/`-separated.
    fn name(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// What the file is, from the cache when this version was read already.
    fn info(&self, path: &Path, meta: &std::fs::Metadata) -> FileInfo {
        let version = Version {
            size: meta.len(),
            modified_ns: modified_ns(meta),
            files: 1,
        };
        if let Some(info) = lock(&self.files).get(path)
            && info.version == version
        {
            return info.clone();
        }
        let info = read_info(path, version);
        lock(&self.files).insert(path.to_owned(), info.clone());
        info
    }
}

/// A folder that is one run: its kind and which of its files make it, by the rule `report DIR`
/// reads a folder with ([`collector::open::folder_run`]), listed as one run where it is several
/// files: nodes' recordings of one job (at least two, each from its own host:
/// [`collector::recording::are_nodes_of_one_run`]), at least two per-rank snapshots, or at least
/// two per-rank profiler traces.
fn folder_run(infos: &[(PathBuf, std::fs::Metadata, FileInfo)]) -> Option<(Kind, Vec<usize>)> {
    use collector::open::FolderRun;
    let files = infos.iter().enumerate().map(|(i, (path, _, info))| {
        let kind = info.kind.as_ref().map_or(Kind::Unknown, |k| *k);
        (Indexed(i, path), kind)
    });
    let indices = |files: Vec<Indexed<'_>>| -> Vec<usize> { files.iter().map(|f| f.0).collect() };
    match collector::open::folder_run(files) {
        FolderRun::Nodes(files) => {
            // The recordings among them (a file named like one that is none is listed on its
            // own, with what is wrong).
            let mut chosen = indices(files);
            chosen.retain(|&i| infos[i].2.header.is_some());
            let headers: Vec<&Header> = chosen
                .iter()
                .filter_map(|&i| infos[i].2.header.as_ref())
                .collect();
            collector::recording::are_nodes_of_one_run(&headers)
                .then_some((Kind::NodeRecordings, chosen))
        }
        FolderRun::Ranks(files) => {
            let chosen: Vec<usize> = files.iter().map(|(_, f)| f.0).collect();
            (chosen.len() >= 2).then_some((Kind::RankSnapshots, chosen))
        }
        // Opened as `report DIR` opens them: merged as nodes' recordings are.
        FolderRun::Traces(files) => {
            let chosen = indices(files);
            (chosen.len() >= 2).then_some((Kind::RankTraces, chosen))
        }
        FolderRun::Nothing { .. } => None,
    }
}

/// A file of a folder's listing: its index, and its path (whose name the folder rule reads).
struct Indexed<'a>(usize, &'a PathBuf);

impl AsRef<Path> for Indexed<'_> {
    fn as_ref(&self) -> &Path {
        self.1
    }
}

/// A file's kind (gzip data by what it holds) and, for a recording, its header.
fn read_info(path: &Path, version: Version) -> FileInfo {
    use std::io::Read as _;
    let mut first = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|f| f.take(1 << 16).read_to_end(&mut first))
        .map_err(|err| format!("cannot read the file ({err}): {}", path.display()));
    let kind = read.map(|_| match Kind::of(&first) {
        Kind::Compressed => Kind::of_compressed(&first),
        kind => kind,
    });
    let header = matches!(kind, Ok(Kind::Recording))
        .then(|| collector::recording::Reader::new(&first).ok())
        .flatten()
        .map(|r| r.header().clone());
    let unknown = matches!(kind, Ok(Kind::Unknown)).then(|| {
        let first = &first[..first.len().min(collector::open::KIND_BYTES)];
        format!(
            "{}: {}: {}",
            Kind::Unknown.name(),
            collector::open::describe(first),
            path.display()
        )
    });
    FileInfo {
        version,
        kind,
        unknown,
        header,
    }
}

/// Files named like recordings or snapshots are listed, with what is wrong, even when their
/// bytes are not one.
fn named_like_a_run(path: &Path) -> bool {
    path.extension().is_some_and(|e| {
        collector::open::RUN_EXTENSIONS
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
}

fn modified_ns(meta: &std::fs::Metadata) -> u128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// A lock, even one a panicking thread held (what it guards is a cache).
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
