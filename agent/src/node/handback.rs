//! Handing a node back to openshift-sdn: the rollback of a takeover, node by node
//! (`sdn-agent hand-back-to-openshift-sdn`, with the agent stopped).
//!
//! What openshift-sdn needs to find when it starts (`node.go` `Start`): every pod's port with
//! `external_ids` `sandbox` and `ip` (our records keep both keys, so `GetPodNetworkInfo` reads
//! them as its own), a veth per pod, host-local leases of its pods in
//! `<ipamDir>/openshift-sdn` (so a new pod never gets a running pod's address) written as its
//! vendored host-local v0.6.0 writes them, the container id alone (`ipam::V060Dir`: that
//! version releases a lease at the pod's DEL only when the file holds exactly the id, so a
//! lease in the newer `<id>\r\neth0` format would leak), and its CNI config file. It then finds table 253 without its note, sets br0 up afresh (`SetupOVS`) and
//! reattaches every pod with its address and its namespace's VNID (`reattachPods`): pods keep
//! running; their traffic pauses while br0 is made again, as on any openshift-sdn node whose
//! rules changed (our pipeline forwards until that moment).
//!
//! So this command, refusing while the agent runs: writes openshift-sdn's leases of the pods
//! on br0, deletes the idle ports of our pool with their veth pairs, writes openshift-sdn's CNI
//! config file and removes ours (the runtime's next ADD goes to openshift-sdn, and fails
//! until it serves, as on a node whose network is starting), removes our lease directory, our
//! host port rules and our chains. Our rows stay on br0 until openshift-sdn replaces the
//! bridge. Idempotent: a second run finds the work done.

use std::net::Ipv4Addr;

use super::error::{bail, Result, Step};

use super::takeover::{CNI_CONF_FILE, CNI_NETWORK};
use crate::host::ipam;
use crate::host::iptables::Iptables;
use crate::pod::record::keys;
use crate::pod::BRIDGE;
use cluster::config::Config;

/// openshift-sdn's CNI config file, byte for byte (`openshift-sdn-node/sdn.go`
/// `writeConfigFile`), mode 0600.
pub(super) const CNI_CONF_TEXT: &str =
    "\n{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"openshift-sdn\",\n  \"type\": \"openshift-sdn\"\n}\n";

/// openshift-sdn serves IPv4 only: a pod with an IPv6 address (a dual-stack pod) would lose
/// it, and with it whatever its peers reach it by. Refused before anything is changed, naming
/// the pods.
fn refuse_ipv6_pods(ports: &[super::takeover::Port]) -> Result<()> {
    let dual: Vec<String> = ports
        .iter()
        .filter_map(|p| {
            let ip6 = p.external_ids.get(keys::IP6)?;
            let ns = p
                .external_ids
                .get(keys::NAMESPACE)
                .map_or("", String::as_str);
            let pod = p.external_ids.get(keys::POD).map_or("", String::as_str);
            Some(format!("{ns}/{pod} ({ip6})"))
        })
        .collect();
    if !dual.is_empty() {
        bail!(
            "{} pods hold IPv6 addresses, which openshift-sdn cannot serve: {}; delete them \
             (or remove the cluster's IPv6 network and re-create them with IPv4 only), then hand \
             the node back",
            dual.len(),
            dual.join(", ")
        );
    }
    Ok(())
}

/// Hands the node back (see the module docs). Returns what was done, one line each.
pub async fn hand_back(cfg: &Config) -> Result<Vec<String>> {
    if std::os::unix::net::UnixStream::connect(&cfg.cni_socket).is_ok() {
        bail!(
            "the agent is running on this node (its CNI socket {} answers): stop it first (take \
             its DaemonSet pod off this node), then hand the node back",
            cfg.cni_socket.display()
        );
    }
    let db = ovs::ovsdb::Client::connect(&cfg.ovsdb.to_string())
        .await
        .with_step(|| format!("cannot reach ovsdb-server at {}", cfg.ovsdb))?;
    let ports = db
        .with_cache(super::takeover::bridge_ports)
        .unwrap_or_default();
    refuse_ipv6_pods(&ports)?;
    let mut done = Vec::new();
    let theirs = ipam::V060Dir::open(&cfg.ipam_dir, CNI_NETWORK).with_step(|| {
        format!(
            "openshift-sdn's lease directory in {}",
            cfg.ipam_dir.display()
        )
    })?;
    let mut pods = 0;
    let mut idle = Vec::new();
    for super::takeover::Port {
        name,
        external_ids: ids,
        ..
    } in &ports
    {
        match (ids.get(keys::SANDBOX), ids.get(keys::IP)) {
            (Some(sandbox), Some(ip)) if !sandbox.is_empty() => {
                let ifname = ids.get(keys::IFNAME).map_or("eth0", String::as_str);
                if ifname != "eth0" {
                    tracing::warn!(port = %name, %sandbox, ifname, "a pod interface other than eth0: openshift-sdn knows one interface per pod and will not reattach it");
                    continue;
                }
                let ip: Ipv4Addr = ip
                    .parse()
                    .with_step(|| format!("pod port {name} records ip {ip:?}"))?;
                theirs
                    .reserve(ip, sandbox)
                    .with_step(|| format!("writing openshift-sdn's lease of {ip}"))?;
                pods += 1;
            }
            _ if crate::pod::pool::is_pool_port(name) => idle.push(name.clone()),
            _ => {}
        }
    }
    done.push(format!(
        "{pods} pods' leases written to {}",
        theirs.dir().display()
    ));
    if !idle.is_empty() {
        db.delete_ports_nowait(BRIDGE, &idle)
            .await
            .step("deleting the idle ports of the agent's pool")?;
        let netlink = crate::host::netlink::Netlink::new().step("opening rtnetlink")?;
        for p in &idle {
            netlink
                .delete_host_veth(p)
                .await
                .with_step(|| format!("deleting pool veth {p}"))?;
        }
        done.push(format!("{} idle pool ports deleted", idle.len()));
    }
    std::fs::create_dir_all(&cfg.cni_conf_dir)
        .with_step(|| format!("creating {}", cfg.cni_conf_dir.display()))?;
    let conf = cfg.cni_conf_dir.join(CNI_CONF_FILE);
    cluster::files::write(
        &conf,
        CNI_CONF_TEXT.as_bytes(),
        0o600,
        cluster::files::Durability::PowerLoss,
    )
    .with_step(|| format!("writing {}", conf.display()))?;
    done.push(format!("wrote {}", conf.display()));
    for f in super::remove_cni_configs(&cfg.cni_conf_dir, &cfg.cni_network_name)? {
        done.push(format!("removed {}", f.display()));
    }
    let ours = cfg.ipam_dir.join(&cfg.cni_network_name);
    if ours.is_dir() {
        std::fs::remove_dir_all(&ours).with_step(|| format!("removing {}", ours.display()))?;
        done.push(format!("removed {}", ours.display()));
    }
    crate::features::hostports::remove_all(&Iptables::host())
        .await
        .step("removing the agent's host port rules")?;
    crate::host::iptables::remove()
        .await
        .step("removing the agent's iptables chains")?;
    done.push("removed the agent's iptables chains (SDN-*) and host port rules".into());
    Ok(done)
}
