//! Host ports on `[::1]`: a small TCP and UDP proxy in the agent, listening on `[::1]:hostPort`
//! and relaying to `[podIPv6]:containerPort`.
//!
//! Why a proxy: IPv4 host ports reach `127.0.0.1` by DNAT because `route_localnet` lets the
//! kernel route a packet from `127.0.0.1` off the node (and `SDN-HP-MASQ` rewrites its source).
//! IPv6 has no such setting: a DNATed packet from `::1` is dropped, whatever is masqueraded
//! after (the CNI `portmap` plugin and Kubernetes' own docs list `[::1]` host ports as not
//! working for that reason). Docker and podman serve it with a proxy process; the agent does
//! the same in-process: one listener per (hostPort, protocol), rebuilt from the registry at every
//! sync, each connection (TCP) or client (UDP) relayed over a socket of its own whose source
//! is the node's (tun0's IPv6 gateway, as the route to the pod says).
//!
//! Limits: SCTP is not relayed (no SCTP sockets in the runtime; its `[::1]` host ports stay
//! unserved, and CHECK says so); connections last beyond the pod's deletion until either end
//! closes, as conntrack entries outlive a DNAT rule; while the agent restarts nothing listens.
//! A UDP client's relay socket goes after [`UDP_IDLE`] without an answer from the pod.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

use super::Protocol;
use crate::lock;

/// How long a UDP client's relay lives without an answer from the pod.
pub const UDP_IDLE: Duration = Duration::from_secs(60);

/// One `[::1]` listener: what it relays to, and its task (or why it has none).
#[derive(Debug)]
struct Listener {
    target: SocketAddrV6,
    serving: Result<JoinHandle<()>, String>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Ok(task) = &self.serving {
            task.abort();
        }
    }
}

impl Listener {
    /// Stops it and waits until its socket is closed (an aborted task drops its future, and
    /// with it the socket, before its handle resolves).
    async fn close(mut self) {
        let serving = std::mem::replace(&mut self.serving, Err(String::new()));
        if let Ok(task) = serving {
            task.abort();
            let _ = task.await;
        }
    }
}

/// How often a bind that found the port taken is tried again within one sync (a UDP
/// listener's client relays, aborted with it, let go of its socket a moment later).
const BIND_TRIES: u32 = 10;

/// The `[::1]` listeners, by (hostPort, protocol).
#[derive(Debug, Default)]
pub struct Loopback6 {
    listeners: std::sync::Mutex<BTreeMap<(u16, Protocol), Listener>>,
}

impl Loopback6 {
    /// Makes the listeners exactly `wanted` ((hostPort, protocol) to the pod's socket): those
    /// no longer wanted, or relaying elsewhere now, close first; new ones bind then, and so
    /// does every one whose bind failed before (a bind that fails, a node process on that port,
    /// is logged and kept as the reason, see [`Loopback6::problem`], and tried again at the
    /// next sync). Callers serialise syncs.
    pub async fn sync(&self, wanted: &BTreeMap<(u16, Protocol), SocketAddrV6>) {
        let stale: Vec<((u16, Protocol), Listener)> = {
            let mut listeners = lock(&self.listeners);
            let gone: Vec<(u16, Protocol)> = listeners
                .iter()
                .filter(|(k, l)| wanted.get(*k) != Some(&l.target) || l.serving.is_err())
                .map(|(k, _)| *k)
                .collect();
            gone.iter()
                .filter_map(|k| Some((*k, listeners.remove(k)?)))
                .collect()
        };
        // The ports this sync closed itself: a bind of one may find it still taken for a moment.
        let mut closed = std::collections::BTreeSet::new();
        for ((port, protocol), l) in stale {
            if l.serving.is_ok() {
                closed.insert((port, protocol));
            }
            l.close().await;
        }
        for (&(port, protocol), &target) in wanted {
            if lock(&self.listeners).contains_key(&(port, protocol)) {
                continue;
            }
            let mut serving = listen(port, protocol, target);
            for _ in 1..BIND_TRIES {
                match &serving {
                    Err(e) if e.contains("in use") && closed.contains(&(port, protocol)) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        serving = listen(port, protocol, target);
                    }
                    _ => break,
                }
            }
            match &serving {
                Ok(_) => {
                    tracing::debug!(port, %protocol, %target, "serving a host port on [::1]");
                }
                Err(e) => {
                    tracing::warn!(port, %protocol, %target, error = %e, "cannot serve a host port on [::1]");
                }
            }
            lock(&self.listeners).insert((port, protocol), Listener { target, serving });
        }
    }

    /// Why `[::1]:port/protocol` is not served as it should be (relaying to `target`), if it
    /// is not.
    pub fn problem(&self, port: u16, protocol: Protocol, target: SocketAddrV6) -> Option<String> {
        let listeners = lock(&self.listeners);
        let what = format!("[::1]:{port}/{protocol}");
        match listeners.get(&(port, protocol)) {
            None => Some(format!("{what} has no listener")),
            Some(l) if l.target != target => Some(format!("{what} relays to {} instead", l.target)),
            Some(Listener {
                serving: Err(e), ..
            }) => Some(format!("{what} is not served: {e}")),
            Some(_) => None,
        }
    }
}

