//! Unit tests of the standalone directory: uids, seeding, mismatches, exhaustion, the loader's rules.

use super::load::Stamp;
use super::*;
use crate::config::Config;
use crate::config::Ipv4ClusterNetwork as CidrEntry;
use crate::validate::PLUGIN_MULTITENANT;
use flows::Mode;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "sdn-cluster-unit-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn spec() -> ClusterNetworkSpec {
    ClusterNetworkSpec::from_config(&Config::default()).unwrap()
}

#[test]
fn uid_is_v4_shaped_and_distinct() {
    let (a, b) = (new_uid(), new_uid());
    assert_ne!(a, b);
    assert_eq!(a.len(), 36);
    assert_eq!(&a[14..15], "4");
    assert!("89ab".contains(&a[19..20]), "{a}");
}

#[test]
fn seed_writes_defaults_once() {
    let d = TempDir::new("seed");
    let st = seed(
        &d.0,
        "node-1",
        Some(Ipv4Addr::new(192, 168, 1, 10).into()),
        &spec(),
    )
    .unwrap();
    assert_eq!(st.subnet_of("node-1").unwrap().to_string(), "10.128.0.0/23");
    assert_eq!(st.vnid_of("default"), Some(0));
    let cn = st.cluster_network.as_ref().unwrap();
    assert_eq!(cn.plugin_name.as_deref(), Some(PLUGIN_MULTITENANT));
    assert!(cn.metadata.uid.is_some());
    let mut names: Vec<String> = fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "clusternetwork-default.yaml",
            "hostsubnet-node-1.yaml",
            "netnamespace-default.yaml"
        ]
    );
    let stamps: Vec<_> = names
        .iter()
        .map(|n| Stamp::of(&fs::metadata(d.0.join(n)).unwrap()))
        .collect();
    let again = seed(
        &d.0,
        "node-1",
        Some(Ipv4Addr::new(192, 168, 1, 10).into()),
        &spec(),
    )
    .unwrap();
    assert_eq!(again, st);
    let after: Vec<_> = names
        .iter()
        .map(|n| Stamp::of(&fs::metadata(d.0.join(n)).unwrap()))
        .collect();
    assert_eq!(stamps, after, "second seed rewrote a file");
    // A second node gets the next subnet.
    let st2 = seed(&d.0, "node-2", None, &spec()).unwrap();
    assert_eq!(
        st2.subnet_of("node-2").unwrap().to_string(),
        "10.128.2.0/23"
    );
    assert_eq!(st2.host_ip_of("node-2"), Some(FALLBACK_NODE_IP.into()));
}

