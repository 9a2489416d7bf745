//! Following a recording while the collector writes it: the file is re-read from where the last
//! read stopped, and what arrived is handed back as the grown recording (the app rebuilds its
//! views from it; this module knows nothing of them).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use collector::recording::{Follower, Recording};

/// How often the file is checked.
const POLL: Duration = Duration::from_millis(250);

/// The most bytes read in one poll, so the window stays responsive while a large file is caught
/// up with.
const MAX_READ: u64 = 64 << 20;

/// A file being followed.
pub struct Follow {
    path: PathBuf,
    offset: u64,
    follower: Follower,
    last_poll: Option<Instant>,
    /// The wait before the next poll: `POLL`, or three times the last rebuild when that took
    /// longer (a big recording re-analysed every 250 ms would leave the window no time to draw).
    interval: Duration,
    last_data: Option<Instant>,
    error: Option<String>,
}

impl Follow {
    /// Starts following `path` from its first byte.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            follower: Follower::new(),
            last_poll: None,
            interval: POLL,
            last_data: None,
            error: None,
        }
    }

    /// One line about the state: following, complete, or what went wrong.
    pub fn status(&self) -> String {
        if let Some(error) = &self.error {
            return format!("following stopped: {error}");
        }
        if self.follower.ended() {
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

    /// Whether there is nothing more to read (complete, or an error).
    pub fn is_done(&self) -> bool {
        self.follower.ended() || self.error.is_some()
    }

    /// Reads what was added to the file since the last poll (at most every 250 ms, or three times
    /// the last rebuild when that took longer, unless `now`).
    /// `None`: nothing new. Otherwise the grown recording, or why there is none: `current` is
    /// asked for the recording read so far (taken from the app's run) only when records arrived
    /// that extend it.
    pub fn poll(
        &mut self,
        current: impl FnOnce() -> Option<Recording>,
        now: bool,
    ) -> Option<Result<Recording, String>> {
        if self.is_done() || (!now && self.last_poll.is_some_and(|t| t.elapsed() < self.interval)) {
            return None;
        }
        self.last_poll = Some(Instant::now());
        let bytes = match self.read_more() {
            Ok(bytes) => bytes,
            Err(err) => {
                self.error = Some(format!("{}: {err}", self.path.display()));
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
            self.error = Some(format!("{}: {err}", self.path.display()));
        }
        Some(match (recording, fed) {
            (Some(recording), _) => Ok(recording),
            (None, Err(err)) => Err(format!("{}: {err}", self.path.display())),
            (None, Ok(_)) => Err(format!(
                "{}: waiting for the recording's header…",
                self.path.display()
            )),
        })
    }

    /// How long the app took to rebuild its views from the last poll's recording: the next
    /// poll waits three times that when it is longer than 250 ms (a big recording re-analysed
    /// every 250 ms would leave the window no time to draw).
    pub fn rebuilt_in(&mut self, took: Duration) {
        self.interval = POLL.max(took * 3);
    }

    fn read_more(&mut self) -> std::io::Result<Vec<u8>> {
        let mut file = std::fs::File::open(&self.path)?;
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
