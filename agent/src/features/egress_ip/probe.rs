//! The probes: before holding an address, an RFC 5227 ARP probe or, for IPv6, a duplicate
//! address detection probe (nobody else may answer for it); while using another node's address,
//! a reachability probe of that node.

use std::net::IpAddr;
use std::time::Duration;

/// How many times an answered probe is repeated (a second apart) before the address is refused:
/// when an egress IP moves between nodes, the node it leaves releases it a moment after the
/// node it moves to first probes it.
pub(crate) const PROBE_ROUNDS: u32 = 4;

/// Probes `ip` on `link` before this node takes it (RFC 5227, [`crate::host::netlink::arp_probe`];
/// IPv6: [`crate::host::netlink::nd_probe`]), unless the node already holds it: why it must not be held (another host still answers for
/// it after [`PROBE_ROUNDS`] probes a second apart, or the probe could not run: when in doubt
/// the address is not taken), or `None`.
pub(crate) async fn probe_before_holding(
    link: &crate::host::netlink::EgressLink,
    ip: IpAddr,
    held: bool,
) -> Option<String> {
    if held {
        return None;
    }
    let mut answer = Ok(Ok(None));
    for round in 0..PROBE_ROUNDS {
        if round > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let l = link.clone();
        answer = tokio::task::spawn_blocking(move || match ip {
            IpAddr::V4(ip) => crate::host::netlink::arp_probe(&l, ip),
            IpAddr::V6(ip) => crate::host::netlink::nd_probe(&l, ip),
        })
        .await;
        if !matches!(answer, Ok(Ok(Some(_)))) {
            break;
        }
        tracing::warn!(egress_ip = %ip, round, "another host answers for the egress IP; probing again before refusing it");
    }
    match answer {
        Ok(Ok(None)) => None,
        Ok(Ok(Some(mac))) => Some(format!(
            "another host answers for it on {} (MAC {}; {} probe): it is that host's address",
            link.name,
            mac.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
            if ip.is_ipv6() {
                "duplicate address detection"
            } else {
                "RFC 5227"
            }
        )),
        Ok(Err(e)) => Some(format!(
            "probing whether another host holds it on {} failed: {e}",
            link.name
        )),
        Err(e) => Some(format!("probing whether another host holds it: {e}")),
    }
}

/// How often a watched node is probed, and how long a probe waits.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Probes in a row without an answer before a node counts as offline.
pub(crate) const OFFLINE_AFTER: u32 = 3;
/// The port probed (TCP "discard", as openshift-sdn probed): closed, so an online node refuses.
pub(crate) const PROBE_PORT: u16 = 9;

/// Whether the node whose gateway is `gw` answers a TCP connection to port 9 within
/// [`PROBE_INTERVAL`]: connected or refused is online; no answer, or no route, is not.
pub(crate) async fn probe(gw: std::net::IpAddr) -> bool {
    let connect = tokio::net::TcpStream::connect((gw, PROBE_PORT));
    match tokio::time::timeout(PROBE_INTERVAL, connect).await {
        Err(_) => false,
        Ok(Ok(_)) => true,
        Ok(Err(e)) => !matches!(
            e.raw_os_error(),
            Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH)
        ),
    }
}