fn dual_stack_spec() -> ClusterNetworkSpec {
    let cfg = Config::from_args(
        &"--node-name n --cluster-network 10.128.0.0/14,9 --cluster-network fd01::/48,64 \
          --service-cidr 172.30.0.0/16,fd02::/112"
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    ClusterNetworkSpec::from_config(&cfg).unwrap()
}

#[test]
fn seed_an_ipv6_only_cluster_with_an_empty_ipv4_subnet_and_an_ipv6_underlay() {
    let d = TempDir::new("seed-v6only");
    let cfg = Config::from_args(
        &"--node-name n --cluster-network fd01::/48,64 --service-cidr fd02::/112"
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let six = ClusterNetworkSpec::from_config(&cfg).unwrap();
    assert!(six.cluster_networks.is_empty() && six.service_network.is_none());
    let st = seed(&d.0, "node-1", Some("fd00:10::1".parse().unwrap()), &six).unwrap();
    let cn = st.cluster_network.as_ref().unwrap();
    cn.validate().unwrap();
    assert!(cn.is_ipv6_only() && cn.service_network.is_empty());
    assert_eq!(cn.ipv4_service_net().unwrap(), None);
    assert_eq!(cn.entries().unwrap(), vec![]);
    let hs = st.host_subnet_of("node-1").unwrap();
    assert_eq!(
        (hs.subnet.as_str(), hs.host_ip.as_str()),
        ("", "fd00:10::1")
    );
    assert_eq!(st.subnet_of("node-1"), None);
    assert_eq!(
        st.ipv6_subnet_of("node-1").unwrap().to_string(),
        "fd01::/64"
    );
    // A second node without a node IP gets ::1 and the next subnet; a second start writes nothing.
    let st2 = seed(&d.0, "node-2", None, &six).unwrap();
    assert_eq!(st2.host_ip_of("node-2"), Some("::1".parse().unwrap()));
    assert_eq!(
        st2.ipv6_subnet_of("node-2").unwrap().to_string(),
        "fd01:0:0:1::/64"
    );
    let again = seed(&d.0, "node-1", Some("fd00:10::1".parse().unwrap()), &six).unwrap();
    assert_eq!(again.ipv6_subnet_of("node-1"), st.ipv6_subnet_of("node-1"));
    // The same directory with an IPv4 configuration: the difference is named.
    let e = seed(&d.0, "node-1", None, &spec()).unwrap_err().to_string();
    assert!(e.contains("clusterNetworks"), "{e}");
}

#[test]
fn seed_dual_stack_from_the_start_and_once() {
    let d = TempDir::new("seed6");
    let st = seed(&d.0, "node-1", None, &dual_stack_spec()).unwrap();
    assert_eq!(st.subnet_of("node-1").unwrap().to_string(), "10.128.0.0/23");
    assert_eq!(
        st.ipv6_subnet_of("node-1").unwrap().to_string(),
        "fd01::/64"
    );
    let cn = st.cluster_network.as_ref().unwrap();
    assert_eq!(
        cn.ipv6_service_net().unwrap().unwrap().to_string(),
        "fd02::/112"
    );
    let again = seed(&d.0, "node-1", None, &dual_stack_spec()).unwrap();
    assert_eq!(again, st, "a second start writes nothing");
    let st2 = seed(&d.0, "node-2", None, &dual_stack_spec()).unwrap();
    assert_eq!(
        st2.subnet_of("node-2").unwrap().to_string(),
        "10.128.2.0/23"
    );
    assert_eq!(
        st2.ipv6_subnet_of("node-2").unwrap().to_string(),
        "fd01:0:0:1::/64"
    );
    assert_eq!(
        st2.ipv6_subnet_of("node-1").unwrap().to_string(),
        "fd01::/64"
    );
}

#[test]
fn seed_adds_ipv6_to_a_running_ipv4_node_and_refuses_to_change_it() {
    let d = TempDir::new("add6");
    let v4 = seed(&d.0, "node-1", None, &spec()).unwrap();
    assert_eq!(v4.ipv6_subnet_of("node-1"), None);
    let uid = v4.host_subnet_of("node-1").unwrap().metadata.uid.clone();
    let st = seed(&d.0, "node-1", None, &dual_stack_spec()).unwrap();
    assert_eq!(
        st.subnet_of("node-1").unwrap().to_string(),
        "10.128.0.0/23",
        "IPv4 kept"
    );
    assert_eq!(
        st.ipv6_subnet_of("node-1").unwrap().to_string(),
        "fd01::/64"
    );
    assert_eq!(
        st.host_subnet_of("node-1").unwrap().metadata.uid,
        uid,
        "same object"
    );
    assert_eq!(
        st.ipv6_cluster_network().unwrap().cidr.to_string(),
        "fd01::/48"
    );

    let mut moved = dual_stack_spec();
    moved.ipv6_network = Some(crate::config::Ipv6ClusterNetwork {
        cidr: "fd09::/48".parse().unwrap(),
        host_subnet_length: 64,
    });
    let e = seed(&d.0, "node-1", None, &moved).unwrap_err().to_string();
    assert!(
        e.contains("has the IPv6 cluster network fd01::/48,64 but the agent is configured with fd09::/48,64"),
        "{e}"
    );
    // Taking IPv6 away again is a change too: the pods hold IPv6 addresses.
    let e = seed(&d.0, "node-1", None, &spec()).unwrap_err().to_string();
    assert!(
        e.contains(
            "has the IPv6 cluster network fd01::/48,64 but the agent is configured with none"
        ),
        "{e}"
    );
}

#[test]
fn seed_does_not_rewrite_an_operators_file_for_ipv6() {
    let d = TempDir::new("own6");
    seed(&d.0, "node-1", None, &spec()).unwrap();
    let own = d.0.join("hostsubnet-node-1.yaml");
    let moved = d.0.join("nodes.yaml");
    fs::rename(&own, &moved).unwrap();
    let e = seed(&d.0, "node-1", None, &dual_stack_spec())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nodes.yaml: HostSubnet \"node-1\" needs an IPv6 subnet of fd01::/48"),
        "{e}"
    );
    assert!(e.contains("hostsubnet-node-1.yaml"), "{e}");
}

