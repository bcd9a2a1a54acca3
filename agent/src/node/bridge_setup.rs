//! br0 and the host side of the node, set up at start and again after ovs-vswitchd restarts:
//! the bridge and its two fixed ports, tun0's address, MTU and routes, forwarding, the flow
//! tables' names, and `flow-restore-wait`, which holds a (re)started ovs-vswitchd until the
//! agent has put the whole pipeline back. Every step is idempotent.

use std::collections::BTreeMap;
use std::time::Duration;

use flows::{NodeConfig, Table};
use ipnet::Ipv4Net;
use ovs::ovsdb::{BridgeSpec, FailMode, PortSpec};

use super::error::{bail, Result, Step};
use super::takeover;
use crate::host::netlink::Netlink;
use crate::pod::BRIDGE;
use cluster::config::Config;

/// br0 (secure fail mode, OpenFlow 1.3) and its two fixed ports: `vxlan0` at ofport 1, `tun0`
/// at ofport 2 (with the MAC openshift-sdn gave it when the node was taken over).
pub(super) async fn set_up_bridge(
    db: &ovs::ovsdb::Client,
    cfg: &Config,
    node: &NodeConfig,
) -> Result<()> {
    let spec = BridgeSpec {
        datapath_type: cfg.datapath_type.datapath_type().to_string(),
        fail_mode: Some(FailMode::Secure),
        protocols: vec!["OpenFlow13".into()],
        other_config: BTreeMap::new(),
    };
    db.ensure_bridge(BRIDGE, &spec)
        .await
        .with_step(|| format!("setting up bridge {BRIDGE}"))?;
    let mut vxlan = PortSpec::new("vxlan0", "vxlan");
    vxlan.options = BTreeMap::from([
        ("remote_ip".to_string(), "flow".to_string()),
        ("key".to_string(), "flow".to_string()),
        ("dst_port".to_string(), cfg.vxlan_port.to_string()),
    ]);
    vxlan.ofport_request = Some(1);
    let mut tun = PortSpec::new("tun0", "internal");
    tun.ofport_request = Some(2);
    tun.mtu_request = Some(cfg.mtu);
    tun.mac = Some(node.tun0_mac().to_string());
    if node.tun0_mac.is_some() {
        tun.external_ids =
            BTreeMap::from([(takeover::KEPT_MAC_KEY.to_string(), "openshift-sdn".into())]);
    }
    for port in [vxlan, tun] {
        let ofport = db
            .add_port(BRIDGE, &port)
            .await
            .with_step(|| format!("adding port {} to {BRIDGE}", port.name))?;
        if ofport != u32::from(port.ofport_request.unwrap_or(0)) {
            bail!(
                "{} has ofport {ofport} on {BRIDGE}, the pipeline needs {}; another port took \
                 it: remove that port or the bridge and start again",
                port.name,
                port.ofport_request.unwrap_or(0)
            );
        }
    }
    Ok(())
}

/// The host side: tun0's address, MTU and routes; forwarding; `route_localnet` (host ports on
/// 127.0.0.1: DNAT to a pod and route out of tun0 needs it). Returns the netlink handle.
pub(super) async fn set_up_host(node: &NodeConfig, mtu: u32) -> Result<Netlink> {
    configure_tun0(node, mtu).await?;
    crate::host::netlink::enable_ip_forward().step("enabling net.ipv4.ip_forward")?;
    crate::host::netlink::set_sysctl("net/ipv4/conf/all/route_localnet", "1")
        .step("enabling net.ipv4.conf.all.route_localnet (host ports on 127.0.0.1)")?;
    Netlink::new().step("opening rtnetlink")
}

/// The flow tables' names, and a check that br0's management socket is there (ovs-vswitchd
/// made it with the bridge); the OpenFlow connection itself is awaited after the node serves.
pub(super) async fn name_tables(db: &ovs::ovsdb::Client, cfg: &Config) -> Result<()> {
    let names: Vec<(u8, &str)> = Table::names().collect();
    db.set_flow_table_names(BRIDGE, &names)
        .await
        .with_step(|| format!("naming the flow tables of {BRIDGE}"))?;
    if let Err(e) = std::os::unix::net::UnixStream::connect(&cfg.bridge_mgmt) {
        bail!(
            "opening OpenFlow to {}: {e}; is ovs-vswitchd running, and is that br0's \
             management socket (bridgeMgmt)?",
            cfg.bridge_mgmt.display()
        );
    }
    Ok(())
}

