//! Time: nanoseconds on the monotonic clock, the one Python's `time.monotonic_ns()` reads, so
//! that the probe's timestamps and the collector's line up.

use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub fn monotonic_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64),
        // CLOCK_MONOTONIC cannot fail on Linux; fall back to "no time has passed".
        Err(_) => 0,
    }
}

/// The recording's time zero, and conversions to nanoseconds after it.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start_ns: u64,
}

impl Clock {
    /// Time zero is now.
    pub fn start() -> Self {
        Self {
            start_ns: monotonic_ns(),
        }
    }

    /// Nanoseconds since time zero.
    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_ns)
    }

    /// Converts a monotonic timestamp (e.g. from the probe) to nanoseconds after time zero.
    pub fn since_start_ns(&self, monotonic_ns: u64) -> u64 {
        monotonic_ns.saturating_sub(self.start_ns)
    }
}

/// Sleeps to absolute deadlines `interval` apart, and says how late each wake-up was.
///
/// When the sampler falls behind by a whole interval or more, the missed deadlines are skipped
/// (no burst of catch-up samples) and the lateness is reported.
pub struct Ticker {
    clock: Clock,
    interval_ns: u64,
    next_ns: u64,
}

impl Ticker {
    /// The first tick is now.
    pub fn new(clock: Clock, interval: Duration) -> Self {
        Self {
            clock,
            interval_ns: interval.as_nanos().max(1) as u64,
            next_ns: clock.now_ns(),
        }
    }

    /// Time left until the next deadline (zero when it has passed).
    pub fn until_next(&self) -> Duration {
        Duration::from_nanos(self.next_ns.saturating_sub(self.clock.now_ns()))
    }

    /// Call when a deadline was reached: moves to the next deadline and returns how late this
    /// tick was, in nanoseconds, when it was a whole interval or more late.
    pub fn tick(&mut self) -> Option<u64> {
        let now = self.clock.now_ns();
        let late_ns = now.saturating_sub(self.next_ns);
        self.next_ns += self.interval_ns;
        if late_ns >= self.interval_ns {
            // Skip the deadlines already missed.
            let missed = late_ns / self.interval_ns;
            self.next_ns += missed * self.interval_ns;
            return Some(late_ns);
        }
        None
    }
}
