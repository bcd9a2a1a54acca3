//! The host rules (`agent::host::iptables`) against the real `iptables-restore` on PATH, each test in a
//! network namespace it creates: iptables state is per namespace, so the host's own rules are
//! never touched. Needs root; panics with the reason when it is not.

use agent::host::iptables::{render, HostRules, Iptables, IptablesError};
use sdn_tests::harness::{which, Netns};

fn require_root_and_iptables() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (network namespaces, iptables); run the test command as root"
    );
    for bin in ["ip", "iptables", "iptables-restore", "iptables-save"] {
        assert!(
            which(bin).is_some(),
            "this test needs {bin} (apt-get install iptables iproute2)"
        );
    }
}

fn rules(cns: &[&str]) -> HostRules {
    HostRules {
        cluster_networks: cns.iter().map(|c| c.parse().unwrap()).collect(),
        service_cidr: Some("172.30.0.0/16".parse().unwrap()),
        underlay_ipv6: false,
        vxlan_port: 4789,
        egress_ips: Vec::new(),
        ipv6: None,
    }
}

/// `iptables-save` of the namespace without comments and counters, so two saves compare equal
/// when the rules are.
fn save(ns: &Netns) -> String {
    let text = ns.exec(&["iptables-save"]).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match (l.starts_with(':'), l.rfind(" [")) {
            (true, Some(i)) => &l[..i],
            _ => l,
        })
        .collect();
    // A table with nothing but its built-in chains (policy ACCEPT) is as good as none: the nft
    // backend lists a table once anything touched it, the legacy one always has it.
    let mut out = Vec::new();
    for block in lines.split_inclusive(|l| *l == "COMMIT") {
        let empty = block.iter().all(|l| {
            l.starts_with('*') || *l == "COMMIT" || (l.starts_with(':') && l.ends_with(" ACCEPT"))
        });
        if !empty {
            out.extend_from_slice(block);
        }
    }
    out.join("\n")
}

