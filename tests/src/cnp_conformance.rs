//! The Kubernetes network-policy-api conformance suite for `ClusterNetworkPolicy`
//! (`policy.networking.k8s.io/v1alpha2`), ported as data: every test, every sub-test, every
//! change upstream makes to the objects mid-test and every connectivity expectation, so that a
//! harness here can replay the suite against this project without Go.
//!
//! # Where it comes from
//!
//! [kubernetes-sigs/network-policy-api](https://github.com/kubernetes-sigs/network-policy-api)
//! at commit `0eec1b0e5fa92715b4c0f4c48d3c8d2913ed2159`: the Go tests in
//! `conformance/tests/*.go` (transcribed here; every item cites its Go line in `source`), and the
//! manifests of `conformance/base/`, copied byte for byte to `tests/data/network-policy-api/`
//! (see the README there: provenance, Apache-2.0 licence, and the Go-template fields). The
//! transcription was extracted mechanically from the Go source and cross-checked against a
//! hand-checked reading of it; where upstream's comments disagree with its code (wrong pod,
//! port or rule index), this follows the code, and the per-test comments below say where.
//!
//! # How to run it, as upstream does
//!
//! 1. Once: apply `manifests.yaml` (5 Namespaces, 5 two-replica StatefulSets: pods
//!    `<statefulset>-0` and `-1`) and wait until every pod is ready. Every manifest is a Go
//!    template; render `{{ index .HostNetworkPorts N }}` as [`HOST_NETWORK_PORTS`]`[N]` (or a
//!    custom range, consistently with [`Port::HostNetwork`]).
//! 2. For each [`ConformanceTest`] of [`tests`], in order: skip it unless every one of its
//!    `features` is supported; apply its `manifest` (rendered the same way); then for each
//!    [`Step`] in order apply its `changes` in order and check its `probes`; finally delete the
//!    manifest's objects, so the next test starts from the pristine YAML. Changes accumulate
//!    across the steps of one test (upstream re-reads the live object in every sub-test), so a
//!    step cannot run alone: replay the earlier steps' changes first.
//! 3. A [`Probe`] is upstream's `PokeServer`: from the client pod,
//!    `agnhost connect --timeout=3s --protocol=<tcp|udp|sctp> <server PodIP>:<port>`. The target
//!    is the server pod's primary `status.podIP` (never a Service); for the host-network
//!    `centaur` pods that is their node's address. `allowed: true` means the connection must
//!    succeed; `allowed: false` means it must time out: a refusal or reset fails the expectation,
//!    so "deny" must drop. Upstream retries a probe every 500 ms for up to 10 s until the
//!    expectation holds, then confirms it once more.
//!
//! Labels that policies select on but no manifest sets: `kubernetes.io/metadata.name: <name>` on
//! every Namespace (added by the API server; most policies select namespaces by it) and
//! `kubernetes.io/os: linux` on nodes (set by the kubelet; the `nodes` peers select it).
//!
//! # How to read the data
//!
//! - Names: [`ConformanceTest::name`] is upstream's `ShortName`, [`Step::name`] the `t.Run`
//!   name, namespaces and pods are the full upstream names.
//! - `source` is `"conformance/tests/<file>.go:<line>"`. A [`Change::Swap`] cites the three Go
//!   statements of the swap as `"<file>.go:<first>-<last>"`. A change cites the statement that
//!   edits upstream's copy of the object (e.g. `mutate.Spec.Egress[5] = namedPortRule`), not the
//!   `Patch...` call a line later that sends it.
//! - [`Change`] follows upstream's Go statements one to one: a statement that replaces a whole
//!   rule is one [`Change::Set`] of that rule with its full JSON after the change; one that
//!   changes a single field is a `Set` of that field; each swap is one [`Change::Swap`]
//!   (`CNP*Gress` tests swap the same indices of `egress` and `ingress` in one patch: two
//!   `Swap`s). [`Change::Remove`] is not used by upstream; it is there for completeness.
//! - Placeholders in JSON values: `${ip:NAMESPACE/POD}` is that pod's `status.podIP` and
//!   `${prefix:NAMESPACE/POD}` is 32 when that IP is IPv4, 128 otherwise. Upstream picks the mask
//!   from `luna-lovegood-0`'s address alone and applies it to both addresses of the rule it
//!   inserts, so both CIDRs of that rule use `${prefix:...ravenclaw/luna-lovegood-0}`.
//! - [`Change::NamespaceLabels`] gives the label map upstream sets: it calls `SetLabels` with
//!   exactly that map and merge-patches, which removes every other label; the API server then
//!   puts `kubernetes.io/metadata.name` back, so a port must keep that one.
//! - Split sub-tests: upstream's `CNP{Admin,Baseline}TierEgressInlineCIDRPeers` sub-test 1
//!   probes, relabels the `slytherin` namespace, probes, restores the label, probes. Since a
//!   [`Step`] applies its changes before its probes, that sub-test is three steps with the same
//!   `source` (the `t.Run` line): the `t.Run` name, then the same name suffixed
//!   `" (after relabelling slytherin)"` (the relabel, then its probes), then suffixed
//!   `" (after restoring slytherin's labels)"` (the restoring relabel, then its probes). The
//!   restore belongs to the same upstream sub-test, so slytherin has its labels back before
//!   sub-test 2. No other sub-test probes before a change.
//! - The `NetworkPolicy` that `CNPAdminTierIntegration` sub-test 5 deletes is not restored:
//!   sub-test 6 runs without it.
//!
//! Counts: 24 tests, 92 sub-tests (96 [`Step`]s), 46 changes, 301 probes. Every upstream
//! mutation fits the planned types; no field type had to change.

use std::path::{Path, PathBuf};

use serde_json::Value;
use Proto::{Sctp, Tcp, Udp};

/// One upstream conformance test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceTest {
    /// Upstream ShortName, e.g. "CNPAdminTierEgressTCP".
    pub name: &'static str,
    /// Where upstream defines it: "conformance/tests/<file>.go:<line>".
    pub source: &'static str,
    /// The manifest it applies, relative to tests/data/network-policy-api/ (e.g.
    /// "admin_tier/standard-egress-tcp-rules.yaml").
    pub manifest: &'static str,
    /// Upstream features it needs: "ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts",
    /// "ClusterNetworkPolicyEgressNodePeers". Upstream runs the 18 tests needing only
    /// "ClusterNetworkPolicy" by default and skips the others unless their feature is enabled.
    pub features: &'static [&'static str],
    /// Its sub-tests in order; changes accumulate across them within the test.
    pub steps: Vec<Step>,
}

/// One `t.Run` of a test (or one part of it: see "Split sub-tests" in the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The `t.Run` name.
    pub name: &'static str,
    /// The `t.Run` line.
    pub source: &'static str,
    /// Applied in order before the probes (and kept for the next steps).
    pub changes: Vec<Change>,
    /// Checked in order after the changes.
    pub probes: Vec<Probe>,
}

/// A change upstream makes to the objects mid-test, as upstream's code makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Sets the JSON value at `pointer` (RFC 6901, from the object root, e.g.
    /// "/spec/egress/5/protocols") of ClusterNetworkPolicy `policy`. `value` is JSON text;
    /// `${ip:NAMESPACE/POD}` in it stands for that pod's IPv4 address (or IPv6 when the cluster
    /// is IPv6) and `${prefix:NAMESPACE/POD}` for 32 or 128 accordingly, following upstream's
    /// CIDR computation.
    Set {
        policy: &'static str,
        pointer: &'static str,
        value: &'static str,
        source: &'static str,
    },
    /// Swaps rules `a` and `b` of `dir` ("ingress" or "egress").
    Swap {
        policy: &'static str,
        dir: &'static str,
        a: usize,
        b: usize,
        source: &'static str,
    },
    /// Inserts a rule (JSON text, same substitutions) at index `at` of `dir`.
    Insert {
        policy: &'static str,
        dir: &'static str,
        at: usize,
        rule: &'static str,
        source: &'static str,
    },
    /// Removes rule `at` of `dir`.
    Remove {
        policy: &'static str,
        dir: &'static str,
        at: usize,
        source: &'static str,
    },
    /// Sets a Namespace's labels to exactly these (JSON object text).
    NamespaceLabels {
        namespace: &'static str,
        labels: &'static str,
        source: &'static str,
    },
    /// Deletes a namespaced object of the manifest (e.g. a NetworkPolicy).
    Delete {
        kind: &'static str,
        namespace: &'static str,
        name: &'static str,
        source: &'static str,
    },
}