/// tun0's address (the gateway), MTU and routes (cluster networks and the service network), and
/// ARP on tun0 always from the gateway address: a connection from the node to one of its own
/// addresses (a host port on the underlay IP) keeps that source after DNAT, and the kernel
/// would otherwise ask for the pod's MAC with it as sender, which table 0 drops as spoofed.
/// Idempotent; run at start and after ovs-vswitchd re-created tun0.
pub(super) async fn configure_tun0(node: &NodeConfig, mtu: u32) -> Result<()> {
    let netlink = Netlink::new().step("opening rtnetlink")?;
    let (gw_addr, routes) = match &node.ipv4 {
        Some(v4) => {
            let mut routes: Vec<Ipv4Net> = v4.cluster_networks.clone();
            routes.push(v4.service_cidr);
            let gw = Ipv4Net::new(v4.gateway(), v4.local_subnet.prefix_len())
                .step("the gateway's address")?;
            (Some(gw), routes)
        }
        None => (None, Vec::new()),
    };
    netlink
        .configure_gateway("tun0", gw_addr, mtu, &routes)
        .await
        .step("configuring tun0")?;
    if node.ipv4.is_some() {
        crate::host::netlink::set_sysctl("net/ipv4/conf/tun0/arp_announce", "2")
            .step("setting net.ipv4.conf.tun0.arp_announce=2 (ARP from the gateway address)")?;
    }
    if let Some(v6) = &node.ipv6 {
        configure_tun0_ipv6(&netlink, v6).await?;
    }
    Ok(())
}

/// A dual-stack node's tun0: IPv6 on (a node whose default disables it would leave tun0
/// without), the IPv6 gateway address and the routes of the cluster's IPv6 network and the
/// IPv6 service network, and IPv6 forwarding (the node routes pods' IPv6 as it does their
/// IPv4; with forwarding on, the kernel ignores router advertisements on interfaces whose
/// `accept_ra` is 1: a node configured by SLAAC needs `accept_ra=2` on its uplink, see
/// operating.md).
async fn configure_tun0_ipv6(netlink: &Netlink, v6: &flows::NodeIpv6) -> Result<()> {
    use crate::host::netlink::set_sysctl;
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        bail!(
            "the node's kernel has no IPv6 (booted with ipv6.disable=1?): a dual-stack node \
             needs it; remove the cluster's IPv6 network or enable IPv6 in the kernel"
        );
    }
    set_sysctl("net/ipv6/conf/tun0/disable_ipv6", "0")
        .step("turning IPv6 on for tun0 (net.ipv6.conf.tun0.disable_ipv6=0)")?;
    let gw = ipnet::Ipv6Net::new(v6.gateway(), v6.local_subnet.prefix_len())
        .step("the IPv6 gateway's address")?;
    let mut routes = vec![v6.cluster_network];
    routes.extend(v6.service_cidr);
    netlink
        .configure_gateway6("tun0", gw, &routes)
        .await
        .step("configuring tun0's IPv6 side")?;
    set_sysctl("net/ipv6/conf/all/forwarding", "1")
        .step("enabling IPv6 forwarding (net.ipv6.conf.all.forwarding=1)")?;
    Ok(())
}

/// `flow-restore-wait`: the agent keeps it `true` in OVSDB, so an ovs-vswitchd that (re)starts
/// forwards nothing until the agent has put the whole pipeline back. This clears it (a waiting
/// ovs-vswitchd starts forwarding with the pipeline the agent just completed; applied before
/// this returns) and sets it again for the next ovs-vswitchd start, a second later, in the
/// background. Failures are logged: the periodic repair calls this again. Why the second: ovs-vswitchd reads the flag in its main loop only while it
/// still waits, and its `cur_cfg` can reach the clearing transaction's `next_cfg` before that
/// loop has looked (seen after a restart with a pool of ports to re-add); a flag set again at
/// once was then never seen cleared, and the switch waited for good. Setting it again later
/// costs nothing: with `fail_mode=secure`, an ovs-vswitchd that starts meanwhile without the
/// flag forwards nothing until the agent's flows are in either. One release (and its re-arm)
/// at a time.
pub(super) async fn release_switch(db: &ovs::ovsdb::Client) {
    static RELEASING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let one = RELEASING.lock().await;
    if let Err(e) = db.set_flow_restore_wait(false).await {
        tracing::warn!(error = %e, "clearing flow-restore-wait");
        return;
    }
    drop(one);
    let db = db.clone();
    tokio::spawn(async move {
        let _one = RELEASING.lock().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Err(e) = db.set_flow_restore_wait(true).await {
            tracing::warn!(error = %e, "setting flow-restore-wait for the next ovs-vswitchd start");
        }
    });
}
