//! Following a recording while the collector writes it: the file is re-read from where the last
//! read stopped — natively from disk, in a browser by asking the server for the bytes from there
//! on (`Range: bytes=N-`, as `collector serve` answers) — and what arrived is handed back as the
//! grown recording (the app grows its curves from it at every poll, and analyzes it again when
//! this module says it is due, on a thread of its own that this module keeps natively, at once
//! in a tab, which has one thread; it knows nothing of the views).

use std::time::Duration;

use collector::analysis::{Analysis, analyze};
use collector::recording::{Follower, Recording};
use web_time::Instant;

/// How often the file is checked (a server is asked at most four times a second, a `304` or a
/// one-byte range while nothing changed; its answer is taken at the next frame after it came).
const POLL: Duration = Duration::from_millis(250);

/// How often, at most, a growing run is analyzed again (its curves grow at every poll).
const ANALYSIS: Duration = Duration::from_secs(1);

/// The most bytes read in one poll, so the window stays responsive while a large file is caught
/// up with.
const MAX_READ: u64 = 64 << 20;

/// An analysis being made: natively on a thread of its own; in a tab, made already.
#[cfg(not(target_arch = "wasm32"))]
type Analyzing = std::thread::JoinHandle<Analysis>;
#[cfg(target_arch = "wasm32")]
type Analyzing = Analysis;

/// The answer to the request under way, once it came: the bytes it brought, or why none.
#[cfg(target_arch = "wasm32")]
type Arrived = std::rc::Rc<std::cell::RefCell<Option<Result<Vec<u8>, String>>>>;

/// How a URL is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// A file being written: what was added to it since the last fetch (`Range: bytes=N-`).
    Added,
    /// A run the server makes anew from several files (a folder of nodes' recordings): the
    /// whole of it again, when its files changed (`If-None-Match`).
    Whole,
}

/// Where the bytes come from: a file natively, a URL in a browser (with the request under way,
/// whose answer the next poll takes).
enum Source {
    #[cfg(not(target_arch = "wasm32"))]
    Path(std::path::PathBuf),
    #[cfg(target_arch = "wasm32")]
    Url {
        url: String,
        fetch: Fetch,
        arrived: Arrived,
        /// The version of the whole run read last ([`Fetch::Whole`]).
        etag: std::rc::Rc<std::cell::RefCell<Option<String>>>,
        asking: bool,
    },
}

/// A file being followed.
pub struct Follow {
    /// The path or URL, for messages.
    name: String,
    source: Source,
    offset: u64,
    follower: Follower,
    last_poll: Option<Instant>,
    /// When the run was last analyzed, and the wait before the next analysis: one second, or
    /// five times the last analysis when that took longer (between them the curves grow at
    /// every poll, the verdict and the phase bands with the next analysis).
    last_analysis: Option<Instant>,
    analysis_interval: Duration,
    /// The analysis running on its own thread, and when it started.
    analyzing: Option<(Analyzing, Instant)>,
    /// The recording grew since it was last analyzed (or since that analysis started).
    stale: bool,
    last_data: Option<Instant>,
    error: Option<String>,
}

