//! Taking a burst of watch events whole before the controller plans: planning looks at the
//! whole cluster, and while it runs the watches are not read, so planning per handful of events
//! once left a controller of 5,000 nodes more than a minute behind its watches.

use std::time::Duration;

use futures::StreamExt;

/// How long the watches must be quiet before the controller plans: a burst of events (a
/// re-list, a thousand Nodes joining, the echo of the last plan's writes) is one plan, not one
/// per event (a plan takes a third of a second at 5,000 nodes on a busy machine).
pub const BURST_QUIET: Duration = Duration::from_millis(50);

/// The longest a burst is taken before planning anyway (a steady stream of events still gets
/// a plan every second, and the Lease is renewed on time).
pub const BURST_MAX: Duration = Duration::from_secs(1);

/// Hands `each` every event `events` yields until none has come for [`BURST_QUIET`], or
/// [`BURST_MAX`] has passed since the call; returns whether the stream ended.
pub async fn take_burst<S: futures::Stream + Unpin>(
    events: &mut S,
    mut each: impl FnMut(S::Item),
) -> bool {
    let until = tokio::time::Instant::now() + BURST_MAX;
    loop {
        let wait = (tokio::time::Instant::now() + BURST_QUIET).min(until);
        match tokio::time::timeout_at(wait, events.next()).await {
            Ok(Some(ev)) => each(ev),
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;

    /// Events 10 ms apart are one burst; a gap longer than the quiet time ends it, and the
    /// next event is left for the next burst.
    #[tokio::test(start_paused = true)]
    async fn a_burst_ends_when_the_watches_are_quiet() {
        let (tx, mut events) = mpsc::unbounded();
        tokio::spawn(async move {
            for i in 0..5 {
                tx.unbounded_send(i).unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.unbounded_send(5).unwrap();
            // the sender stays open until the test ends
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        let mut got = Vec::new();
        let ended = take_burst(&mut events, |e| got.push(e)).await;
        assert!(!ended);
        assert_eq!(got, [0, 1, 2, 3, 4]);
        // the controller's loop waits for the first event of the next burst
        assert_eq!(events.next().await, Some(5));
    }

    /// A stream that never goes quiet still gets a plan every `BURST_MAX`.
    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_is_cut_at_the_longest_burst() {
        let (tx, mut events) = mpsc::unbounded();
        tokio::spawn(async move {
            for i in 0u32.. {
                if tx.unbounded_send(i).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let start = tokio::time::Instant::now();
        let mut n = 0;
        let ended = take_burst(&mut events, |_| n += 1).await;
        assert!(!ended);
        assert_eq!(start.elapsed(), BURST_MAX);
        assert!((49..=51).contains(&n), "{n} events in one burst");
    }

    /// A stream that ends says so.
    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_watches_is_reported() {
        let mut events = futures::stream::iter([1, 2, 3]);
        let mut got = Vec::new();
        assert!(take_burst(&mut events, |e| got.push(e)).await);
        assert_eq!(got, [1, 2, 3]);
    }
}
