//! Service rules shaped like kube-proxy's iptables mode, for the Service tests: `KUBE-SERVICES`
//! (from PREROUTING and OUTPUT) jumps to one `KUBE-SVC-*` chain per service, which picks a
//! `KUBE-SEP-*` endpoint chain with `statistic --mode random` and DNATs to it; traffic from
//! outside the cluster network, hairpin traffic (an endpoint reaching itself) and NodePort
//! traffic (unless the service keeps the client address, `externalTrafficPolicy: Local`) are
//! marked 0x4000 and masqueraded in `KUBE-POSTROUTING`, as kube-proxy does.
//!
//! The rules go into a node's network namespace with `iptables-restore --noflush` (an IPv6
//! service's with `ip6tables-restore`, as kube-proxy's IPv6 proxier writes them: `/128`
//! matches, `[address]:port` DNAT targets); they vanish with the namespace.

use std::fmt::{Display, Write as _};
use std::net::{IpAddr, Ipv4Addr};

use crate::harness::Netns;

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One Service port (IPv4 unless `A` is `Ipv6Addr`).
#[derive(Clone, Debug)]
pub struct Service<A = Ipv4Addr> {
    /// A short name, used in chain names (`KUBE-SVC-<NAME>`).
    pub name: String,
    /// The ClusterIP.
    pub cluster_ip: A,
    /// The service port.
    pub port: u16,
    /// The protocol.
    pub proto: Proto,
    /// Endpoints: pod address and target port.
    pub endpoints: Vec<(A, u16)>,
    /// A NodePort, if any.
    pub node_port: Option<u16>,
    /// `externalTrafficPolicy: Local`: NodePort traffic keeps its client address.
    pub external_local: bool,
}

/// The `iptables-restore --noflush` input (table nat) for `services`, given the cluster network
/// (sources outside it are masqueraded, as kube-proxy's `--cluster-cidr` does).
pub fn rules<A: Copy + Display + Into<IpAddr>>(
    services: &[Service<A>],
    cluster_cidr: &str,
) -> String {
    // A host's prefix, and a DNAT target, in the family of the services.
    let host = |a: A| match a.into() {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    };
    let target = |a: A, port: u16| match a.into() {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    };
    let mut chains = vec![
        "KUBE-SERVICES".to_string(),
        "KUBE-NODEPORTS".to_string(),
        "KUBE-POSTROUTING".to_string(),
        "KUBE-MARK-MASQ".to_string(),
    ];
    let mut body = String::new();
    let _ = writeln!(body, "-A PREROUTING -j KUBE-SERVICES");
    let _ = writeln!(body, "-A OUTPUT -j KUBE-SERVICES");
    let _ = writeln!(body, "-A POSTROUTING -j KUBE-POSTROUTING");
    let _ = writeln!(body, "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000");
    let _ = writeln!(
        body,
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN"
    );
    let _ = writeln!(body, "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000");
    let _ = writeln!(body, "-A KUBE-POSTROUTING -j MASQUERADE");
    for s in services {
        let name = s.name.to_ascii_uppercase();
        let svc = format!("KUBE-SVC-{name}");
        let proto = s.proto.name();
        chains.push(svc.clone());
        let _ = writeln!(
            body,
            "-A KUBE-SERVICES -d {} -p {proto} -m {proto} --dport {} -j {svc}",
            host(s.cluster_ip),
            s.port
        );
        let _ = writeln!(
            body,
            "-A {svc} ! -s {cluster_cidr} -d {} -p {proto} -m {proto} --dport {} -j KUBE-MARK-MASQ",
            host(s.cluster_ip),
            s.port
        );
        let n = s.endpoints.len();
        for (i, (ip, port)) in s.endpoints.iter().enumerate() {
            let sep = format!("KUBE-SEP-{name}{i}");
            chains.push(sep.clone());
            if i + 1 < n {
                let p = 1.0 / (n - i) as f64;
                let _ = writeln!(
                    body,
                    "-A {svc} -m statistic --mode random --probability {p:.5} -j {sep}"
                );
            } else {
                let _ = writeln!(body, "-A {svc} -j {sep}");
            }
            let _ = writeln!(body, "-A {sep} -s {} -j KUBE-MARK-MASQ", host(*ip));
            let _ = writeln!(
                body,
                "-A {sep} -p {proto} -m {proto} -j DNAT --to-destination {}",
                target(*ip, *port)
            );
        }
        if let Some(np) = s.node_port {
            let ext = format!("KUBE-EXT-{name}");
            chains.push(ext.clone());
            let _ = writeln!(
                body,
                "-A KUBE-NODEPORTS -p {proto} -m {proto} --dport {np} -j {ext}"
            );
            if !s.external_local {
                let _ = writeln!(body, "-A {ext} -j KUBE-MARK-MASQ");
            }
            let _ = writeln!(body, "-A {ext} -j {svc}");
        }
    }
    let _ = writeln!(
        body,
        "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
    );
    let mut out = String::from("*nat\n");
    for c in chains {
        let _ = writeln!(out, ":{c} - [0:0]");
    }
    out.push_str(&body);
    out.push_str("COMMIT\n");
    out
}