/// The rule lines of `chain`, in order, from a save or a rendered input.
fn chain_rules(text: &str, chain: &str) -> Vec<String> {
    let prefix = format!("-A {chain} ");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

fn jumps(text: &str, from: &str, to: &str) -> usize {
    chain_rules(text, from)
        .iter()
        .filter(|l| l.ends_with(&format!("-j {to}")))
        .count()
}

fn iptables_cmd(ns: &Netns, args: &[&str]) {
    let mut all = vec!["iptables"];
    all.extend_from_slice(args);
    ns.exec(&all).unwrap_or_else(|e| panic!("{e}"));
}

/// Rules and chains that are not ours, in both tables, with a DROP forward policy.
fn unrelated_rules(ns: &Netns) {
    iptables_cmd(ns, &["-P", "FORWARD", "DROP"]);
    iptables_cmd(
        ns,
        &["-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"],
    );
    iptables_cmd(ns, &["-A", "FORWARD", "-o", "lo", "-j", "DROP"]);
    iptables_cmd(ns, &["-N", "OTHER"]);
    iptables_cmd(ns, &["-A", "OTHER", "-s", "198.51.100.0/24", "-j", "DROP"]);
    iptables_cmd(
        ns,
        &[
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-d",
            "192.0.2.0/24",
            "-j",
            "RETURN",
        ],
    );
}

fn assert_ours_match(saved: &str, r: &HostRules) {
    let rendered = render(r);
    for chain in [
        "SDN-PREROUTING",
        "SDN-POSTROUTING",
        "SDN-INPUT",
        "SDN-FORWARD",
    ] {
        assert_eq!(
            chain_rules(saved, chain),
            chain_rules(&rendered, chain),
            "chain {chain} differs from the rendered rules; iptables-save:\n{saved}"
        );
    }
    assert_eq!(jumps(saved, "PREROUTING", "SDN-PREROUTING"), 1, "{saved}");
    assert_eq!(jumps(saved, "POSTROUTING", "SDN-POSTROUTING"), 1, "{saved}");
    assert_eq!(jumps(saved, "INPUT", "SDN-INPUT"), 1, "{saved}");
    assert_eq!(jumps(saved, "FORWARD", "SDN-FORWARD"), 1, "{saved}");
}

#[tokio::test]
async fn sync_twice_is_identical_one_jump_each_and_unrelated_rules_survive() {
    require_root_and_iptables();
    let ns = Netns::new("sdnipt");
    unrelated_rules(&ns);
    let mut r = rules(&["10.128.0.0/14"]);
    // An egress IP's mark, SNAT and reject rules, in the form iptables-save prints them.
    r.egress_ips.push(agent::host::iptables::EgressIpRule {
        ip: "192.168.77.100".parse().unwrap(),
        mark: 0x14,
        mac: [0x0a, 0x59, 0, 0, 0, 0x14],
        vnid: 20,
    });
    let ipt = Iptables::in_netns(ns.name());
    ipt.sync(&r).await.unwrap();
    let first = save(&ns);
    ipt.sync(&r).await.unwrap();
    let second = save(&ns);
    assert_eq!(first, second, "a second sync changed the ruleset");
    assert_ours_match(&second, &r);
    // Our jumps come first, ahead of the host's own rules.
    assert_eq!(
        chain_rules(&second, "FORWARD")[0],
        "-A FORWARD -m comment --comment \"sdn: forward pod traffic\" -j SDN-FORWARD"
    );
    for kept in [
        ":FORWARD DROP",
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
        "-A FORWARD -o lo -j DROP",
        "-A OTHER -s 198.51.100.0/24 -j DROP",
        "-A POSTROUTING -d 192.0.2.0/24 -j RETURN",
    ] {
        assert!(
            second.lines().any(|l| l == kept),
            "{kept:?} is gone:\n{second}"
        );
    }
    // The module's own reader sees the same.
    let listed = ipt.list("nat").await.unwrap();
    assert!(
        listed.contains(&"-N SDN-POSTROUTING".to_string()),
        "{listed:?}"
    );
}

#[tokio::test]
async fn a_dual_stack_node_gets_ip6tables_twins_as_ip6tables_save_prints_them() {
    require_root_and_iptables();
    let ns = Netns::new("sdnipt6");
    let mut r = rules(&["10.128.0.0/14"]);
    let v6 = agent::host::iptables::HostRules6 {
        cluster_network: "fd01::/48".parse().unwrap(),
        service_cidr: Some("fd02::/112".parse().unwrap()),
    };
    r.ipv6 = Some(v6);
    // An egress IP of each family: the IPv6 one's mark, SNAT and reject in ip6tables only.
    r.egress_ips = ["192.168.77.100", "fd00:77::100"]
        .iter()
        .map(|ip| agent::host::iptables::EgressIpRule {
            ip: ip.parse().unwrap(),
            mark: 0x14,
            mac: [0x0a, 0x59, 0, 0, 0, 0x14],
            vnid: 20,
        })
        .collect();
    let ipt = Iptables::in_netns(ns.name());
    ipt.sync(&r).await.unwrap();
    let save6 = |ns: &Netns| {
        let text = ns.exec(&["ip6tables-save"]).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| match (l.starts_with(':'), l.rfind(" [")) {
                (true, Some(i)) => l[..i].to_string(),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = save6(&ns);
    ipt.sync(&r).await.unwrap();
    assert_eq!(save6(&ns), first, "a second sync changed the IPv6 ruleset");
    let rendered = agent::host::iptables::render6(&v6, &r.egress_ips, None);
    assert!(first.contains("--to-source fd00:77::100"), "{first}");
    assert!(!first.contains("192.168.77.100"), "{first}");
    for chain in [
        "SDN-PREROUTING",
        "SDN-POSTROUTING",
        "SDN-INPUT",
        "SDN-FORWARD",
    ] {
        assert_eq!(
            chain_rules(&first, chain),
            chain_rules(&rendered, chain),
            "chain {chain}; ip6tables-save:\n{first}"
        );
    }
    assert_eq!(
        jumps(&first, "POSTROUTING", "SDN-POSTROUTING"),
        1,
        "{first}"
    );
    assert_eq!(jumps(&first, "FORWARD", "SDN-FORWARD"), 1, "{first}");
    // The IPv4 rules are those of an IPv4 node with the IPv4 egress IP.
    let mut v4 = rules(&["10.128.0.0/14"]);
    v4.egress_ips = r.egress_ips[..1].to_vec();
    assert_ours_match(&save(&ns), &v4);
    // Teardown removes both families' chains.
    ipt.remove().await.unwrap();
    let after = save6(&ns);
    assert!(!after.contains("SDN-"), "{after}");
}

#[tokio::test]
async fn changing_networks_replaces_the_rules_and_bad_input_changes_nothing() {
    require_root_and_iptables();
    let ns = Netns::new("sdnipt");
    unrelated_rules(&ns);
    let ipt = Iptables::in_netns(ns.name());
    let a = rules(&["10.128.0.0/14"]);
    let b = HostRules {
        vxlan_port: 8472,
        ..rules(&["10.132.0.0/14", "10.200.0.0/16"])
    };
    ipt.sync(&a).await.unwrap();
    ipt.sync(&b).await.unwrap();
    let saved = save(&ns);
    assert_ours_match(&saved, &b);
    assert!(!saved.contains("10.128.0.0/14"), "{saved}");
    assert!(!saved.contains("--dport 4789"), "{saved}");

    // An input with a bad line in its second table: rejected by the dry run, naming the line;
    // neither table changes (iptables-restore alone would have committed the first).
    let mut bad = render(&a);
    let at = bad.rfind("COMMIT").unwrap();
    bad.insert_str(at, "-A SDN-FORWARD -s 10.1.0.0/33 -j ACCEPT\n");
    let bad_line = bad.lines().position(|l| l.contains("/33")).unwrap() + 1;
    let err = ipt.restore(&bad).await.unwrap_err();
    match &err {
        IptablesError::Restore {
            test, line, text, ..
        } => {
            assert!(*test, "{err}");
            assert_eq!(*line, Some(bad_line), "{err}");
            assert_eq!(
                text.as_deref(),
                Some("-A SDN-FORWARD -s 10.1.0.0/33 -j ACCEPT")
            );
        }
        other => panic!("expected a Restore error, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&format!("in netns {}", ns.name())), "{msg}");
    assert!(msg.contains("invalid mask"), "{msg}");
    assert_eq!(save(&ns), saved, "a rejected input changed the ruleset");

    // A jump deleted by someone comes back; a duplicated one is reduced to one.
    iptables_cmd(
        &ns,
        &[
            "-D",
            "INPUT",
            "-m",
            "comment",
            "--comment",
            "sdn: vxlan and pod traffic to this node",
            "-j",
            "SDN-INPUT",
        ],
    );
    iptables_cmd(&ns, &["-A", "FORWARD", "-j", "SDN-FORWARD"]);
    let tampered = save(&ns);
    assert_eq!(jumps(&tampered, "INPUT", "SDN-INPUT"), 0);
    assert_eq!(jumps(&tampered, "FORWARD", "SDN-FORWARD"), 2);
    ipt.sync(&b).await.unwrap();
    assert_ours_match(&save(&ns), &b);
}

#[tokio::test]
async fn remove_leaves_nothing_of_ours() {
    require_root_and_iptables();
    let ns = Netns::new("sdnipt");
    unrelated_rules(&ns);
    let ipt = Iptables::in_netns(ns.name());
    let before = save(&ns);
    ipt.remove().await.unwrap();
    assert_eq!(
        save(&ns),
        before,
        "remove without our chains changed something"
    );
    ipt.sync(&rules(&["10.128.0.0/14", "10.200.0.0/16"]))
        .await
        .unwrap();
    // A jump into our chain from a chain that is not ours must not keep it alive.
    iptables_cmd(&ns, &["-A", "OTHER", "-j", "SDN-FORWARD"]);
    ipt.remove().await.unwrap();
    let after = save(&ns);
    assert!(!after.contains("SDN-"), "left behind:\n{after}");
    assert_eq!(after, before, "remove did not restore the ruleset");
    ipt.remove().await.unwrap();
    assert_eq!(save(&ns), before);
}

#[tokio::test]
async fn errors_name_the_namespace() {
    require_root_and_iptables();
    let missing = format!("sdnipt-missing-{}", std::process::id());
    let err = Iptables::in_netns(&missing)
        .sync(&rules(&["10.128.0.0/14"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("in netns {missing}")), "{err}");
    assert!(err.contains("iptables -w 5 -t mangle -S"), "{err}");
}
