//! The last fifteen minutes in the node's own memory, for the operator's
//! console: per protocol, requests, errors and p50/p99 latency every five
//! seconds; per plugin, its calls, errors, timeouts and limit kills since it
//! was first called, its calls in the last minute and its p99.
//!
//! `/metrics` answers a Prometheus that keeps the history; a node run without
//! one still shows its charts from here. Latencies go into a fixed log-scale
//! histogram per five-second slot (128 counters, about 19 % apart, 10 µs to
//! hours), so a series is a bounded ring of 180 slots whatever the traffic;
//! a general-purpose histogram (HDR) would cost tens of kilobytes a slot.
//!
//! Slots advance with the wall clock when they are written or read, so no
//! task has to tick: an idle node keeps its last points and answers zeros for
//! the slots nobody wrote.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

/// How long one point of a series covers.
pub const SLOT_MS: u64 = 5_000;
/// How many points a series keeps: fifteen minutes.
pub const SLOTS: u64 = 180;
/// The most plugin names kept (a plugins folder holds far fewer); a name
/// beyond it is counted in the protocol's series only.
const MAX_PLUGINS: usize = 1024;

/// Log-scale latency buckets: bucket `i` holds latencies up to `FIRST_US * 2^(i/4)`.
const BUCKETS: usize = 128;
const FIRST_US: f64 = 10.0;
const PER_DOUBLING: f64 = 4.0;

#[derive(Clone)]
struct Latencies([u32; BUCKETS]);

impl Default for Latencies {
    fn default() -> Self {
        Latencies([0; BUCKETS])
    }
}

impl Latencies {
    fn observe(&mut self, elapsed: Duration) {
        let micros = elapsed.as_secs_f64() * 1e6;
        let index = if micros <= FIRST_US {
            0
        } else {
            ((micros / FIRST_US).log2() * PER_DOUBLING).ceil() as usize
        };
        let bucket = &mut self.0[index.min(BUCKETS - 1)];
        *bucket = bucket.saturating_add(1);
    }

    fn add(&mut self, other: &Latencies) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// The upper bound of the bucket holding quantile `q`, in milliseconds.
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total: u64 = self.0.iter().map(|count| u64::from(*count)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.0.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= rank {
                let micros = FIRST_US * 2f64.powf(index as f64 / PER_DOUBLING);
                return Some((micros / 1000.0 * 1000.0).round() / 1000.0);
            }
        }
        None
    }
}

#[derive(Clone, Default)]
struct Slot {
    index: u64,
    requests: u32,
    errors: u32,
    latencies: Latencies,
}

/// One name's slots, oldest first, none older than [`SLOTS`].
#[derive(Default)]
struct Series {
    slots: VecDeque<Slot>,
}

impl Series {
    fn observe(&mut self, now_slot: u64, failed: bool, elapsed: Duration) {
        if self.slots.back().is_none_or(|slot| slot.index != now_slot) {
            self.slots.push_back(Slot {
                index: now_slot,
                ..Slot::default()
            });
        }
        self.forget_before(now_slot);
        let slot = self.slots.back_mut().expect("pushed above");
        slot.requests = slot.requests.saturating_add(1);
        slot.errors = slot.errors.saturating_add(u32::from(failed));
        slot.latencies.observe(elapsed);
    }

    fn forget_before(&mut self, now_slot: u64) {
        while self
            .slots
            .front()
            .is_some_and(|slot| slot.index + SLOTS <= now_slot)
        {
            self.slots.pop_front();
        }
    }

    /// The [`SLOTS`] whole slots before `now_slot`, oldest first, zeros where nothing happened.
    fn points(&self, now_slot: u64) -> Vec<Point> {
        let first = now_slot.saturating_sub(SLOTS);
        let mut written = self.slots.iter().peekable();
        (first..now_slot)
            .map(|index| {
                while written.peek().is_some_and(|slot| slot.index < index) {
                    written.next();
                }
                let slot = written.peek().filter(|slot| slot.index == index);
                Point {
                    at_ms: (index + 1) * SLOT_MS,
                    requests: slot.map_or(0, |slot| slot.requests),
                    errors: slot.map_or(0, |slot| slot.errors),
                    p50_ms: slot.and_then(|slot| slot.latencies.quantile_ms(0.5)),
                    p99_ms: slot.and_then(|slot| slot.latencies.quantile_ms(0.99)),
                }
            })
            .collect()
    }

    /// Requests in the slots from `since_slot` on, and the latencies of all the slots kept.
    fn since(&self, since_slot: u64) -> (u64, Latencies) {
        let mut merged = Latencies::default();
        let mut requests = 0;
        for slot in &self.slots {
            merged.add(&slot.latencies);
            if slot.index >= since_slot {
                requests += u64::from(slot.requests);
            }
        }
        (requests, merged)
    }
}

/// One point of a protocol's chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The end of the slot, Unix milliseconds.
    pub at_ms: u64,
    pub requests: u32,
    pub errors: u32,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A plugin's counts since its first call, and its last minutes.
#[derive(Default)]
struct PluginCounts {
    calls: u64,
    errors: u64,
    timeouts: u64,
    limit_kills: u64,
    series: Series,
}

/// What the console shows of one plugin's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PluginStats {
    pub calls_per_minute: f64,
    pub calls: u64,
    pub errors: u64,
    pub p99_ms: Option<f64>,
    pub timeouts: u64,
    pub limit_kills: u64,
}