impl Follow {
    /// Starts following `path` from its first byte.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(path: std::path::PathBuf) -> Self {
        Self::of(path.display().to_string(), Source::Path(path))
    }

    /// Starts following the file at `url` (same origin) from its first byte.
    #[cfg(target_arch = "wasm32")]
    pub fn url(url: String, fetch: Fetch) -> Self {
        Self::of(
            url.clone(),
            Source::Url {
                url,
                fetch,
                arrived: Default::default(),
                etag: Default::default(),
                asking: false,
            },
        )
    }

    fn of(name: String, source: Source) -> Self {
        Self {
            name,
            source,
            offset: 0,
            follower: Follower::new(),
            last_poll: None,
            last_analysis: None,
            analysis_interval: ANALYSIS,
            analyzing: None,
            stale: false,
            last_data: None,
            error: None,
        }
    }

    /// One line about the state: following, complete, or what went wrong.
    pub fn status(&self) -> String {
        if let Some(error) = &self.error {
            return format!("following stopped: {error}");
        }
        if self.follower.ended() && !self.whole() {
            return "following: the recording is complete".to_owned();
        }
        match self.last_data {
            Some(t) => format!(
                "following: last data {:.1} s ago",
                t.elapsed().as_secs_f64()
            ),
            None => "following: waiting for data".to_owned(),
        }
    }

    /// Whether there is nothing more to read (complete, or an error). A run fetched whole is
    /// complete in each version the server makes of it, and followed until the page closes.
    pub fn is_done(&self) -> bool {
        (self.follower.ended() && !self.whole()) || self.error.is_some()
    }

    /// Whether the run is fetched whole again when it changed ([`Fetch::Whole`]).
    fn whole(&self) -> bool {
        match &self.source {
            #[cfg(target_arch = "wasm32")]
            Source::Url { fetch, .. } => *fetch == Fetch::Whole,
            #[cfg(not(target_arch = "wasm32"))]
            Source::Path(_) => false,
        }
    }

    /// Reads what was added to the file since the last poll (at most every 250 ms, unless
    /// `now`).
    /// `None`: nothing new. Otherwise the grown recording, or why there is none: `current` is
    /// asked for the recording read so far (taken from the app's run) only when records arrived
    /// that extend it.
    pub fn poll(
        &mut self,
        current: impl FnOnce() -> Option<Recording>,
        now: bool,
    ) -> Option<Result<Recording, String>> {
        if self.is_done() {
            return None;
        }
        let due = now || self.last_poll.is_none_or(|t| t.elapsed() >= POLL);
        if !due && !self.answered() {
            return None;
        }
        if due {
            self.last_poll = Some(Instant::now());
        }
        let bytes = match self.read_more(due) {
            Ok(bytes) => bytes,
            Err(err) => {
                self.error = Some(format!("{}: {err}", self.name));
                return None;
            }
        };
        if bytes.is_empty() {
            return None;
        }
        self.last_data = Some(Instant::now());
        // The first bytes start a new recording, even over one already open from the same file
        // (ticking Follow on an open recording): the follower reads the header itself.
        let first = self.offset == bytes.len() as u64;
        let mut recording = if first { None } else { current() };
        let fed = self.follower.feed(&bytes, &mut recording);
        if let Err(err) = &fed {
            self.error = Some(format!("{}: {err}", self.name));
        }
        Some(match (recording, fed) {
            (Some(recording), _) => Ok(recording),
            (None, Err(err)) => Err(format!("{}: {err}", self.name)),
            (None, Ok(_)) => Err(format!(
                "{}: waiting for the recording's header…",
                self.name
            )),
        })
    }

    /// Whether the run is due to be analyzed again: it grew since its last analysis, and that
    /// was long enough ago. (Checked at every poll, with data or without: a job that stops
    /// writing for a while still has what it wrote last analyzed.)
    pub fn analysis_due(&self) -> bool {
        self.stale
            && self
                .last_analysis
                .is_none_or(|t| t.elapsed() >= self.analysis_interval)
    }

    /// The run grew without being analyzed again.
    pub fn grew(&mut self) {
        self.stale = true;
    }

    /// The run was analyzed (and its views made) in `took`: the next analysis waits a second,
    /// or five times that when longer.
    pub fn analyzed_in(&mut self, took: Duration) {
        self.last_analysis = Some(Instant::now());
        self.analysis_interval = ANALYSIS.max(took * 5);
        self.stale = false;
    }

    /// Analyses `recording` on a thread of its own (a copy that shares its series), so that
    /// the frames go on meanwhile; [`Follow::analysis`] hands the result over.
    pub fn analyze_in_background(&mut self, recording: &Recording) {
        self.stale = false;
        #[cfg(not(target_arch = "wasm32"))]
        let analyzing = {
            let copy = recording.clone();
            std::thread::spawn(move || analyze(&copy))
        };
        #[cfg(target_arch = "wasm32")]
        let analyzing = analyze(recording);
        self.analyzing = Some((analyzing, Instant::now()));
    }

    /// Whether an analysis runs on its thread. The recording is not grown meanwhile: growing a
    /// series that the analysis' copy shares would copy it whole.
    pub fn analyzing(&self) -> bool {
        self.analyzing.is_some()
    }

    /// The analysis made on its thread, once it is done (`wait`: waited for).
    pub fn analysis(&mut self, wait: bool) -> Option<Analysis> {
        #[cfg(not(target_arch = "wasm32"))]
        if !wait && !self.analyzing.as_ref()?.0.is_finished() {
            return None;
        }
        let _ = wait;
        let (analyzing, started) = self.analyzing.take()?;
        #[cfg(not(target_arch = "wasm32"))]
        let analysis = analyzing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        #[cfg(target_arch = "wasm32")]
        let analysis = analyzing;
        self.analyzed_in(started.elapsed());
        Some(analysis)
    }

    /// Whether the server's answer came and waits to be taken (natively there is no wait).
    fn answered(&self) -> bool {
        match &self.source {
            #[cfg(target_arch = "wasm32")]
            Source::Url { arrived, .. } => arrived.borrow().is_some(),
            #[cfg(not(target_arch = "wasm32"))]
            Source::Path(_) => false,
        }
    }

    /// What was added since the last read (from a server: what its last answer brought, the
    /// next question asked meanwhile when `ask`).
    #[cfg(target_arch = "wasm32")]
    fn read_more(&mut self, ask: bool) -> Result<Vec<u8>, String> {
        let Source::Url {
            url,
            fetch,
            arrived,
            etag,
            asking,
        } = &mut self.source;
        let answer = arrived.borrow_mut().take();
        let bytes = match answer {
            Some(answer) => {
                *asking = false;
                answer?
            }
            None => Vec::new(),
        };
        if *fetch == Fetch::Whole && !bytes.is_empty() {
            // The run anew: read from its first byte.
            self.offset = 0;
            self.follower = Follower::new();
        }
        self.offset += bytes.len() as u64;
        if ask && !*asking {
            *asking = true;
            let (url, arrived, from) = (url.clone(), arrived.clone(), self.offset);
            match fetch {
                Fetch::Added => wasm_bindgen_futures::spawn_local(async move {
                    let answer = crate::web::fetch_from(&url, from, MAX_READ).await;
                    *arrived.borrow_mut() = Some(answer);
                }),
                Fetch::Whole => {
                    let etag = etag.clone();
                    wasm_bindgen_futures::spawn_local(async move {
                        let known = etag.borrow().clone();
                        let answer =
                            crate::web::fetch_if_changed(&url, known)
                                .await
                                .map(|changed| match changed {
                                    Some((bytes, version)) => {
                                        *etag.borrow_mut() = version;
                                        bytes
                                    }
                                    None => Vec::new(),
                                });
                        *arrived.borrow_mut() = Some(answer);
                    });
                }
            }
        }
        Ok(bytes)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn read_more(&mut self, _ask: bool) -> std::io::Result<Vec<u8>> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let Source::Path(path) = &self.source;
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len < self.offset {
            return Err(std::io::Error::other(
                "the file became shorter: it was replaced; open it again",
            ));
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.take(MAX_READ).read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        Ok(bytes)
    }
}