impl Change {
    /// The Go line(s) upstream makes the change at.
    pub fn source(&self) -> &'static str {
        match *self {
            Change::Set { source, .. }
            | Change::Swap { source, .. }
            | Change::Insert { source, .. }
            | Change::Remove { source, .. }
            | Change::NamespaceLabels { source, .. }
            | Change::Delete { source, .. } => source,
        }
    }
}

/// Which server port a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// A fixed port of the pod-network servers (80, 8080, 53, 5353, 9003, 9005).
    Number(u16),
    /// `s.HostNetworkPorts[i]` (the host-network `centaur` pods' ports); with upstream's
    /// defaults, [`HOST_NETWORK_PORTS`]`[i]`.
    HostNetwork(usize),
}

/// The transport a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    /// Upstream's name for it, as passed to `agnhost connect --protocol=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// One `PokeServer`: the client pod connects to the server pod's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// (namespace, pod) — full upstream namespace names, e.g.
    /// ("network-policy-conformance-gryffindor", "harry-potter-0").
    pub client: (&'static str, &'static str),
    /// (namespace, pod) whose `status.podIP` the client connects to.
    pub server: (&'static str, &'static str),
    pub proto: Proto,
    pub port: Port,
    /// true: the connection must succeed; false: it must time out (dropped, not refused).
    pub allowed: bool,
    pub source: &'static str,
}

/// The default host-network ports upstream uses (the template's values), in order:
/// `HostNetworkPortRangeStart` 34345 to start + 7 (`conformance/utils/suite/suite.go`).
pub const HOST_NETWORK_PORTS: [u16; 8] = [34345, 34346, 34347, 34348, 34349, 34350, 34351, 34352];

const GRYFFINDOR: &str = "network-policy-conformance-gryffindor";
const SLYTHERIN: &str = "network-policy-conformance-slytherin";
const HUFFLEPUFF: &str = "network-policy-conformance-hufflepuff";
const RAVENCLAW: &str = "network-policy-conformance-ravenclaw";
const FORBIDDEN_FORREST: &str = "network-policy-conformance-forbidden-forrest";

const ALLOW: bool = true;
const DENY: bool = false;

fn probe(
    client: (&'static str, &'static str),
    server: (&'static str, &'static str),
    proto: Proto,
    port: Port,
    allowed: bool,
    source: &'static str,
) -> Probe {
    Probe {
        client,
        server,
        proto,
        port,
        allowed,
        source,
    }
}

/// Every test, in upstream's registration order (`tests.ConformanceTests`: Go `init` order,
/// i.e. the test files in lexical order, each file's `append` list in order).
pub fn tests() -> Vec<ConformanceTest> {
    vec![
        cnp_admin_tier_egress_named_port(),
        cnp_admin_tier_egress_node_peers(),
        cnp_admin_tier_egress_inline_cidr_peers(),
        cnp_admin_tier_egress_sctp(),
        cnp_admin_tier_egress_tcp(),
        cnp_admin_tier_egress_udp(),
        cnp_admin_tier_gress(),
        cnp_admin_tier_ingress_sctp(),
        cnp_admin_tier_ingress_tcp(),
        cnp_admin_tier_ingress_udp(),
        cnp_admin_tier_ingress_named_port(),
        cnp_admin_tier_integration(),
        cnp_admin_tier_priority_field(),
        cnp_baseline_tier_egress_named_port(),
        cnp_baseline_tier_egress_node_peers(),
        cnp_baseline_tier_ingress_named_port(),
        cnp_baseline_tier_egress_inline_cidr_peers(),
        cnp_baseline_tier_egress_sctp(),
        cnp_baseline_tier_egress_tcp(),
        cnp_baseline_tier_egress_udp(),
        cnp_baseline_tier_gress(),
        cnp_baseline_tier_ingress_sctp(),
        cnp_baseline_tier_ingress_tcp(),
        cnp_baseline_tier_ingress_udp(),
    ]
}