#[derive(Default)]
struct Books {
    protocols: BTreeMap<&'static str, Series>,
    plugins: BTreeMap<String, PluginCounts>,
}

/// The recent past of the node's protocols and plugins (see the module docs).
#[derive(Default)]
pub struct Recent {
    books: Mutex<Books>,
}

fn slot_of(unix_ms: u64) -> u64 {
    unix_ms / SLOT_MS
}

impl Recent {
    /// One request a protocol served; `failed` when it was refused or failed.
    pub fn observe_request(&self, protocol: &'static str, failed: bool, elapsed: Duration, now_ms: u64) {
        self.books
            .lock()
            .protocols
            .entry(protocol)
            .or_default()
            .observe(slot_of(now_ms), failed, elapsed);
    }

    /// One plugin call (a message, a tool, a scheduled run) ended with `outcome`
    /// (`ok`, or [`crate::vocab::InvokeError::outcome`]'s labels).
    pub fn observe_call(&self, plugin: &str, outcome: &str, elapsed: Duration, now_ms: u64) {
        let mut books = self.books.lock();
        if !books.plugins.contains_key(plugin) && books.plugins.len() >= MAX_PLUGINS {
            return;
        }
        let counts = books.plugins.entry(plugin.to_string()).or_default();
        counts.calls += 1;
        let failed = outcome != "ok";
        counts.errors += u64::from(failed);
        counts.timeouts += u64::from(outcome == "timeout");
        counts.limit_kills += u64::from(matches!(outcome, "memory" | "output_too_large"));
        counts.series.observe(slot_of(now_ms), failed, elapsed);
    }

    /// `protocol`'s last fifteen minutes, one point a slot, oldest first.
    pub fn series(&self, protocol: &str, now_ms: u64) -> Vec<Point> {
        let now_slot = slot_of(now_ms);
        let books = self.books.lock();
        match books.protocols.get(protocol) {
            Some(series) => series.points(now_slot),
            None => Series::default().points(now_slot),
        }
    }

    /// `plugin`'s counts; zeros for a plugin never called.
    pub fn plugin(&self, plugin: &str, now_ms: u64) -> PluginStats {
        let now_slot = slot_of(now_ms);
        let mut books = self.books.lock();
        let Some(counts) = books.plugins.get_mut(plugin) else {
            return PluginStats::default();
        };
        counts.series.forget_before(now_slot);
        // The last minute: the twelve slots before this one, this one's calls so far.
        let minute_slots = 60_000 / SLOT_MS;
        let (last_minute, latencies) = counts.series.since(now_slot.saturating_sub(minute_slots));
        PluginStats {
            calls_per_minute: last_minute as f64,
            calls: counts.calls,
            errors: counts.errors,
            p99_ms: latencies.quantile_ms(0.99),
            timeouts: counts.timeouts,
            limit_kills: counts.limit_kills,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn a_series_is_fifteen_minutes_of_five_second_points_with_zeros_between() {
        let recent = Recent::default();
        recent.observe_request("a2a", false, Duration::from_millis(2), T0);
        recent.observe_request("a2a", true, Duration::from_millis(40), T0 + 1);
        recent.observe_request("a2a", false, Duration::from_millis(2), T0 + 3 * SLOT_MS);
        let points = recent.series("a2a", T0 + 4 * SLOT_MS);
        assert_eq!(points.len(), SLOTS as usize);
        let last: Vec<_> = points.iter().rev().take(4).rev().cloned().collect();
        assert_eq!((last[0].requests, last[0].errors), (2, 1));
        assert_eq!((last[1].requests, last[2].requests), (0, 0));
        assert_eq!(last[1].p99_ms, None);
        assert_eq!((last[3].requests, last[3].errors), (1, 0));
        let (p50, p99) = (last[0].p50_ms.unwrap(), last[0].p99_ms.unwrap());
        assert!((2.0..2.5).contains(&p50), "{p50}");
        assert!((40.0..48.0).contains(&p99), "{p99}");
        assert!(
            points
                .windows(2)
                .all(|pair| pair[1].at_ms == pair[0].at_ms + SLOT_MS)
        );
        // Fifteen minutes later, all of it has scrolled out.
        let later = recent.series("a2a", T0 + (SLOTS + 4) * SLOT_MS);
        assert!(later.iter().all(|point| point.requests == 0));
        assert_eq!(recent.series("hai", T0).len(), SLOTS as usize);
    }

    #[test]
    fn a_plugin_counts_its_errors_timeouts_and_limit_kills() {
        let recent = Recent::default();
        for outcome in ["ok", "ok", "timeout", "memory", "output_too_large", "failure"] {
            recent.observe_call("calc", outcome, Duration::from_millis(5), T0);
        }
        let stats = recent.plugin("calc", T0 + SLOT_MS);
        assert_eq!(
            (stats.calls, stats.errors, stats.timeouts, stats.limit_kills),
            (6, 4, 1, 2)
        );
        assert_eq!(stats.calls_per_minute, 6.0);
        assert!(stats.p99_ms.is_some_and(|p99| (5.0..6.0).contains(&p99)));
        // A minute on, the rate is back to zero; the totals stay.
        let later = recent.plugin("calc", T0 + 14 * SLOT_MS);
        assert_eq!((later.calls_per_minute, later.calls), (0.0, 6));
        assert_eq!(recent.plugin("never-called", T0), PluginStats::default());
    }
}
