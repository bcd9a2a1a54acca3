//! Unit tests of health, the node view's helpers and the small HTTP server.

use super::health::{liveness_at, LOOP_STALL};
use super::*;
use std::sync::atomic::Ordering;

#[test]
fn checks_render_as_kubernetes_components_do() {
    let good = [Check::new("ovsdb", true, "connected")];
    let a = checks_answer("readyz", &good, false);
    assert_eq!(
        (a.status, a.body.as_str()),
        (StatusCode::OK, "readyz check passed\n")
    );
    let a = checks_answer("readyz", &good, true);
    assert_eq!(a.body, "[+]ovsdb ok: connected\nreadyz check passed\n");
    let bad = [
        Check::new("ovsdb", true, "connected"),
        Check::new("openflow", false, "br0 holds no base flows"),
    ];
    let a = checks_answer("readyz", &bad, false);
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        a.body,
        "[+]ovsdb ok: connected\n[-]openflow failed: br0 holds no base flows\nreadyz check failed\n"
    );
}

#[test]
fn a_stalled_main_loop_is_not_alive() {
    let h = Health::default();
    assert!(liveness(&h)[0].ok, "starting counts as alive");
    h.heartbeat_ms.store(1000, Ordering::SeqCst);
    let stall = LOOP_STALL.as_millis() as u64;
    assert!(liveness_at(&h, 1000 + stall)[0].ok);
    let late = liveness_at(&h, 1001 + stall);
    assert!(!late[0].ok);
    assert!(
        late[0].detail.contains("has not turned for 60 s"),
        "{late:?}"
    );
}

#[tokio::test]
async fn the_endpoint_answers_before_the_node_exists() {
    let o = Observer::default();
    o.health.phase("waiting for this node's HostSubnet");
    let a = o.answer(&Method::GET, "/readyz", "").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        a.body
            .contains("starting: waiting for this node's HostSubnet"),
        "{}",
        a.body
    );
    let a = o.answer(&Method::GET, "/livez", "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let a = o.answer(&Method::GET, "/metrics", "").await;
    assert!(a.body.contains("sdn_ready 0"), "{}", a.body);
    let a = o.answer(&Method::GET, "/nope", "").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = o.answer(&Method::POST, "/metrics", "").await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
}