/// `CNPAdminTierEgressNamedPort`, conformance/tests/admin-network-policy-experimental-egress-rules.go:35.
#[rustfmt::skip]
fn cnp_admin_tier_egress_named_port() -> ConformanceTest {
    // The named port `web` is TCP 80 on the destination pods (base manifests.yaml); tcp/8080 to
    // hufflepuff then falls to egress[6] `deny-to-hufflepuff-everything-else`.
    ConformanceTest {
        name: "CNPAdminTierEgressNamedPort",
        source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:35",
        manifest: "admin_tier/standard-egress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for named port",
                source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:44",
                changes: vec![
                    Change::Set { policy: "egress-tcp", pointer: "/spec/egress/5", value: r#"{"name":"allow-to-hufflepuff-at-port-8080","action":"Accept","to":[{"namespaces":{"matchLabels":{"kubernetes.io/metadata.name":"network-policy-conformance-hufflepuff"}}}],"protocols":[{"destinationNamedPort":"web"}]}"#, source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:58" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-experimental-egress-rules.go:63"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-experimental-egress-rules.go:67"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierEgressNodePeers`, conformance/tests/admin-network-policy-experimental-egress-rules.go:74.
#[rustfmt::skip]
fn cnp_admin_tier_egress_node_peers() -> ConformanceTest {
    // The server is the host-network pod `centaur-1`: its PodIP is its node's address. The
    // comment at L97 says "Pass rule at index2"; the Pass rule is egress[1]. The `pass` probe
    // expects success because nothing below the Admin tier decides (default allow).
    ConformanceTest {
        name: "CNPAdminTierEgressNodePeers",
        source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:74",
        manifest: "admin_tier/experimental-egress-selector-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyEgressNodePeers"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' rule policy for egress-node-peer",
                source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:85",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Tcp, Port::HostNetwork(0), ALLOW, "conformance/tests/admin-network-policy-experimental-egress-rules.go:89"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' rule policy for egress-node-peer",
                source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:92",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Udp, Port::HostNetwork(2), ALLOW, "conformance/tests/admin-network-policy-experimental-egress-rules.go:96"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-node-peer",
                source: "conformance/tests/admin-network-policy-experimental-egress-rules.go:99",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Tcp, Port::HostNetwork(1), DENY, "conformance/tests/admin-network-policy-experimental-egress-rules.go:102"),
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Udp, Port::HostNetwork(4), DENY, "conformance/tests/admin-network-policy-experimental-egress-rules.go:104"),
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Sctp, Port::HostNetwork(6), DENY, "conformance/tests/admin-network-policy-experimental-egress-rules.go:106"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierEgressInlineCIDRPeers`, conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:36.
#[rustfmt::skip]
fn cnp_admin_tier_egress_inline_cidr_peers() -> ConformanceTest {
    // Comments at L77/L91 say "ingressRule at index0"; it is egress[0]. Comments at L140/L160
    // say harry-potter-0 is the client; the code uses harry-potter-1. Sub-test 1 is split in three
    // steps around its two namespace relabels (see the module doc).
    ConformanceTest {
        name: "CNPAdminTierEgressInlineCIDRPeers",
        source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:36",
        manifest: "admin_tier/standard-egress-inline-cidr-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer",
                source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:44",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:50"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:52"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:54"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:60"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:62"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:64"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:70"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:72"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:74"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer (after relabelling slytherin)",
                source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:44",
                changes: vec![
                    Change::NamespaceLabels { namespace: SLYTHERIN, labels: r#"{"conformance-house":"denied-namespace-label"}"#, source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:80" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:84"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:86"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:88"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer (after restoring slytherin's labels)",
                source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:44",
                changes: vec![
                    Change::NamespaceLabels { namespace: SLYTHERIN, labels: r#"{"conformance-house":"slytherin"}"#, source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:94" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:98"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:100"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:102"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' rule policy for egress-cidr-peer",
                source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:112",
                changes: vec![
                    Change::Insert { policy: "inline-cidr-as-peers-example", dir: "egress", at: 0, rule: r#"{"name":"allow-egress-to-specific-podIPs","action":"Accept","to":[{"networks":["${ip:network-policy-conformance-ravenclaw/luna-lovegood-0}/${prefix:network-policy-conformance-ravenclaw/luna-lovegood-0}","${ip:network-policy-conformance-hufflepuff/cedric-diggory-0}/${prefix:network-policy-conformance-ravenclaw/luna-lovegood-0}"]}]}"#, source: "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:138" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:143"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:145"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:147"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:149"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:151"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:153"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:163"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:165"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:167"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:169"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:171"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go:173"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierEgressSCTP`, conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_egress_sctp() -> ConformanceTest {
    // Comments at L71/L106 say harry-potter-0 is the server; the code fetches harry-potter-1.
    ConformanceTest {
        name: "CNPAdminTierEgressSCTP",
        source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:33",
        manifest: "admin_tier/standard-egress-sctp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:48"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:51"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:55",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:61"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:65"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:69",
                changes: vec![
                    Change::Swap { policy: "egress-sctp", dir: "egress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:76-78" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:83"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:86"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:90",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:96"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:100"),
                ],
            },
            Step {
                name: "Should support an 'pass-egress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:104",
                changes: vec![
                    Change::Swap { policy: "egress-sctp", dir: "egress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:111-113" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:118"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:121"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:125",
                changes: vec![
                    Change::Swap { policy: "egress-sctp", dir: "egress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:132-134" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:138"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-egress-sctp-rules.go:142"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierEgressTCP`, conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_egress_tcp() -> ConformanceTest {
    // Comments at L114/L119 call harry-potter-0/1 "server pod"; they are the clients.
    ConformanceTest {
        name: "CNPAdminTierEgressTCP",
        source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:33",
        manifest: "admin_tier/standard-egress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:48"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:60"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "egress-tcp", dir: "egress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:82"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:95"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:99"),
                ],
            },
            Step {
                name: "Should support an 'pass-egress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:103",
                changes: vec![
                    Change::Swap { policy: "egress-tcp", dir: "egress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:110-112" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:117"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:120"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:124",
                changes: vec![
                    Change::Swap { policy: "egress-tcp", dir: "egress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:131-133" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:137"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-egress-tcp-rules.go:141"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierEgressUDP`, conformance/tests/admin-network-policy-standard-egress-udp-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_egress_udp() -> ConformanceTest {
    // The comment at L95 says port 80 and the one at L98 cedric-diggory-0; the code probes
    // udp/5353 from cedric-diggory-0 and udp/53 from cedric-diggory-1.
    ConformanceTest {
        name: "CNPAdminTierEgressUDP",
        source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:33",
        manifest: "admin_tier/standard-egress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:48"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:51"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:55",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:61"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:65"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:69",
                changes: vec![
                    Change::Swap { policy: "egress-udp", dir: "egress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:76-78" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:83"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:86"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:90",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:96"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:100"),
                ],
            },
            Step {
                name: "Should support an 'pass-egress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:104",
                changes: vec![
                    Change::Swap { policy: "egress-udp", dir: "egress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:111-113" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:118"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:121"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:125",
                changes: vec![
                    Change::Swap { policy: "egress-udp", dir: "egress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:132-134" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:138"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-egress-udp-rules.go:142"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierGress`, conformance/tests/admin-network-policy-standard-gress-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_gress() -> ConformanceTest {
    // Sub-test 5 probes egress udp/5353 (L255), not udp/53 as the other sub-tests do.
    ConformanceTest {
        name: "CNPAdminTierGress",
        source: "conformance/tests/admin-network-policy-standard-gress-rules.go:33",
        manifest: "admin_tier/standard-gress-rules-combined.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-gress' policy across different protocols",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:50"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:52"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:54"),
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:63"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:65"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:67"),
                ],
            },
            Step {
                name: "Should support an 'allow-gress' policy across different protocols at the specified ports",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:71",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:79"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:83"),
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:87"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:91"),
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:95"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:99"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:107"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:111"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:115"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:119"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:123"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:127"),
                ],
            },
            Step {
                name: "Should support an 'deny-gress' policy across different protocols",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:131",
                changes: vec![
                    Change::Swap { policy: "gress-rules", dir: "egress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:140-142" },
                    Change::Swap { policy: "gress-rules", dir: "ingress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:143-145" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:150"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:152"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:154"),
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:163"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:165"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:167"),
                ],
            },
            Step {
                name: "Should support a 'deny-gress' policy across different protocols at the specified ports",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:171",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:179"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:183"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:187"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:191"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:195"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:199"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:207"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:211"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:215"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:219"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-gress-rules.go:223"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:227"),
                ],
            },
            Step {
                name: "Should support an 'pass-gress' policy across different protocols",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:231",
                changes: vec![
                    Change::Swap { policy: "gress-rules", dir: "egress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:240-242" },
                    Change::Swap { policy: "gress-rules", dir: "ingress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:243-245" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:250"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:255"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:260"),
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:269"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:272"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:275"),
                ],
            },
            Step {
                name: "Should support a 'pass-gress' policy across different protocols at the specified ports",
                source: "conformance/tests/admin-network-policy-standard-gress-rules.go:279",
                changes: vec![
                    Change::Swap { policy: "gress-rules", dir: "egress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:288-290" },
                    Change::Swap { policy: "gress-rules", dir: "ingress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-gress-rules.go:291-293" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:297"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:301"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:305"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:309"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:313"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:317"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:325"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:329"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:333"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:337"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:341"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-gress-rules.go:345"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierIngressSCTP`, conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_ingress_sctp() -> ConformanceTest {
    ConformanceTest {
        name: "CNPAdminTierIngressSCTP",
        source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:33",
        manifest: "admin_tier/standard-ingress-sctp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:48"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:60"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "ingress-sctp", dir: "ingress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:82"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:95"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:99"),
                ],
            },
            Step {
                name: "Should support an 'pass-ingress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:103",
                changes: vec![
                    Change::Swap { policy: "ingress-sctp", dir: "ingress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:110-112" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:117"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:120"),
                ],
            },
            Step {
                name: "Should support a 'pass-ingress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:124",
                changes: vec![
                    Change::Swap { policy: "ingress-sctp", dir: "ingress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:131-133" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:137"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go:141"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierIngressTCP`, conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_ingress_tcp() -> ConformanceTest {
    // The comment at L136 says port 9003; the code probes tcp/80.
    ConformanceTest {
        name: "CNPAdminTierIngressTCP",
        source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:33",
        manifest: "admin_tier/standard-ingress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:48"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:60"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "ingress-tcp", dir: "ingress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:82"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:95"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:99"),
                ],
            },
            Step {
                name: "Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:103",
                changes: vec![
                    Change::Swap { policy: "ingress-tcp", dir: "ingress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:110-112" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:117"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:120"),
                ],
            },
            Step {
                name: "Should support a 'pass-ingress' policy for TCP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:124",
                changes: vec![
                    Change::Swap { policy: "ingress-tcp", dir: "ingress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:131-133" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:137"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go:141"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierIngressUDP`, conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:34.
#[rustfmt::skip]
fn cnp_admin_tier_ingress_udp() -> ConformanceTest {
    // The comment at L95 says port 80; the code probes udp/5353.
    ConformanceTest {
        name: "CNPAdminTierIngressUDP",
        source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:34",
        manifest: "admin_tier/standard-ingress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:42",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:49"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:51"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:55",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:61"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:65"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:69",
                changes: vec![
                    Change::Swap { policy: "ingress-udp", dir: "ingress", a: 0, b: 1, source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:76-78" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:83"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:86"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:90",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:96"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:100"),
                ],
            },
            Step {
                name: "Should support an 'pass-ingress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:104",
                changes: vec![
                    Change::Swap { policy: "ingress-udp", dir: "ingress", a: 0, b: 2, source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:111-113" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:118"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:121"),
                ],
            },
            Step {
                name: "Should support a 'pass-ingress' policy for UDP protocol at the specified port",
                source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:125",
                changes: vec![
                    Change::Swap { policy: "ingress-udp", dir: "ingress", a: 3, b: 4, source: "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:132-134" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:138"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-standard-ingress-udp-rules.go:142"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierIngressNamedPort`, conformance/tests/admin-network-policy-experimental-ingress-rules.go:28.
#[rustfmt::skip]
fn cnp_admin_tier_ingress_named_port() -> ConformanceTest {
    // Defined in admin-network-policy-experimental-ingress-rules.go (which has no `init`);
    // registered right after CNPAdminTierIngressUDP by admin-network-policy-standard-ingress-udp-rules.go:29.
    // The named port `dns` is UDP 53 on the destination pods; udp/5353 falls to ingress[6].
    ConformanceTest {
        name: "CNPAdminTierIngressNamedPort",
        source: "conformance/tests/admin-network-policy-experimental-ingress-rules.go:28",
        manifest: "admin_tier/standard-ingress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for named port",
                source: "conformance/tests/admin-network-policy-experimental-ingress-rules.go:37",
                changes: vec![
                    Change::Set { policy: "ingress-udp", pointer: "/spec/ingress/5", value: r#"{"name":"allow-from-gryffindor-at-port-53","action":"Accept","from":[{"namespaces":{"matchLabels":{"kubernetes.io/metadata.name":"network-policy-conformance-gryffindor"}}}],"protocols":[{"destinationNamedPort":"dns"}]}"#, source: "conformance/tests/admin-network-policy-experimental-ingress-rules.go:51" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/admin-network-policy-experimental-ingress-rules.go:56"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), DENY, "conformance/tests/admin-network-policy-experimental-ingress-rules.go:60"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierIntegration`, conformance/tests/admin-network-policy-standard-integration.go:39.
#[rustfmt::skip]
fn cnp_admin_tier_integration() -> ConformanceTest {
    // Sub-tests 5 and 6 call the fetched pod `clientPod`, but it is the probe's server. The
    // NetworkPolicy deleted in sub-test 5 stays deleted in sub-test 6, and both `pass-example`
    // rules are `Pass` by then, so the Baseline `default` Deny decides.
    ConformanceTest {
        name: "CNPAdminTierIntegration",
        source: "conformance/tests/admin-network-policy-standard-integration.go:39",
        manifest: "api_integration/standard-anp-np-banp.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should Deny traffic from slytherin to gryffindor respecting admin CNP",
                source: "conformance/tests/admin-network-policy-standard-integration.go:47",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-integration.go:54"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-integration.go:57"),
                ],
            },
            Step {
                name: "Should Deny traffic to slytherin from gryffindor respecting admin CNP",
                source: "conformance/tests/admin-network-policy-standard-integration.go:61",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-integration.go:68"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-integration.go:71"),
                ],
            },
            Step {
                name: "Should support a 'pass-ingress' policy for admin CNP and respect the match for network policy",
                source: "conformance/tests/admin-network-policy-standard-integration.go:75",
                changes: vec![
                    Change::Set { policy: "pass-example", pointer: "/spec/ingress/0/action", value: r#""Pass""#, source: "conformance/tests/admin-network-policy-standard-integration.go:81" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-integration.go:88"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-integration.go:91"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' policy for admin CNP and respect the match for network policy",
                source: "conformance/tests/admin-network-policy-standard-integration.go:95",
                changes: vec![
                    Change::Set { policy: "pass-example", pointer: "/spec/egress/0/action", value: r#""Pass""#, source: "conformance/tests/admin-network-policy-standard-integration.go:101" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-integration.go:108"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-integration.go:111"),
                ],
            },
            Step {
                name: "Should support a 'pass-ingress' policy for admin CNP and respect the match for baseline cluster network policy",
                source: "conformance/tests/admin-network-policy-standard-integration.go:115",
                changes: vec![
                    Change::Delete { kind: "NetworkPolicy", namespace: GRYFFINDOR, name: "allow-gress-from-to-slytherin-to-gryffindor", source: "conformance/tests/admin-network-policy-standard-integration.go:126" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-integration.go:133"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-integration.go:136"),
                ],
            },
            Step {
                name: "Should support a 'pass-egress' policy for admin CNP and respect the match for baseline cluster network policy",
                source: "conformance/tests/admin-network-policy-standard-integration.go:140",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-integration.go:147"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-integration.go:150"),
                ],
            },
        ],
    }
}

/// `CNPAdminTierPriorityField`, conformance/tests/admin-network-policy-standard-priority.go:33.
#[rustfmt::skip]
fn cnp_admin_tier_priority_field() -> ConformanceTest {
    ConformanceTest {
        name: "CNPAdminTierPriorityField",
        source: "conformance/tests/admin-network-policy-standard-priority.go:33",
        manifest: "admin_tier/standard-priority-field.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should Deny traffic from slytherin to gryffindor respecting admin CNP",
                source: "conformance/tests/admin-network-policy-standard-priority.go:41",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-priority.go:48"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-priority.go:51"),
                ],
            },
            Step {
                name: "Should Deny traffic to slytherin from gryffindor respecting admin CNP",
                source: "conformance/tests/admin-network-policy-standard-priority.go:55",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/admin-network-policy-standard-priority.go:62"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), DENY, "conformance/tests/admin-network-policy-standard-priority.go:65"),
                ],
            },
            Step {
                name: "Should respect admin CNP priority field; thus passing both ingress and egress traffic over to baseline CNP",
                source: "conformance/tests/admin-network-policy-standard-priority.go:69",
                changes: vec![
                    Change::Set { policy: "old-priority-60-new-priority-40-example", pointer: "/spec/priority", value: "40", source: "conformance/tests/admin-network-policy-standard-priority.go:74" },
                ],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-priority.go:81"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-priority.go:84"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/admin-network-policy-standard-priority.go:92"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/admin-network-policy-standard-priority.go:95"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressNamedPort`, conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:35.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_named_port() -> ConformanceTest {
    // The named port `dns` is UDP 53 on the destination pods; udp/5353 to gryffindor falls to
    // egress[4] `deny-to-gryffindor-everything-else`.
    ConformanceTest {
        name: "CNPBaselineTierEgressNamedPort",
        source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:35",
        manifest: "baseline_tier/standard-egress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for named port",
                source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:44",
                changes: vec![
                    Change::Set { policy: "default", pointer: "/spec/egress/3", value: r#"{"name":"allow-to-gryffindor-at-port-53","action":"Accept","to":[{"namespaces":{"matchLabels":{"kubernetes.io/metadata.name":"network-policy-conformance-gryffindor"}}}],"protocols":[{"destinationNamedPort":"dns"}]}"#, source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:58" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:63"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:67"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressNodePeers`, conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:74.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_node_peers() -> ConformanceTest {
    // egress[0] allows a tcp port RANGE HostNetworkPorts[0]..=HostNetworkPorts[1] (the end is
    // inclusive: probe 2 of sub-test 1 targets it). The comment at L91 ("Pass rule at index2") is
    // wrong: this policy has no Pass rule.
    ConformanceTest {
        name: "CNPBaselineTierEgressNodePeers",
        source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:74",
        manifest: "baseline_tier/experimental-egress-selector-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyEgressNodePeers"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' rule policy for egress-node-peer",
                source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:84",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (FORBIDDEN_FORREST, "centaur-1"), Tcp, Port::HostNetwork(0), ALLOW, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:88"),
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Tcp, Port::HostNetwork(1), ALLOW, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:90"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-node-peer",
                source: "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:94",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Udp, Port::HostNetwork(4), DENY, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:97"),
                    probe((GRYFFINDOR, "harry-potter-1"), (FORBIDDEN_FORREST, "centaur-1"), Sctp, Port::HostNetwork(6), DENY, "conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go:99"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierIngressNamedPort`, conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:34.
#[rustfmt::skip]
fn cnp_baseline_tier_ingress_named_port() -> ConformanceTest {
    // The named port `web` is TCP 80 on the destination pods; tcp/8080 from hufflepuff falls to
    // ingress[4] `deny-from-hufflepuff-everything-else`.
    ConformanceTest {
        name: "CNPBaselineTierIngressNamedPort",
        source: "conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:34",
        manifest: "baseline_tier/standard-ingress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for named port",
                source: "conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:43",
                changes: vec![
                    Change::Set { policy: "default", pointer: "/spec/ingress/3", value: r#"{"name":"allow-from-hufflepuff-at-port-80","action":"Accept","from":[{"namespaces":{"matchLabels":{"kubernetes.io/metadata.name":"network-policy-conformance-hufflepuff"}}}],"protocols":[{"destinationNamedPort":"web"}]}"#, source: "conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:57" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:62"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go:66"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressInlineCIDRPeers`, conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:36.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_inline_cidr_peers() -> ConformanceTest {
    // Same shape and expectations as CNPAdminTierEgressInlineCIDRPeers, on the Baseline CNP
    // `default`. Sub-test 1 is split in three steps around its two namespace relabels.
    ConformanceTest {
        name: "CNPBaselineTierEgressInlineCIDRPeers",
        source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:36",
        manifest: "baseline_tier/standard-egress-inline-cidr-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:43",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:49"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:51"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:53"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:59"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:61"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:63"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:69"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:71"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:73"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer (after relabelling slytherin)",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:43",
                changes: vec![
                    Change::NamespaceLabels { namespace: SLYTHERIN, labels: r#"{"conformance-house":"denied-namespace-label"}"#, source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:79" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:83"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:85"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:87"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' rule policy for egress-cidr-peer (after restoring slytherin's labels)",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:43",
                changes: vec![
                    Change::NamespaceLabels { namespace: SLYTHERIN, labels: r#"{"conformance-house":"slytherin"}"#, source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:93" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:97"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:99"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:101"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' rule policy for egress-cidr-peer",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:111",
                changes: vec![
                    Change::Insert { policy: "default", dir: "egress", at: 0, rule: r#"{"name":"allow-egress-to-specific-podIPs","action":"Accept","to":[{"networks":["${ip:network-policy-conformance-ravenclaw/luna-lovegood-0}/${prefix:network-policy-conformance-ravenclaw/luna-lovegood-0}","${ip:network-policy-conformance-hufflepuff/cedric-diggory-0}/${prefix:network-policy-conformance-ravenclaw/luna-lovegood-0}"]}]}"#, source: "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:138" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:144"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:146"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:148"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:150"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:152"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:154"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:164"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:166"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:168"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:170"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:172"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go:174"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressSCTP`, conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_sctp() -> ConformanceTest {
    // The comment at L71 says harry-potter-0 is the server; the code fetches harry-potter-1.
    ConformanceTest {
        name: "CNPBaselineTierEgressSCTP",
        source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:33",
        manifest: "baseline_tier/standard-egress-sctp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:48"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:51"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:55",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:61"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:65"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:69",
                changes: vec![
                    Change::Swap { policy: "default", dir: "egress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:76-78" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:83"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:86"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:90",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:96"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go:100"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressTCP`, conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_tcp() -> ConformanceTest {
    // The comment at L59 says port 80 (and index5/index6); the code probes tcp/8080, allowed by
    // egress[3], and tcp/80, denied by egress[4].
    ConformanceTest {
        name: "CNPBaselineTierEgressTCP",
        source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:33",
        manifest: "baseline_tier/standard-egress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:48"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for TCP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:60"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "default", dir: "egress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:82"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for TCP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:95"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go:99"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierEgressUDP`, conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_egress_udp() -> ConformanceTest {
    ConformanceTest {
        name: "CNPBaselineTierEgressUDP",
        source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:33",
        manifest: "baseline_tier/standard-egress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:48"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:51"),
                ],
            },
            Step {
                name: "Should support an 'allow-egress' policy for UDP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:55",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:61"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:65"),
                ],
            },
            Step {
                name: "Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:69",
                changes: vec![
                    Change::Swap { policy: "default", dir: "egress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:76-78" },
                ],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:83"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:86"),
                ],
            },
            Step {
                name: "Should support a 'deny-egress' policy for UDP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:90",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:96"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go:100"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierGress`, conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_gress() -> ConformanceTest {
    // egress[3] is named `allow-to-hufflepuff-at-ports-8080-5353` but also allows sctp/9003.
    ConformanceTest {
        name: "CNPBaselineTierGress",
        source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:33",
        manifest: "baseline_tier/standard-gress-rules-combined.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-gress' policy across different protocols",
                source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:50"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:52"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:54"),
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:63"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:65"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:67"),
                ],
            },
            Step {
                name: "Should support an 'allow-gress' policy across different protocols at the specified ports",
                source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:71",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:79"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:83"),
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:87"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:91"),
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:95"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:99"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:107"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:111"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:115"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:119"),
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:123"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:127"),
                ],
            },
            Step {
                name: "Should support an 'deny-gress' policy across different protocols",
                source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:131",
                changes: vec![
                    Change::Swap { policy: "default", dir: "egress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:140-142" },
                    Change::Swap { policy: "default", dir: "ingress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:143-145" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:150"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:152"),
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:154"),
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:163"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:165"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:167"),
                ],
            },
            Step {
                name: "Should support a 'deny-gress' policy across different protocols at the specified ports",
                source: "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:171",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:179"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:183"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:187"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:191"),
                    probe((GRYFFINDOR, "harry-potter-0"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:195"),
                    probe((GRYFFINDOR, "harry-potter-1"), (SLYTHERIN, "draco-malfoy-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:199"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:207"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:211"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:215"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:219"),
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:223"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-gress-rules.go:227"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierIngressSCTP`, conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_ingress_sctp() -> ConformanceTest {
    ConformanceTest {
        name: "CNPBaselineTierIngressSCTP",
        source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:33",
        manifest: "baseline_tier/standard-ingress-sctp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:48"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:60"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "default", dir: "ingress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:82"),
                    probe((GRYFFINDOR, "harry-potter-1"), (RAVENCLAW, "luna-lovegood-1"), Sctp, Port::Number(9005), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for SCTP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9003), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:95"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (RAVENCLAW, "luna-lovegood-0"), Sctp, Port::Number(9005), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go:99"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierIngressTCP`, conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_ingress_tcp() -> ConformanceTest {
    ConformanceTest {
        name: "CNPBaselineTierIngressTCP",
        source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:33",
        manifest: "baseline_tier/standard-ingress-tcp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:48"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for TCP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((HUFFLEPUFF, "cedric-diggory-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:60"),
                    probe((HUFFLEPUFF, "cedric-diggory-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "default", dir: "ingress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:82"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (GRYFFINDOR, "harry-potter-1"), Tcp, Port::Number(8080), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for TCP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(80), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:95"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (GRYFFINDOR, "harry-potter-0"), Tcp, Port::Number(8080), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go:99"),
                ],
            },
        ],
    }
}

/// `CNPBaselineTierIngressUDP`, conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:33.
#[rustfmt::skip]
fn cnp_baseline_tier_ingress_udp() -> ConformanceTest {
    ConformanceTest {
        name: "CNPBaselineTierIngressUDP",
        source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:33",
        manifest: "baseline_tier/standard-ingress-udp-rules.yaml",
        features: &["ClusterNetworkPolicy"],
        steps: vec![
            Step {
                name: "Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:41",
                changes: vec![],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:48"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(5353), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:50"),
                ],
            },
            Step {
                name: "Should support an 'allow-ingress' policy for UDP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:54",
                changes: vec![],
                probes: vec![
                    probe((GRYFFINDOR, "harry-potter-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:60"),
                    probe((GRYFFINDOR, "harry-potter-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:64"),
                ],
            },
            Step {
                name: "Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:68",
                changes: vec![
                    Change::Swap { policy: "default", dir: "ingress", a: 0, b: 1, source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:75-77" },
                ],
                probes: vec![
                    probe((RAVENCLAW, "luna-lovegood-0"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(53), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:82"),
                    probe((RAVENCLAW, "luna-lovegood-1"), (HUFFLEPUFF, "cedric-diggory-1"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:85"),
                ],
            },
            Step {
                name: "Should support a 'deny-ingress' policy for UDP protocol at the specified port",
                source: "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:89",
                changes: vec![],
                probes: vec![
                    probe((SLYTHERIN, "draco-malfoy-0"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(5353), DENY, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:95"),
                    probe((SLYTHERIN, "draco-malfoy-1"), (HUFFLEPUFF, "cedric-diggory-0"), Udp, Port::Number(53), ALLOW, "conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go:99"),
                ],
            },
        ],
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the data: the manifests rendered and parsed, what a fixture container serves, the
// placeholders of changes.

/// Where the copied manifests are (`tests/data/network-policy-api`).
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/network-policy-api")
}

/// Renders upstream's Go template with the default ports; `{{ index .HostNetworkPorts N }}` is
/// the only action the files use.
pub fn render(text: &str) -> String {
    render_with(text, &HOST_NETWORK_PORTS)
}

/// [`render`] with another `HostNetworkPorts` range (upstream's suite takes one as an option:
/// its defaults lie in Linux's ephemeral port range, where a node's own connections may hold
/// one).
pub fn render_with(text: &str, ports: &[u16; 8]) -> String {
    let mut out = text.to_owned();
    for (i, port) in ports.iter().enumerate() {
        out = out.replace(
            &format!("{{{{ index .HostNetworkPorts {i} }}}}"),
            &port.to_string(),
        );
    }
    assert!(
        !out.contains("{{"),
        "a template action other than `index .HostNetworkPorts N`"
    );
    out
}

/// The objects of a manifest (path relative to the data directory), rendered.
pub fn objects(manifest: &str) -> Vec<Value> {
    objects_with(manifest, &HOST_NETWORK_PORTS)
}

/// [`objects`] rendered with another `HostNetworkPorts` range ([`render_with`]).
pub fn objects_with(manifest: &str, ports: &[u16; 8]) -> Vec<Value> {
    let path = data_dir().join(manifest);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&render_with(&text, ports))
        .unwrap_or_else(|e| panic!("{manifest}: {e}"))
}

/// What one agnhost container listens on, from its `bash -c` command
/// (`serve-hostname --tcp|--udp ... --port N`, `netexec --http-port N --udp-port M`) or,
/// for `porter`, its `SERVE_SCTP_PORT_<N>` variables.
pub fn served_by(container: &Value) -> Vec<(Proto, u16)> {
    let Some(command) = container.pointer("/command/2").and_then(Value::as_str) else {
        return vec![]; // the `-client` containers
    };
    let words: Vec<&str> = command.split_whitespace().collect();
    let arg = |flag: &str| {
        let at = words
            .iter()
            .position(|w| *w == flag)
            .unwrap_or_else(|| panic!("{command}"));
        words[at + 1].parse::<u16>().unwrap()
    };
    match words.get(1).copied() {
        Some("serve-hostname") if words.contains(&"--udp") => vec![(Udp, arg("--port"))],
        Some("serve-hostname") => vec![(Tcp, arg("--port"))],
        Some("netexec") => vec![(Tcp, arg("--http-port")), (Udp, arg("--udp-port"))],
        Some("porter") => container["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["name"].as_str()?.strip_prefix("SERVE_SCTP_PORT_"))
            .map(|port| (Sctp, port.parse().unwrap()))
            .collect(),
        _ => panic!("unknown agnhost command: {command}"),
    }
}

/// `${ip:NS/POD}` replaced by `ip_of(NS, POD)` and `${prefix:NS/POD}` by that address's full
/// prefix length (32 or 128), as upstream computes its CIDRs.
pub fn substitute(text: &str, ip_of: impl Fn(&str, &str) -> std::net::IpAddr) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('}').expect("a placeholder ends with }");
        let (what, pod) = rest[start + 2..end]
            .split_once(':')
            .expect("a placeholder is ${what:NS/POD}");
        let (namespace, name) = pod.split_once('/').expect("NS/POD");
        let ip = ip_of(namespace, name);
        out.push_str(&match what {
            "ip" => ip.to_string(),
            "prefix" => if ip.is_ipv4() { "32" } else { "128" }.to_owned(),
            _ => panic!("unknown placeholder {what} in {text}"),
        });
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    //! Pure checks of the transcription against the copied manifests (no network, no cluster).

    use super::*;
    use serde_json::Value;
    use std::collections::{BTreeMap, BTreeSet};

    fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {pointer} in {v}"))
    }

    fn of_kind<'a>(objects: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        objects.iter().filter(move |o| str_at(o, "/kind") == kind)
    }

    /// A pod of the base fixture.
    struct FixturePod {
        host_network: bool,
        /// What its containers listen on.
        serves: BTreeSet<(Proto, u16)>,
    }

    type Pods = BTreeMap<(String, String), FixturePod>;

    fn key((namespace, pod): (&str, &str)) -> (String, String) {
        (namespace.to_owned(), pod.to_owned())
    }

    /// The pods of manifests.yaml: `<statefulset>-0` .. `-<replicas - 1>`.
    fn fixture_pods() -> Pods {
        let objects = objects("manifests.yaml");
        let mut pods = Pods::new();
        for sts in of_kind(&objects, "StatefulSet") {
            let spec = sts.pointer("/spec/template/spec").unwrap();
            let host_network = spec
                .get("hostNetwork")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let serves: BTreeSet<_> = spec["containers"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(served_by)
                .collect();
            let replicas = sts
                .pointer("/spec/replicas")
                .and_then(Value::as_u64)
                .unwrap();
            for i in 0..replicas {
                let pod = format!("{}-{i}", str_at(sts, "/metadata/name"));
                let serves = serves.clone();
                pods.insert(
                    (str_at(sts, "/metadata/namespace").to_owned(), pod),
                    FixturePod {
                        host_network,
                        serves,
                    },
                );
            }
        }
        pods
    }

    /// Per test, in order: (name, sub-tests, probes, changes). Sub-tests and probes are the
    /// transcription's index (notes §0.1); changes count Go statements as this module does.
    const COUNTS: [(&str, usize, usize, usize); 24] = [
        ("CNPAdminTierEgressNamedPort", 1, 2, 1),
        ("CNPAdminTierEgressNodePeers", 3, 5, 0),
        ("CNPAdminTierEgressInlineCIDRPeers", 2, 27, 3),
        ("CNPAdminTierEgressSCTP", 6, 12, 3),
        ("CNPAdminTierEgressTCP", 6, 12, 3),
        ("CNPAdminTierEgressUDP", 6, 12, 3),
        ("CNPAdminTierGress", 6, 54, 6),
        ("CNPAdminTierIngressSCTP", 6, 12, 3),
        ("CNPAdminTierIngressTCP", 6, 12, 3),
        ("CNPAdminTierIngressUDP", 6, 12, 3),
        ("CNPAdminTierIngressNamedPort", 1, 2, 1),
        ("CNPAdminTierIntegration", 6, 12, 3),
        ("CNPAdminTierPriorityField", 3, 8, 1),
        ("CNPBaselineTierEgressNamedPort", 1, 2, 1),
        ("CNPBaselineTierEgressNodePeers", 2, 4, 0),
        ("CNPBaselineTierIngressNamedPort", 1, 2, 1),
        ("CNPBaselineTierEgressInlineCIDRPeers", 2, 27, 3),
        ("CNPBaselineTierEgressSCTP", 4, 8, 1),
        ("CNPBaselineTierEgressTCP", 4, 8, 1),
        ("CNPBaselineTierEgressUDP", 4, 8, 1),
        ("CNPBaselineTierGress", 4, 36, 2),
        ("CNPBaselineTierIngressSCTP", 4, 8, 1),
        ("CNPBaselineTierIngressTCP", 4, 8, 1),
        ("CNPBaselineTierIngressUDP", 4, 8, 1),
    ];

    #[test]
    fn counts_match_the_transcription() {
        let tests = tests();
        assert_eq!(tests.len(), 24);
        let probes: usize = tests
            .iter()
            .flat_map(|t| &t.steps)
            .map(|s| s.probes.len())
            .sum();
        assert_eq!(probes, 301);
        for (t, &(name, subtests, probes, changes)) in tests.iter().zip(&COUNTS) {
            assert_eq!(t.name, name);
            let runs = t
                .steps
                .iter()
                .filter(|s| !s.name.contains(" (after "))
                .count();
            assert_eq!(runs, subtests, "{name}: sub-tests");
            let n: usize = t.steps.iter().map(|s| s.probes.len()).sum();
            assert_eq!(n, probes, "{name}: probes");
            let n: usize = t.steps.iter().map(|s| s.changes.len()).sum();
            assert_eq!(n, changes, "{name}: changes");
        }
        let names: BTreeSet<_> = tests.iter().map(|t| t.name).collect();
        assert_eq!(names.len(), 24, "test names are unique");
    }

    #[test]
    fn host_network_ports_are_upstreams_defaults() {
        let defaults: [u16; 8] = std::array::from_fn(|i| 34345 + i as u16);
        assert_eq!(HOST_NETWORK_PORTS, defaults);
    }

    #[test]
    fn every_manifest_exists() {
        for name in ["manifests.yaml", "README.md"] {
            assert!(data_dir().join(name).is_file(), "{name}");
        }
        for t in tests() {
            assert!(
                data_dir().join(t.manifest).is_file(),
                "{}: {}",
                t.name,
                t.manifest
            );
            assert!(!objects(t.manifest).is_empty(), "{}", t.manifest);
        }
    }

    #[test]
    fn features_are_upstreams() {
        const KNOWN: [&str; 3] = [
            "ClusterNetworkPolicy",
            "ClusterNetworkPolicyNamedPorts",
            "ClusterNetworkPolicyEgressNodePeers",
        ];
        for t in tests() {
            assert_eq!(
                t.features.first(),
                Some(&"ClusterNetworkPolicy"),
                "{}",
                t.name
            );
            assert!(t.features.iter().all(|f| KNOWN.contains(f)), "{}", t.name);
        }
    }

    /// Every probe's pods exist in manifests.yaml, host-network ports go to the host-network
    /// pods and fixed ports to the others, and the server listens on the probed proto/port (an
    /// expectation about a port nothing serves would say nothing about policy).
    #[test]
    fn every_probe_targets_fixture_pods_serving_its_port() {
        let pods = fixture_pods();
        assert_eq!(pods.len(), 10, "5 StatefulSets of 2 replicas");
        for t in tests() {
            for p in t.steps.iter().flat_map(|s| &s.probes) {
                let client = pods.get(&key(p.client));
                let server = pods.get(&key(p.server));
                let (Some(client), Some(server)) = (client, server) else {
                    panic!(
                        "{}: {:?} -> {:?}: no such fixture pod",
                        p.source, p.client, p.server
                    )
                };
                assert!(
                    !client.host_network,
                    "{}: client on the host network",
                    p.source
                );
                let port = match p.port {
                    Port::Number(n) => {
                        assert!(!server.host_network, "{}", p.source);
                        n
                    }
                    Port::HostNetwork(i) => {
                        assert!(server.host_network, "{}", p.source);
                        HOST_NETWORK_PORTS[i]
                    }
                };
                assert!(
                    server.serves.contains(&(p.proto, port)),
                    "{}: {:?} serves nothing on {}/{port}",
                    p.source,
                    p.server,
                    p.proto.as_str()
                );
            }
        }
    }

    /// Sources are `conformance/tests/<file>.go:<line>` (`<first>-<last>` for swaps), all in the
    /// file defining the test, and the probes are in upstream's order.
    #[test]
    fn sources_cite_the_go_file_of_the_test() {
        fn lines(source: &str, file: &str) -> Vec<u32> {
            let (f, lines) = source.rsplit_once(':').unwrap();
            assert_eq!(f, file, "{source}");
            lines.split('-').map(|n| n.parse().unwrap()).collect()
        }
        for t in tests() {
            let (file, _) = t.source.rsplit_once(':').unwrap();
            assert!(
                file.starts_with("conformance/tests/") && file.ends_with(".go"),
                "{file}"
            );
            let mut last = lines(t.source, file)[0];
            for (i, step) in t.steps.iter().enumerate() {
                if let Some(base) = step.name.split_once(" (after ").map(|(base, _)| base) {
                    let previous = &t.steps[i - 1];
                    assert!(previous.name.starts_with(base), "{}", step.name);
                    assert_eq!(previous.source, step.source, "{}", step.name);
                }
                assert!(lines(step.source, file)[0] < lines(step.probes[0].source, file)[0]);
                for c in &step.changes {
                    let l = lines(c.source(), file);
                    assert_eq!(
                        l.len(),
                        if matches!(c, Change::Swap { .. }) {
                            2
                        } else {
                            1
                        }
                    );
                    assert!(l[0] > last, "{}: out of order", c.source());
                    last = l[l.len() - 1];
                }
                for p in &step.probes {
                    let l = lines(p.source, file);
                    assert!(l.len() == 1 && l[0] > last, "{}: out of order", p.source);
                    last = l[0];
                }
            }
        }
    }

    /// Every change names an object of its test: policies of the test's manifest, a namespace
    /// of the fixture, an object to delete of the test's manifest.
    #[test]
    fn changes_name_objects_of_the_test() {
        let fixture = objects("manifests.yaml");
        let namespaces: BTreeSet<_> = of_kind(&fixture, "Namespace")
            .map(|n| str_at(n, "/metadata/name"))
            .collect();
        assert_eq!(namespaces.len(), 5);
        for t in tests() {
            let objects = objects(t.manifest);
            let policies: BTreeSet<_> = of_kind(&objects, "ClusterNetworkPolicy")
                .map(|p| str_at(p, "/metadata/name"))
                .collect();
            for c in t.steps.iter().flat_map(|s| &s.changes) {
                match *c {
                    Change::Set { policy, .. }
                    | Change::Swap { policy, .. }
                    | Change::Insert { policy, .. }
                    | Change::Remove { policy, .. } => {
                        assert!(policies.contains(policy), "{}: {policy}", c.source())
                    }
                    Change::NamespaceLabels {
                        namespace, labels, ..
                    } => {
                        assert!(namespaces.contains(namespace), "{}", c.source());
                        let labels: BTreeMap<String, String> = serde_json::from_str(labels)
                            .unwrap_or_else(|e| panic!("{}: {e}", c.source()));
                        assert!(!labels.is_empty(), "{}", c.source());
                    }
                    Change::Delete {
                        kind,
                        namespace,
                        name,
                        ..
                    } => assert!(
                        of_kind(&objects, kind).any(|o| {
                            o.pointer("/metadata/namespace") == Some(&Value::from(namespace))
                                && str_at(o, "/metadata/name") == name
                        }),
                        "{}: no {kind} {namespace}/{name}",
                        c.source()
                    ),
                }
            }
        }
    }

    /// `${ip:NS/POD}` and `${prefix:NS/POD}` replaced as for an IPv4 cluster, a distinct
    /// address per pod (as a cluster gives them); the pods must exist.
    fn substitute(text: &str, pods: &Pods) -> String {
        super::substitute(text, |namespace, name| {
            let index = pods
                .keys()
                .position(|k| *k == key((namespace, name)))
                .unwrap_or_else(|| panic!("{namespace}/{name}: no such pod"));
            format!("10.128.0.{}", index + 2).parse().unwrap()
        })
    }

    /// The test's policies (by name) after all its changes, each change checked to apply: the
    /// pointer of a `Set` exists, indices are in range, JSON parses.
    fn replay(t: &ConformanceTest, pods: &Pods) -> BTreeMap<String, Value> {
        let mut policies: BTreeMap<String, Value> =
            of_kind(&objects(t.manifest), "ClusterNetworkPolicy")
                .map(|p| (str_at(p, "/metadata/name").to_owned(), p.clone()))
                .collect();
        for c in t.steps.iter().flat_map(|s| &s.changes) {
            let json = |text: &str| -> Value {
                serde_json::from_str(&substitute(text, pods))
                    .unwrap_or_else(|e| panic!("{}: {e}", c.source()))
            };
            let source = c.source();
            match *c {
                Change::Set {
                    policy,
                    pointer,
                    value,
                    ..
                } => {
                    let new = json(value);
                    let slot = policies.get_mut(policy).unwrap().pointer_mut(pointer);
                    let slot = slot.unwrap_or_else(|| panic!("{source}: no {pointer}"));
                    if pointer.split('/').count() == 4 {
                        // A whole rule: upstream rewrites only its `protocols` (named ports).
                        let without_protocols = |rule: &Value| {
                            let mut rule = rule.clone();
                            rule.as_object_mut().unwrap().remove("protocols");
                            rule
                        };
                        assert_eq!(without_protocols(slot), without_protocols(&new), "{source}");
                    }
                    *slot = new;
                }
                Change::Swap {
                    policy, dir, a, b, ..
                } => {
                    let rules = rules(&mut policies, policy, dir);
                    assert!(a < rules.len() && b < rules.len(), "{source}");
                    rules.swap(a, b);
                }
                Change::Insert {
                    policy,
                    dir,
                    at,
                    rule,
                    ..
                } => {
                    let rule = json(rule);
                    let rules = rules(&mut policies, policy, dir);
                    assert!(at <= rules.len(), "{source}");
                    rules.insert(at, rule);
                }
                Change::Remove {
                    policy, dir, at, ..
                } => {
                    let rules = rules(&mut policies, policy, dir);
                    assert!(at < rules.len(), "{source}");
                    rules.remove(at);
                }
                Change::NamespaceLabels { .. } | Change::Delete { .. } => {}
            }
        }
        policies
    }

    /// Every ClusterNetworkPolicy of the suite, as its manifest has it and after all the
    /// changes of its test, reads with the agent's reader (`cluster::cnp`, which checks what
    /// the upstream CRD checks and more) without a refusal.
    #[test]
    fn every_policy_of_the_suite_reads_with_the_agents_reader() {
        let pods = fixture_pods();
        let mut read = 0;
        for t in tests() {
            let before = objects(t.manifest);
            let after = replay(&t, &pods);
            for p in of_kind(&before, "ClusterNetworkPolicy").chain(after.values()) {
                if let Err(e) = cluster::cnp::read_cluster_policy(p) {
                    panic!("{}: {e}", t.name);
                }
                read += 1;
            }
        }
        assert!(read > 48, "only {read} policies read");
    }

    fn rules<'a>(
        policies: &'a mut BTreeMap<String, Value>,
        policy: &str,
        dir: &str,
    ) -> &'a mut Vec<Value> {
        assert!(dir == "ingress" || dir == "egress", "{dir}");
        let spec = policies.get_mut(policy).unwrap().get_mut("spec").unwrap();
        spec.get_mut(dir).and_then(Value::as_array_mut).unwrap()
    }

    fn field<'a>(policy: &'a Value, dir: &str, what: &str) -> Vec<&'a str> {
        let rules = policy["spec"][dir]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        rules.iter().map(|r| r[what].as_str().unwrap()).collect()
    }

    /// The end states the transcription spells out (notes §2, §4.7): the Admin rule lists end
    /// as [pass, allow, deny, pass-port, deny-port, allow-port, deny-rest], the Baseline ones
    /// with only their first two rules swapped, and so on.
    #[test]
    fn changes_replay_to_the_transcribed_end_states() {
        const ADMIN: [&str; 7] = ["Pass", "Accept", "Deny", "Pass", "Deny", "Accept", "Deny"];
        const BASELINE: [&str; 5] = ["Deny", "Accept", "Deny", "Accept", "Deny"];
        let pods = fixture_pods();
        for t in tests() {
            let end = replay(&t, &pods);
            let actions = |policy: &str, dir: &str| field(&end[policy], dir, "action");
            let names = |policy: &str, dir: &str| field(&end[policy], dir, "name");
            let protocols = |policy: &str, dir: &str, i: usize| {
                end[policy]["spec"][dir][i]["protocols"].to_string()
            };
            match t.name {
                "CNPAdminTierEgressSCTP" => assert_eq!(actions("egress-sctp", "egress"), ADMIN),
                "CNPAdminTierEgressTCP" => assert_eq!(actions("egress-tcp", "egress"), ADMIN),
                "CNPAdminTierEgressUDP" => assert_eq!(actions("egress-udp", "egress"), ADMIN),
                "CNPAdminTierIngressSCTP" => assert_eq!(actions("ingress-sctp", "ingress"), ADMIN),
                "CNPAdminTierIngressTCP" => assert_eq!(actions("ingress-tcp", "ingress"), ADMIN),
                "CNPAdminTierIngressUDP" => assert_eq!(actions("ingress-udp", "ingress"), ADMIN),
                "CNPAdminTierGress" => {
                    assert_eq!(actions("gress-rules", "egress"), ADMIN);
                    assert_eq!(actions("gress-rules", "ingress"), ADMIN);
                    assert_eq!(
                        names("gress-rules", "egress")[3],
                        "pass-to-slytherin-at-port-80-53-9003"
                    );
                }
                "CNPBaselineTierGress" => {
                    assert_eq!(actions("default", "egress"), BASELINE);
                    assert_eq!(actions("default", "ingress"), BASELINE);
                }
                "CNPBaselineTierEgressSCTP"
                | "CNPBaselineTierEgressTCP"
                | "CNPBaselineTierEgressUDP" => {
                    assert_eq!(actions("default", "egress"), BASELINE)
                }
                "CNPBaselineTierIngressSCTP"
                | "CNPBaselineTierIngressTCP"
                | "CNPBaselineTierIngressUDP" => {
                    assert_eq!(actions("default", "ingress"), BASELINE)
                }
                "CNPAdminTierEgressInlineCIDRPeers" => assert_eq!(
                    names("inline-cidr-as-peers-example", "egress"),
                    [
                        "allow-egress-to-specific-podIPs",
                        "allow-egress-to-slytherin",
                        "deny-egress-to-internet"
                    ]
                ),
                "CNPBaselineTierEgressInlineCIDRPeers" => {
                    assert_eq!(
                        names("default", "egress"),
                        [
                            "allow-egress-to-specific-podIPs",
                            "allow-egress-to-slytherin",
                            "deny-egress-to-internet"
                        ]
                    );
                    assert_eq!(
                        end["default"]["spec"]["egress"][0]["to"][0]["networks"],
                        serde_json::json!([
                            substitute(
                                "${ip:network-policy-conformance-ravenclaw/luna-lovegood-0}/32",
                                &pods
                            ),
                            substitute(
                                "${ip:network-policy-conformance-hufflepuff/cedric-diggory-0}/32",
                                &pods
                            )
                        ])
                    );
                }
                "CNPAdminTierIntegration" => {
                    assert_eq!(actions("pass-example", "ingress"), ["Pass"]);
                    assert_eq!(actions("pass-example", "egress"), ["Pass"]);
                    assert_eq!(actions("default", "ingress"), ["Deny"]);
                }
                "CNPAdminTierPriorityField" => {
                    let priority = |p: &str| end[p]["spec"]["priority"].as_u64();
                    assert_eq!(
                        priority("old-priority-60-new-priority-40-example"),
                        Some(40)
                    );
                    assert_eq!(priority("priority-50-example"), Some(50));
                }
                "CNPAdminTierEgressNamedPort" => {
                    assert_eq!(
                        protocols("egress-tcp", "egress", 5),
                        r#"[{"destinationNamedPort":"web"}]"#
                    )
                }
                "CNPAdminTierIngressNamedPort" => {
                    assert_eq!(
                        protocols("ingress-udp", "ingress", 5),
                        r#"[{"destinationNamedPort":"dns"}]"#
                    )
                }
                "CNPBaselineTierEgressNamedPort" => {
                    assert_eq!(
                        protocols("default", "egress", 3),
                        r#"[{"destinationNamedPort":"dns"}]"#
                    )
                }
                "CNPBaselineTierIngressNamedPort" => {
                    assert_eq!(
                        protocols("default", "ingress", 3),
                        r#"[{"destinationNamedPort":"web"}]"#
                    )
                }
                "CNPAdminTierEgressNodePeers" | "CNPBaselineTierEgressNodePeers" => {
                    assert!(t.steps.iter().all(|s| s.changes.is_empty()))
                }
                other => panic!("{other}: no end state checked"),
            }
        }
    }
}
