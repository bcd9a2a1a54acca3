//! One line per connection: the copies of one connection (same decision, rule, addresses,
//! protocol and ports) that arrive while it is remembered make no line of their own; they are
//! counted, and when the connection goes quiet (no copy for [`IDLE`]) or has been remembered
//! for [`MAX_AGE`] the count becomes one `repeats` line. A denied flood of one 5-tuple is thus
//! its first line plus one count per [`MAX_AGE`]; a denied TCP connect's retransmitted SYNs
//! are one line.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] are remembered; past that the oldest is let go (its
//! count written) to make room, so memory stays fixed under any flood of distinct 5-tuples.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::line::Line;

/// A connection goes quiet after this long without a copy.
pub(crate) const IDLE: Duration = Duration::from_secs(5);
/// A connection's count is written at least this often while it lasts.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);
/// Connections remembered at once.
pub(crate) const MAX_CONNECTIONS: usize = 16_384;

/// What makes two copies the same connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// `reg5`: the decision and its detail.
    pub code: u32,
    /// `reg6`: the rule.
    pub rule: u32,
    /// The addresses.
    pub src: IpAddr,
    /// The addresses.
    pub dst: IpAddr,
    /// The protocol.
    pub proto: u8,
    /// The ports (or ICMP type and code).
    pub sport: Option<u16>,
    /// The ports (or ICMP type and code).
    pub dport: Option<u16>,
}

struct Entry {
    first: Instant,
    last: Instant,
    /// Copies after the first.
    more: u64,
    line: Line,
}

/// The connections remembered.
#[derive(Default)]
pub(crate) struct Fold {
    entries: HashMap<Key, Entry>,
    order: VecDeque<Key>,
}

impl Fold {
    /// Whether `key` is a connection already remembered; if so its copy is counted.
    pub(crate) fn repeat(&mut self, key: &Key, now: Instant) -> bool {
        match self.entries.get_mut(key) {
            Some(e) => {
                e.more += 1;
                e.last = now;
                true
            }
            None => false,
        }
    }

    /// Remembers a new connection whose first line is `line`; returns the `repeats` line of
    /// the connection let go to make room, if one had repeats.
    pub(crate) fn remember(&mut self, key: Key, line: Line, now: Instant) -> Option<Line> {
        let mut out = None;
        if self.entries.len() >= MAX_CONNECTIONS {
            while let Some(old) = self.order.pop_front() {
                if let Some(e) = self.entries.remove(&old) {
                    out = repeats(e);
                    break;
                }
            }
        }
        self.entries.insert(
            key,
            Entry {
                first: now,
                last: now,
                more: 0,
                line,
            },
        );
        self.order.push_back(key);
        out
    }

    /// Lets go of the connections quiet for [`IDLE`] or remembered for [`MAX_AGE`]; returns
    /// the `repeats` lines of those with copies after their first.
    pub(crate) fn sweep(&mut self, now: Instant) -> Vec<Line> {
        let mut out = Vec::new();
        let expired: Vec<Key> = self
            .entries
            .iter()
            .filter(|(_, e)| now - e.last >= IDLE || now - e.first >= MAX_AGE)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            if let Some(e) = self.entries.remove(&k) {
                out.extend(repeats(e));
            }
        }
        if self.order.len() > 2 * self.entries.len() + 64 {
            let live = &self.entries;
            self.order.retain(|k| live.contains_key(k));
        }
        out
    }

    /// Connections remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The line that counts a connection's copies after its first (none when there were none).
fn repeats(e: Entry) -> Option<Line> {
    if e.more == 0 {
        return None;
    }
    let mut l = e.line;
    l.time = super::line::now();
    l.event = "repeats";
    l.packets = Some(e.more);
    l.duration_ms = Some((e.last - e.first).as_millis() as u64);
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sport: u16) -> Key {
        Key {
            code: 2,
            rule: 0,
            src: "10.128.0.5".parse().unwrap(),
            dst: "10.128.0.6".parse().unwrap(),
            proto: 6,
            sport: Some(sport),
            dport: Some(80),
        }
    }

    #[test]
    fn a_flood_of_one_connection_is_one_line_and_a_count() {
        let mut f = Fold::default();
        let t0 = Instant::now();
        assert!(!f.repeat(&key(1), t0));
        assert!(f.remember(key(1), Line::note("n", "first"), t0).is_none());
        for i in 1..=9999u64 {
            assert!(f.repeat(&key(1), t0 + Duration::from_micros(100 * i)));
        }
        // Still going: nothing yet.
        assert!(f.sweep(t0 + Duration::from_secs(2)).is_empty());
        // Quiet: one count.
        let out = f.sweep(t0 + Duration::from_secs(8));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].event, "repeats");
        assert_eq!(out[0].packets, Some(9999));
        assert_eq!(out[0].duration_ms, Some(999));
        assert_eq!(f.len(), 0);
        // A connection with no repeats leaves without a line.
        f.remember(key(2), Line::note("n", "x"), t0);
        assert!(f.sweep(t0 + Duration::from_secs(6)).is_empty());
    }

    #[test]
    fn a_long_flood_is_counted_every_max_age_and_memory_is_bounded() {
        let mut f = Fold::default();
        let t0 = Instant::now();
        f.remember(key(1), Line::note("n", "first"), t0);
        let mut t = t0;
        let mut lines = 0;
        while t < t0 + Duration::from_secs(150) {
            t += Duration::from_secs(1);
            if !f.repeat(&key(1), t) {
                f.remember(key(1), Line::note("n", "again"), t);
            }
            lines += f.sweep(t).len();
        }
        assert_eq!(lines, 2, "one count per minute of a 150 s flood");

        let mut f = Fold::default();
        let mut evicted = 0;
        for i in 0..(MAX_CONNECTIONS + 100) {
            let k = Key {
                sport: Some((i % 60_000) as u16),
                rule: i as u32,
                ..key(0)
            };
            f.repeat(&k, t0);
            if f.remember(k, Line::note("n", "x"), t0).is_some() {
                evicted += 1;
            }
        }
        assert_eq!(f.len(), MAX_CONNECTIONS);
        assert_eq!(evicted, 0, "no repeats to report for the evicted");
    }
}