/// Binds `[::1]:port` and starts relaying to `target`.
fn listen(port: u16, protocol: Protocol, target: SocketAddrV6) -> Result<JoinHandle<()>, String> {
    let local = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    match protocol {
        Protocol::Tcp => {
            let std = std::net::TcpListener::bind(local).map_err(|e| format!("bind {local}: {e}"))?;
            std.set_nonblocking(true).map_err(|e| e.to_string())?;
            let listener = TcpListener::from_std(std).map_err(|e| e.to_string())?;
            Ok(tokio::spawn(relay_tcp(listener, target)))
        }
        Protocol::Udp => {
            let std = std::net::UdpSocket::bind(local).map_err(|e| format!("bind {local}: {e}"))?;
            std.set_nonblocking(true).map_err(|e| e.to_string())?;
            let socket = UdpSocket::from_std(std).map_err(|e| e.to_string())?;
            Ok(tokio::spawn(relay_udp(Arc::new(socket), target)))
        }
        Protocol::Sctp => Err("SCTP host ports are not relayed on [::1] (no SCTP sockets in the agent); use the node's IPv6 address".into()),
    }
}

async fn relay_tcp(listener: TcpListener, target: SocketAddrV6) {
    loop {
        let (mut inbound, client) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%target, error = %e, "accepting on a [::1] host port");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            match TcpStream::connect(target).await {
                Ok(mut outbound) => {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(e) => {
                    tracing::debug!(%client, %target, error = %e, "relaying a [::1] host port connection");
                }
            }
        });
    }
}

/// A task that ends with its owner: a UDP listener's client relays hold the listening socket
/// (to answer from it), so they must go when the listener does, or its port stays bound.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn relay_udp(socket: Arc<UdpSocket>, target: SocketAddrV6) {
    let mut clients: HashMap<SocketAddr, (Arc<UdpSocket>, AbortOnDrop)> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, client) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%target, error = %e, "receiving on a [::1] host port");
                continue;
            }
        };
        clients.retain(|_, (_, task)| !task.0.is_finished());
        let upstream = match clients.get(&client) {
            Some((up, _)) => up.clone(),
            None => {
                let up = match udp_upstream(target).await {
                    Ok(up) => Arc::new(up),
                    Err(e) => {
                        tracing::debug!(%client, %target, error = %e, "relaying a [::1] host port datagram");
                        continue;
                    }
                };
                let back = tokio::spawn(udp_replies(up.clone(), socket.clone(), client));
                clients.insert(client, (up.clone(), AbortOnDrop(back)));
                up
            }
        };
        let _ = upstream.send(&buf[..n]).await;
    }
}

