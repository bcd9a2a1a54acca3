//! One audit line, and its two spellings: a JSON object (the file's default, what `sdnctl
//! audit --json` prints and tools ingest) and RFC 5424 syslog text (facility local0, the
//! severity the namespace asked for, `key=value` pairs a human reads).
//!
//! The fields are what an auditor asks "which connection, decided by what": the time, the
//! node, the verdict, what decided (tenancy, a NetworkPolicy and its rule, an egress
//! firewall rule, spoofing), both ends as namespace/pod and address and port, the protocol,
//! the VNIDs, and how many packets the line stands for. A missing part is left out, never
//! made up.

use std::net::IpAddr;

use serde::Serialize;

/// The RFC 5424 facility of audit lines: local0 (as OVN-Kubernetes' ACL logging).
const FACILITY_LOCAL0: u8 = 16;

/// One end of a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct End {
    /// The pod's namespace (or the namespace of its VNID, for a remote end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What the end is when it is not a pod: `node`, `external`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// Its port (TCP, UDP, SCTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl End {
    fn words(&self) -> String {
        let who = match (&self.namespace, &self.pod, &self.host) {
            (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
            (Some(ns), None, _) => format!("{ns}/-"),
            (None, _, Some(h)) => h.clone(),
            _ => "-".into(),
        };
        let addr = match (self.ip, self.port) {
            (Some(IpAddr::V6(a)), Some(p)) => format!("[{a}]:{p}"),
            (Some(a), Some(p)) => format!("{a}:{p}"),
            (Some(a), None) => a.to_string(),
            (None, _) => "-".into(),
        };
        format!("{who} {addr}")
    }
}

/// One line of the audit log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Line {
    /// When (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// The node whose agent wrote it.
    pub node: String,
    /// `decision` (a connection's first packet), `repeats` (more packets of a connection
    /// already logged), `suppressed` (packets the rate limit kept from the agent), `note`.
    pub event: &'static str,
    /// `allow` or `deny`.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub verdict: &'static str,
    /// The syslog severity the namespace asked for.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub severity: &'static str,
    /// `tenancy`, `network-policy`, `egress-firewall`, `spoofing`.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub kind: &'static str,
    /// The namespace whose setting logged it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `ingress` or `egress` (NetworkPolicy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<&'static str>,
    /// The deciding object: `NetworkPolicy prod/allow-web`, `EgressNetworkPolicy
    /// prod/default`, `tenancy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Which of its rules, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The sender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<End>,
    /// The receiver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<End>,
    /// `tcp`, `udp`, `sctp`, `icmp`, `icmpv6`, `arp`...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// ICMP type and code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp: Option<(u16, u16)>,
    /// The sender's VNID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_vnid: Option<u32>,
    /// The receiver's VNID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst_vnid: Option<u32>,
    /// The IP length of the packet logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_len: Option<u16>,
    /// The table of the deciding row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<u8>,
    /// Packets this line stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// Over how long (repeats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The namespaces a suppressed count concerns.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Free text (notes, the reason of a suppressed count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The time now, as lines write it.
