//! `sdn-agent`: the node agent. It owns `br0` over OVSDB and OpenFlow, serves the CNI shim and
//! programs the pipeline.
//!
//! What exists today is `sdn-agent setup`: the agent's start-up sequence up to the pods. It
//! ensures `br0`, `vxlan0` (ofport 1) and `tun0` (ofport 2) in one OVSDB client session,
//! registers every table name, and replaces the base flows (cookie `0x1`) with the ones built by
//! the `flows` crate in one atomic OpenFlow bundle. It is idempotent and never deletes the bridge,
//! so running it again on a configured node changes nothing and interrupts nothing. The CNI
//! server, pods and cluster state arrive with the node issue.

use agent::setup;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: sdn-agent setup [--ovsdb unix:/run/openvswitch/db.sock] \
[--rundir /run/openvswitch] [--datapath-type netdev|system] [--mode subnet|multitenant] \
[--node-ip 172.17.0.2] [--local-subnet 10.128.0.0/23] [--cluster-network 10.128.0.0/14] \
[--service-cidr 172.30.0.0/16] [--vxlan-port 4789] [--mtu 1450]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("setup") => {
            let opts = setup::Options::parse(&args[1..]).context(USAGE)?;
            setup::run(&opts).await
        }
        Some("-h" | "--help") | None => bail!("{USAGE}"),
        Some(other) => bail!("unknown command {other:?}\n{USAGE}"),
    }
}