async fn udp_upstream(target: SocketAddrV6) -> std::io::Result<UdpSocket> {
    let up = UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).await?;
    up.connect(target).await?;
    Ok(up)
}

/// The pod's answers to `client`, until [`UDP_IDLE`] passes without one.
async fn udp_replies(upstream: Arc<UdpSocket>, listener: Arc<UdpSocket>, client: SocketAddr) {
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(UDP_IDLE, upstream.recv(&mut buf)).await {
        let _ = listener.send_to(&buf[..n], client).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn relays_tcp_and_udp_and_names_what_it_cannot_serve() {
        // A "pod" on [::1] too (the test's own namespace): a TCP echo and a UDP echo.
        let pod_tcp = TcpListener::bind("[::1]:0").await.unwrap();
        let pod_udp = UdpSocket::bind("[::1]:0").await.unwrap();
        let tcp_target = match pod_tcp.local_addr().unwrap() {
            SocketAddr::V6(a) => a,
            SocketAddr::V4(_) => unreachable!(),
        };
        let udp_target = match pod_udp.local_addr().unwrap() {
            SocketAddr::V6(a) => a,
            SocketAddr::V4(_) => unreachable!(),
        };
        tokio::spawn(async move {
            while let Ok((mut s, _)) = pod_tcp.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        tokio::spawn(async move {
            let mut buf = [0u8; 100];
            while let Ok((n, from)) = pod_udp.recv_from(&mut buf).await {
                let _ = pod_udp.send_to(&buf[..n], from).await;
            }
        });
        // Free ports for the host ports.
        let free = |p: Protocol| match p {
            Protocol::Tcp => std::net::TcpListener::bind("[::1]:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
            _ => std::net::UdpSocket::bind("[::1]:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
        };
        let (hp_tcp, hp_udp) = (free(Protocol::Tcp), free(Protocol::Udp));
        let proxy = Loopback6::default();
        let wanted = BTreeMap::from([
            ((hp_tcp, Protocol::Tcp), tcp_target),
            ((hp_udp, Protocol::Udp), udp_target),
            ((hp_tcp, Protocol::Sctp), tcp_target),
        ]);
        proxy.sync(&wanted).await;
        assert_eq!(proxy.problem(hp_tcp, Protocol::Tcp, tcp_target), None);
        assert!(proxy
            .problem(hp_tcp, Protocol::Sctp, tcp_target)
            .unwrap()
            .contains("SCTP"));

        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = TcpStream::connect(("::1", hp_tcp)).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");

        let u = UdpSocket::bind("[::1]:0").await.unwrap();
        u.send_to(b"ping", ("::1", hp_udp)).await.unwrap();
        let mut got = [0u8; 10];
        let (n, from) = tokio::time::timeout(Duration::from_secs(5), u.recv_from(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&got[..n], from.port()), (&b"ping"[..], hp_udp));

        // Taken elsewhere: the reason is kept. Unwanted: closed.
        let squat = std::net::TcpListener::bind("[::1]:0").unwrap();
        let taken = squat.local_addr().unwrap().port();
        proxy
            .sync(&BTreeMap::from([((taken, Protocol::Tcp), tcp_target)]))
            .await;
        let why = proxy.problem(taken, Protocol::Tcp, tcp_target).unwrap();
        assert!(why.contains("bind"), "{why}");
        assert!(proxy
            .problem(hp_tcp, Protocol::Tcp, tcp_target)
            .unwrap()
            .contains("no listener"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(TcpStream::connect(("::1", hp_tcp)).await.is_err());
        // The UDP port is free again at once, though its client's relay was young.
        std::net::UdpSocket::bind(("::1", hp_udp)).expect("the UDP host port released");
        // The squatter leaves: the next sync binds the port it could not before.
        drop(squat);
        proxy
            .sync(&BTreeMap::from([((taken, Protocol::Tcp), tcp_target)]))
            .await;
        assert_eq!(proxy.problem(taken, Protocol::Tcp, tcp_target), None);
    }
}
