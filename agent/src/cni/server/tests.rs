//! Unit tests of the server's parts: per-sandbox locks, formatting, status mapping.

use super::*;
use hyper::StatusCode;

#[tokio::test]
async fn keyed_locks_serialise_per_key_and_clean_up() {
    let locks = Arc::new(KeyedLocks::default());
    let a = locks.clone().lock("a".into()).await;
    // A different key is free.
    let b = timeout(Duration::from_secs(1), locks.clone().lock("b".into()))
        .await
        .expect("key b must not wait for key a");
    assert_eq!(locks.len(), 2);
    // The same key waits until the first guard is dropped.
    let second = tokio::spawn(locks.clone().lock("a".into()));
    tokio::task::yield_now().await;
    assert!(!second.is_finished());
    drop(a);
    let a2 = timeout(Duration::from_secs(1), second)
        .await
        .expect("waiter must get the lock once it is released")
        .unwrap();
    assert_eq!(locks.len(), 2);
    drop(a2);
    drop(b);
    assert_eq!(locks.len(), 0);
}

#[tokio::test]
async fn cancelled_waiters_do_not_leak_entries() {
    let locks = Arc::new(KeyedLocks::default());
    let a = locks.clone().lock("a".into()).await;
    for _ in 0..10 {
        let r = timeout(Duration::from_millis(5), locks.clone().lock("a".into())).await;
        assert!(r.is_err());
    }
    assert_eq!(locks.len(), 1);
    drop(a);
    assert_eq!(locks.len(), 0);
    // Cancelled after the holder released but before the waiter ran.
    let a = locks.clone().lock("k".into()).await;
    let waiter = tokio::spawn(locks.clone().lock("k".into()));
    tokio::task::yield_now().await;
    drop(a);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(locks.len(), 0);
}

#[test]
fn seconds_formatting() {
    assert_eq!(fmt_secs(Duration::from_secs(119)), "119s");
    assert_eq!(fmt_secs(Duration::from_millis(900)), "0.9s");
    assert_eq!(fmt_secs(Duration::from_millis(4500)), "4.5s");
    assert_eq!(fmt_secs(Duration::from_millis(999)), "1s");
}

#[test]
fn status_mapping() {
    assert_eq!(http_status(4), StatusCode::BAD_REQUEST);
    assert_eq!(http_status(7), StatusCode::BAD_REQUEST);
    assert_eq!(http_status(11), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(http_status(50), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(http_status(100), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(http_status(101), StatusCode::FORBIDDEN);
    assert_eq!(http_status(5), StatusCode::BAD_REQUEST);
}