#[test]
fn seed_reports_config_mismatch_with_both_values() {
    let d = TempDir::new("mismatch");
    seed(&d.0, "n", None, &spec()).unwrap();
    let mut other = spec();
    other.vxlan_port = 4790;
    let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
    assert!(e.contains("clusternetwork-default.yaml"), "{e}");
    assert!(
        e.contains("has vxlanPort 4789 but the agent is configured with 4790"),
        "{e}"
    );
    let mut other = spec();
    other.cluster_networks[0].host_subnet_length = 8;
    let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
    assert!(
        e.contains("has clusterNetworks 10.128.0.0/14 (hostSubnetLength 9) but the agent is configured with 10.128.0.0/14 (hostSubnetLength 8)"),
        "{e}"
    );
    let mut other = spec();
    other.mode = Mode::Subnet;
    let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
    assert!(
        e.contains("pluginName redhat/openshift-ovs-multitenant"),
        "{e}"
    );
}

#[test]
fn seed_updates_own_host_ip_and_refuses_broken_dirs() {
    let d = TempDir::new("hostip");
    seed(&d.0, "n", Some(Ipv4Addr::new(10, 0, 0, 1).into()), &spec()).unwrap();
    let st = seed(&d.0, "n", Some(Ipv4Addr::new(10, 0, 0, 2).into()), &spec()).unwrap();
    assert_eq!(st.host_ip_of("n"), Some(Ipv4Addr::new(10, 0, 0, 2).into()));
    assert_eq!(st.subnet_of("n").unwrap().to_string(), "10.128.0.0/23");
    // A bad file elsewhere is tolerated, as the running agent tolerates it...
    fs::write(d.0.join("bad.yaml"), "kind: [").unwrap();
    let st = seed(&d.0, "n", None, &spec()).unwrap();
    assert_eq!(st.subnet_of("n").unwrap().to_string(), "10.128.0.0/23");
    // ...but not while this node's HostSubnet (or the ClusterNetwork) could be in it.
    let e = seed(&d.0, "other", None, &spec()).unwrap_err().to_string();
    assert!(
        e.contains("cannot start: this node's HostSubnet \"other\" cannot be read while 1 file problem(s) remain"),
        "{e}"
    );
    assert!(e.contains("bad.yaml"), "{e}");
    fs::remove_file(d.0.join("clusternetwork-default.yaml")).unwrap();
    let e = seed(&d.0, "n", None, &spec()).unwrap_err().to_string();
    assert!(
        e.contains("the ClusterNetwork \"default\" cannot be read"),
        "{e}"
    );
    assert!(!d.0.join("clusternetwork-default.yaml").exists());
}

#[test]
fn seed_reports_exhaustion() {
    let d = TempDir::new("full");
    let mut s = spec();
    s.cluster_networks = vec![CidrEntry {
        cidr: "10.128.0.0/22".parse().unwrap(),
        host_subnet_length: 9,
    }];
    seed(&d.0, "a", None, &s).unwrap();
    seed(&d.0, "b", None, &s).unwrap();
    let e = seed(&d.0, "c", None, &s).unwrap_err().to_string();
    assert!(
        e.contains("no free node subnet for node \"c\" in the cluster networks (10.128.0.0/22 with /23 node subnets)"),
        "{e}"
    );
}

#[test]
fn loader_keeps_last_good_objects_and_reports_duplicates() {
    let d = TempDir::new("loader");
    seed(&d.0, "n", None, &spec()).unwrap();
    let mut loader = Loader::new(d.0.clone());
    assert!(loader.scan());
    assert!(!loader.scan(), "nothing changed");
    let good = loader.assemble(&ClusterState::default());
    assert!(good.errors.is_empty(), "{:?}", good.errors);
    // Break the NetNamespace file: the object stays, the error names file and field.
    let nn = d.0.join("netnamespace-default.yaml");
    let text = fs::read_to_string(&nn)
        .unwrap()
        .replace("netid: 0", "netid: 99999999");
    fs::write(&nn, text).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert_eq!(l.state, good.state);
    let e = l.errors[0].to_string();
    assert!(
        e.contains("netnamespace-default.yaml: NetNamespace \"default\": field netid \"99999999\""),
        "{e}"
    );
    // A second definition elsewhere that says something else never changes the VNID in
    // effect; a fresh start (nothing in effect) uses neither.
    fs::write(
        d.0.join("zz.json"),
        r#"{"apiVersion":"network.openshift.io/v1","kind":"NetNamespace","metadata":{"name":"t"},"netname":"t","netid":15}"#,
    )
    .unwrap();
    assert!(loader.scan());
    let in_effect = loader.assemble(&good.state).state;
    assert_eq!(in_effect.vnid_of("t"), Some(15));
    let aa = d.0.join("aa.yaml");
    fs::write(
        &aa,
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: t, uid: x}\nnetname: t\nnetid: 16\n",
    )
    .unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&in_effect);
    assert_eq!(l.state.vnid_of("t"), Some(15), "the VNID in effect stays");
    let conflict = l
        .errors
        .iter()
        .map(ToString::to_string)
        .find(|e| e.contains("defined differently"))
        .unwrap();
    assert!(
        conflict.contains("aa.yaml (netid 16) and ")
            && conflict.contains("zz.json (netid 15): keeping the one in effect (netid 15)"),
        "{conflict}"
    );
    let fresh = loader.assemble(&ClusterState::default());
    assert_eq!(fresh.state.vnid_of("t"), None, "a fresh start uses neither");
    assert!(fresh
        .errors
        .iter()
        .any(|e| e.to_string().contains("none of them is used")));
    // The same content twice (metadata aside) is a duplicate: the first file is used.
    fs::write(
        &aa,
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: t, uid: x}\nnetname: t\nnetid: 15\n",
    )
    .unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert_eq!(l.state.vnid_of("t"), Some(15));
    let dup = l
        .errors
        .iter()
        .map(ToString::to_string)
        .find(|e| e.contains("defined in both"))
        .unwrap();
    assert!(dup.contains("aa.yaml") && dup.contains("zz.json"), "{dup}");
    // A HostSubnet outside the cluster network is left out and reported.
    fs::write(
        d.0.join("hs.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata: {name: m}\nhost: m\nhostIP: 10.0.0.9\nsubnet: 10.200.0.0/23\n",
    )
    .unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(l.state.host_subnet_of("m").is_none());
    assert!(l.errors.iter().any(|e| e.to_string().contains("hs.yaml: HostSubnet \"m\": field subnet \"10.200.0.0/23\": not inside any cluster network")), "{:?}", l.errors);
}