/// Installs `services` into namespace `netns` (a node's) with `iptables-restore --noflush`.
pub fn install<A: Copy + Display + Into<IpAddr>>(
    netns: &Netns,
    services: &[Service<A>],
    cluster_cidr: &str,
) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let text = rules(services, cluster_cidr);
    let restore = match services.first().map(|s| s.cluster_ip.into()) {
        Some(IpAddr::V6(_)) => "ip6tables-restore",
        _ => "iptables-restore",
    };
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns.name(), restore, "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("iptables-restore: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("iptables-restore stdin: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("iptables-restore: {e}"));
    assert!(
        out.status.success(),
        "iptables-restore failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The IPv6 Service of the dual-stack and IPv6-only tests, `[fd02::10]:80/tcp` with `endpoint`'s
/// `port` as its one endpoint, installed in `node`: `same` (the endpoint's tenant) reaches it
/// within 10 s (the first connection also resolves the gateway, retried as a client would),
/// the endpoint reaches itself through it (hairpin, masqueraded by these rules), and `other`
/// (another tenant), whose gateway answers, does not.
pub fn assert_ipv6_service_within_tenant(
    node: &crate::node::AgentNode,
    [same, endpoint, other]: [&crate::node::CniPod<'_>; 3],
    port: u16,
) {
    use std::time::Duration;
    let ip6 = |p: &crate::node::CniPod<'_>| -> std::net::Ipv6Addr {
        p.ip6
            .as_deref()
            .and_then(|a| a.parse().ok())
            .expect("an IPv6 pod")
    };
    let cluster_ip: std::net::Ipv6Addr = "fd02::10".parse().expect("constant");
    install(
        node.ovs.ns(),
        &[Service {
            name: "web6".into(),
            cluster_ip,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip6(endpoint), port)],
            node_port: None,
            external_local: false,
        }],
        "fd01::/48",
    );
    let via_service = |p: &crate::node::CniPod<'_>| {
        crate::probe::tcp_probe_to(
            p.ns.name(),
            (cluster_ip, 80).into(),
            Duration::from_millis(1500),
        )
    };
    let soon = |p: &crate::node::CniPod<'_>| {
        crate::harness::wait_until(Duration::from_secs(10), || via_service(p))
    };
    assert!(
        soon(same),
        "{} -> [{cluster_ip}]:80\n{}",
        same.id,
        node.flows().join("\n")
    );
    assert!(
        soon(endpoint),
        "{} -> its own Service (hairpin)",
        endpoint.id
    );
    // The other tenant's pod reaches its gateway: refused only by the tenancy check.
    let gateway = other.result["ips"]
        .as_array()
        .and_then(|ips| {
            ips.iter()
                .find_map(|i| i["gateway"].as_str().filter(|g| g.contains(':')))
        })
        .unwrap_or_else(|| panic!("no IPv6 gateway in {}", other.result))
        .to_string();
    assert!(
        other
            .ns
            .exec(&["ping", "-6", "-c", "1", "-W", "2", &gateway])
            .is_ok(),
        "{} cannot reach its gateway {gateway}",
        other.id
    );
    assert!(
        !via_service(other),
        "{} (another tenant) reached the endpoint",
        other.id
    );
}
