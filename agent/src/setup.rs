//! `sdn-agent setup`: bridge, ports, table names and base flows, idempotently (see `main.rs`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use flows::{base_flows, cookie, Mode, NodeConfig, Table};
use ipnet::Ipv4Net;
use ovs::openflow::{BundleMsg, OfClient};
use ovs::ovsdb::{BridgeSpec, Client, FailMode, PortSpec};

/// The bridge the agent owns.
pub const BRIDGE: &str = "br0";

/// Options of `setup`, from flags.
#[derive(Debug, Clone)]
pub struct Options {
    /// OVSDB target.
    pub ovsdb: String,
    /// Directory holding `br0.mgmt`.
    pub rundir: PathBuf,
    /// `netdev` (userspace) or `system` (kernel).
    pub datapath_type: String,
    /// Overlay MTU of tun0.
    pub mtu: u32,
    /// What the base flows depend on.
    pub node: NodeConfig,
}

impl Options {
    /// Parses `--flag value` pairs; every value is checked and an error names the flag.
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut o = Options {
            ovsdb: "unix:/run/openvswitch/db.sock".into(),
            rundir: "/run/openvswitch".into(),
            datapath_type: "netdev".into(),
            mtu: 1450,
            node: NodeConfig {
                mode: Mode::Multitenant,
                node_ip: Ipv4Addr::new(172, 17, 0, 2),
                local_subnet: "10.128.0.0/23".parse()?,
                cluster_networks: vec!["10.128.0.0/14".parse()?],
                service_cidr: "172.30.0.0/16".parse()?,
                vxlan_port: 4789,
            },
        };
        let mut cluster = Vec::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().with_context(|| format!("{flag} needs a value"))?;
            let bad = |what: &str| format!("{flag} {value:?}: expected {what}");
            match flag.as_str() {
                "--ovsdb" => o.ovsdb = value.clone(),
                "--rundir" => o.rundir = value.into(),
                "--datapath-type" => match value.as_str() {
                    "netdev" | "system" => o.datapath_type = value.clone(),
                    _ => bail!(bad("netdev or system")),
                },
                "--mode" => {
                    o.node.mode = match value.as_str() {
                        "subnet" => Mode::Subnet,
                        "multitenant" => Mode::Multitenant,
                        _ => bail!(bad("subnet or multitenant")),
                    }
                }
                "--node-ip" => {
                    o.node.node_ip = value.parse().with_context(|| bad("an IPv4 address"))?
                }
                "--local-subnet" => {
                    o.node.local_subnet = cidr(value).with_context(|| bad("a CIDR"))?
                }
                "--cluster-network" => cluster.push(cidr(value).with_context(|| bad("a CIDR"))?),
                "--service-cidr" => {
                    o.node.service_cidr = cidr(value).with_context(|| bad("a CIDR"))?
                }
                "--vxlan-port" => {
                    o.node.vxlan_port = value
                        .parse()
                        .ok()
                        .filter(|p| *p != 0)
                        .with_context(|| bad("a UDP port"))?
                }
                "--mtu" => {
                    o.mtu = value
                        .parse()
                        .ok()
                        .filter(|m| (576..=9000).contains(m))
                        .with_context(|| bad("an MTU in 576..=9000"))?
                }
                other => bail!("unknown flag {other:?}"),
            }
        }
        if !cluster.is_empty() {
            o.node.cluster_networks = cluster;
        }
        if !o
            .node
            .cluster_networks
            .iter()
            .any(|cn| cn.contains(&o.node.local_subnet))
        {
            bail!(
                "--local-subnet {} is not inside any --cluster-network ({:?})",
                o.node.local_subnet,
                o.node
                    .cluster_networks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            );
        }
        Ok(o)
    }
}

fn cidr(s: &str) -> Result<Ipv4Net> {
    let n: Ipv4Net = s.parse()?;
    if n.prefix_len() == 0 || n.prefix_len() > 30 || n.network() != n.addr() {
        bail!("{s} must be a network address with a prefix between /1 and /30");
    }
    Ok(n)
}

/// Runs the set-up sequence.
pub async fn run(o: &Options) -> Result<()> {
    let db = Client::connect(&o.ovsdb).await.with_context(|| {
        format!(
            "cannot reach ovsdb-server at {}: is Open vSwitch running?",
            o.ovsdb
        )
    })?;
    let spec = BridgeSpec {
        datapath_type: o.datapath_type.clone(),
        fail_mode: Some(FailMode::Secure),
        protocols: vec!["OpenFlow13".into()],
        other_config: BTreeMap::new(),
    };
    db.ensure_bridge(BRIDGE, &spec).await?;
    let mut vxlan = PortSpec::new("vxlan0", "vxlan");
    vxlan.options = [
        ("remote_ip", "flow".to_string()),
        ("key", "flow".to_string()),
        ("dst_port", o.node.vxlan_port.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    vxlan.ofport_request = Some(1);
    let mut tun = PortSpec::new("tun0", "internal");
    tun.ofport_request = Some(2);
    tun.mtu_request = Some(o.mtu);
    for port in [vxlan, tun] {
        let ofport = db.add_port(BRIDGE, &port).await?;
        tracing::info!(port = %port.name, ofport, "port ready");
    }
    let names: Vec<(u8, &str)> = Table::names().collect();
    db.set_flow_table_names(BRIDGE, &names).await?;

    // ensure_bridge waited for ovs-vswitchd to apply the bridge, so br0.mgmt exists now.
    let mgmt = o.rundir.join(format!("{BRIDGE}.mgmt"));
    let of = OfClient::connect(&format!("unix:{}", mgmt.display()))
        .await
        .with_context(|| format!("cannot open OpenFlow to {}", mgmt.display()))?;
    let base = base_flows(&o.node);
    let mut msgs = vec![BundleMsg::delete_by_cookie(cookie::BASE, u64::MAX)];
    msgs.extend(base.iter().cloned().map(BundleMsg::add));
    of.bundle(&msgs)
        .await
        .context("installing the base flows")?;
    let version = base
        .last()
        .map(|f| f.actions_text(None))
        .unwrap_or_default();
    tracing::info!(flows = base.len(), %version, bridge = BRIDGE, "base pipeline installed");
    Ok(())
}