#[test]
fn cluster_network_policies_are_state_files_and_a_refused_one_fails_closed() {
    use multitenant::cluster_policy::{Action, Tier};
    let d = TempDir::new("cnp");
    seed(&d.0, "n", None, &spec()).unwrap();
    let mut loader = Loader::new(d.0.clone());
    let cnp = |priority: &str, action: &str| {
        format!(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
             metadata: {{name: scrape}}\nspec:\n  tier: Admin\n  priority: {priority}\n  \
             subject: {{namespaces: {{}}}}\n  ingress:\n  - action: {action}\n    \
             from: [{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: monitoring}}}}}}]\n"
        )
    };
    let file = d.0.join("clusternetworkpolicy-scrape.yaml");
    fs::write(&file, cnp("10", "Accept")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(l.errors.is_empty(), "{:?}", l.errors);
    let p = &l.state.cluster_policies["scrape"];
    assert_eq!((p.tier, p.priority), (Tier::Admin, 10));
    assert_eq!(p.ingress[0].action, Action::Accept);
    assert!(l.state.refused_cluster_policies.is_empty());

    // Changed in place: the new rules.
    fs::write(&file, cnp("12", "Deny")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    let p = &l.state.cluster_policies["scrape"];
    assert_eq!((p.priority, p.ingress[0].action), (12, Action::Deny));

    // A value the reader refuses (a priority past the API's bound): in effect failing closed,
    // listed as refused with the field.
    fs::write(&file, cnp("1001", "Accept")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    let why = &l.state.refused_cluster_policies["scrape"];
    assert!(why.contains("priority"), "{why}");
    let p = &l.state.cluster_policies["scrape"];
    assert!(
        p.ingress.iter().all(|r| r.action == Action::Deny),
        "fails closed: {p:?}"
    );

    // Another file defining it differently: failing closed until they agree.
    fs::write(&file, cnp("10", "Accept")).unwrap();
    fs::write(d.0.join("zz-scrape.yaml"), cnp("11", "Accept")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(
        l.state.refused_cluster_policies["scrape"].contains("defined differently"),
        "{:?}",
        l.state.refused_cluster_policies
    );
    // Both definitions fail closed, each under its own key.
    assert_eq!(
        l.state.cluster_policies.len(),
        2,
        "{:?}",
        l.state.cluster_policies.keys()
    );
    for p in l.state.cluster_policies.values() {
        assert!(p.name.starts_with("scrape ("), "{}", p.name);
        assert!(p.ingress.iter().all(|r| r.action == Action::Deny));
    }

    // Another apiVersion is not read as this one.
    fs::remove_file(d.0.join("zz-scrape.yaml")).unwrap();
    fs::write(&file, cnp("10", "Accept").replace("v1alpha2", "v1alpha1")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(
        l.errors.iter().any(|e| e
            .to_string()
            .contains("expected \"policy.networking.k8s.io/v1alpha2\"")),
        "{:?}",
        l.errors
    );

    // Deleted: gone.
    fs::remove_file(&file).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(l.state.cluster_policies.is_empty());
}

#[test]
fn node_files_are_what_nodes_peers_select_and_bad_ones_are_named() {
    let d = TempDir::new("nodes");
    seed(&d.0, "n", None, &spec()).unwrap();
    let mut loader = Loader::new(d.0.clone());
    let l = loader.assemble(&ClusterState::default());
    assert!(
        l.state.nodes_listed && l.state.nodes.is_empty(),
        "no file: no node, and nothing to wait for"
    );
    // As `kubectl get node -o yaml` prints one: spec and status fields nothing here reads.
    let file = d.0.join("node-infra1.yaml");
    let node = |address: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: infra1\n  labels: {{role: infra}}\n\
             spec: {{podCIDR: 10.128.0.0/23}}\nstatus:\n  addresses:\n  - {{type: Hostname, address: infra1}}\n  \
             - {{type: InternalIP, address: {address}}}\n  conditions: [{{type: Ready, status: \"True\"}}]\n"
        )
    };
    fs::write(&file, node("192.168.1.7")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(l.errors.is_empty(), "{:?}", l.errors);
    let n = &l.state.nodes["infra1"];
    assert_eq!(n.labels["role"], "infra");
    assert_eq!(
        n.addresses,
        ["192.168.1.7".parse::<std::net::IpAddr>().unwrap()]
    );

    // An InternalIP that is no address: refused, the field named; the file's last good
    // objects stay in effect (as for every kind).
    fs::write(&file, node("192.168.1.300")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert_eq!(
        l.state.nodes["infra1"].addresses,
        ["192.168.1.7".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(
        l.errors.iter().any(|e| e
            .to_string()
            .contains("status.addresses[1].address \"192.168.1.300\": expected an IP address")),
        "{:?}",
        l.errors
    );
    // A misspelt top-level field: refused, named.
    fs::write(&file, node("192.168.1.7").replace("status:", "stauts:")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(
        l.errors
            .iter()
            .any(|e| e.to_string().contains("unknown field `stauts`")),
        "{:?}",
        l.errors
    );

    // Two files that say different things: the node in effect stays.
    fs::write(&file, node("192.168.1.7")).unwrap();
    assert!(loader.scan());
    let before = loader.assemble(&ClusterState::default()).state;
    fs::write(d.0.join("zz-node.yaml"), node("192.168.1.8")).unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&before);
    assert_eq!(
        l.state.nodes["infra1"].addresses,
        ["192.168.1.7".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(
        l.errors
            .iter()
            .any(|e| e.to_string().contains("Node") && e.to_string().contains("zz-node.yaml")),
        "{:?}",
        l.errors
    );
    assert!(l.state.nodes_listed, "the node in effect is known");

    // Files that differ only in labels (what a nodes peer selects) conflict too; with no node
    // in effect before, the nodes are not known: rules with nodes peers fail closed.
    fs::write(
        d.0.join("zz-node.yaml"),
        node("192.168.1.7").replace("role: infra", "role: worker"),
    )
    .unwrap();
    assert!(loader.scan());
    let l = loader.assemble(&ClusterState::default());
    assert!(
        !l.state.nodes.contains_key("infra1") && !l.state.nodes_listed,
        "{:?} {}",
        l.state.nodes,
        l.state.nodes_listed
    );

    // A node refused with none in effect before: not known either.
    fs::remove_file(d.0.join("zz-node.yaml")).unwrap();
    fs::write(&file, node("192.168.1.300")).unwrap();
    let mut fresh = Loader::new(d.0.clone());
    assert!(fresh.scan());
    let l = fresh.assemble(&ClusterState::default());
    assert!(l.state.nodes.is_empty() && !l.state.nodes_listed);

    // A file that does not parse at all (it might be a Node) with nothing in effect: the nodes
    // are not known while a policy has a nodes peer, and known without one.
    fs::write(&file, "apiVersion: v1\nkind: Node\nmetadata: [").unwrap();
    let mut fresh = Loader::new(d.0.clone());
    assert!(fresh.scan());
    assert!(fresh.assemble(&ClusterState::default()).state.nodes_listed);
    fs::write(
        d.0.join("cnp.yaml"),
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata: {name: kubelet}\nspec:\n  tier: Admin\n  priority: 1\n  \
         subject: {namespaces: {}}\n  egress:\n  - action: Deny\n    \
         to: [{nodes: {matchLabels: {role: infra}}}]\n",
    )
    .unwrap();
    assert!(fresh.scan());
    assert!(!fresh.assemble(&ClusterState::default()).state.nodes_listed);
}