pub(crate) fn now() -> String {
    let ts = jiff::Timestamp::now();
    ts.round(jiff::Unit::Millisecond)
        .unwrap_or(ts)
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

impl Line {
    /// A note from the agent itself (logging started, a bad annotation...).
    pub(crate) fn note(node: &str, message: &str) -> Line {
        Line {
            time: now(),
            node: node.to_string(),
            event: "note",
            severity: "notice",
            message: Some(message.to_string()),
            ..Line::default()
        }
    }

    /// The JSON object, on one line.
    pub(crate) fn json(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!("{{\"event\":\"error\",\"message\":{:?}}}", e.to_string()))
    }

    fn severity_code(&self) -> u8 {
        cluster::audit::Severity::parse(self.severity).map_or(5, |s| s.code())
    }

    /// The RFC 5424 line: `<PRI>1 TIME HOST sdn-agent PID audit - MSG`.
    pub(crate) fn rfc5424(&self) -> String {
        let pri = u16::from(FACILITY_LOCAL0) * 8 + u16::from(self.severity_code());
        let mut msg = Vec::new();
        let mut kv = |k: &str, v: String| msg.push(format!("{k}={v}"));
        kv("event", self.event.to_string());
        if !self.verdict.is_empty() {
            kv("verdict", self.verdict.to_string());
        }
        if !self.kind.is_empty() {
            kv("kind", self.kind.to_string());
        }
        if let Some(ns) = &self.namespace {
            kv("namespace", ns.clone());
        }
        if let Some(d) = self.direction {
            kv("direction", d.to_string());
        }
        if let Some(o) = &self.object {
            kv("object", format!("{o:?}"));
        }
        if let Some(r) = &self.rule {
            kv("rule", format!("{r:?}"));
        }
        if let Some(p) = &self.protocol {
            kv("proto", p.clone());
        }
        if let Some(s) = &self.src {
            kv("src", format!("{:?}", s.words()));
        }
        if let Some(d) = &self.dst {
            kv("dst", format!("{:?}", d.words()));
        }
        if let Some((t, c)) = self.icmp {
            kv("icmp", format!("{t}/{c}"));
        }
        if self.src_vnid.is_some() || self.dst_vnid.is_some() {
            let v = |x: Option<u32>| x.map_or("-".to_string(), |v| v.to_string());
            kv(
                "vnids",
                format!("{}->{}", v(self.src_vnid), v(self.dst_vnid)),
            );
        }
        if let Some(n) = self.packets {
            kv("packets", n.to_string());
        }
        if let Some(d) = self.duration_ms {
            kv("duration_ms", d.to_string());
        }
        if !self.namespaces.is_empty() {
            kv("namespaces", self.namespaces.join(","));
        }
        if let Some(m) = &self.message {
            kv("message", format!("{m:?}"));
        }
        format!(
            "<{pri}>1 {} {} sdn-agent {} audit - {}",
            self.time,
            if self.node.is_empty() {
                "-"
            } else {
                &self.node
            },
            std::process::id(),
            msg.join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Line {
        Line {
            time: "2026-11-29T04:00:00.000Z".into(),
            node: "node-a".into(),
            event: "decision",
            verdict: "deny",
            severity: "alert",
            kind: "network-policy",
            namespace: Some("prod".into()),
            direction: Some("ingress"),
            object: Some("NetworkPolicy prod/deny-all".into()),
            rule: Some("default deny".into()),
            src: Some(End {
                namespace: Some("dev".into()),
                pod: Some("client".into()),
                ip: Some("10.128.0.5".parse().unwrap()),
                port: Some(43210),
                host: None,
            }),
            dst: Some(End {
                namespace: Some("prod".into()),
                pod: Some("web".into()),
                ip: Some("10.128.0.6".parse().unwrap()),
                port: Some(80),
                host: None,
            }),
            protocol: Some("tcp".into()),
            src_vnid: Some(11),
            dst_vnid: Some(12),
            packets: Some(1),
            table: Some(80),
            ..Line::default()
        }
    }

    #[test]
    fn json_has_every_field_and_leaves_out_what_is_unknown() {
        let v: serde_json::Value = serde_json::from_str(&sample().json()).unwrap();
        assert_eq!(v["verdict"], "deny");
        assert_eq!(v["src"]["namespace"], "dev");
        assert_eq!(v["src"]["port"], 43210);
        assert_eq!(v["dst"]["pod"], "web");
        assert_eq!(v["dst_vnid"], 12);
        assert_eq!(v["object"], "NetworkPolicy prod/deny-all");
        assert!(v.get("icmp").is_none() && v.get("message").is_none());
        assert!(v["src"].get("host").is_none());
    }

    #[test]
    fn rfc5424_carries_facility_local0_and_the_namespaces_severity() {
        let l = sample().rfc5424();
        assert!(
            l.starts_with("<129>1 2026-11-29T04:00:00.000Z node-a sdn-agent "),
            "{l}"
        );
        assert!(l.contains(" audit - event=decision verdict=deny kind=network-policy namespace=prod direction=ingress"), "{l}");
        assert!(l.contains("src=\"dev/client 10.128.0.5:43210\""), "{l}");
        assert!(l.contains("vnids=11->12"), "{l}");
        let mut n = sample();
        n.severity = "debug";
        assert!(n.rfc5424().starts_with("<135>1 "));
        let t = now();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.ends_with('Z'));
    }
}
