//! `sdn-agent`: the node agent. It owns `br0` over OVSDB and OpenFlow, serves the CNI shim on a
//! root-only Unix socket and programs the pipeline of `pipeline.md` (see `agent::node` for the
//! start-up order). SIGTERM or SIGINT stops serving and removes the CNI config file; pods, ports
//! and flows stay in place, so a restart (even after SIGKILL) causes no data-plane gap.

use anyhow::{bail, Context, Result};
use tokio::signal::unix::{signal, SignalKind};

fn usage() -> String {
    format!("usage: sdn-agent [run] [flags]\n       sdn-agent controller [flags]   (Kubernetes mode: allocates HostSubnets and NetNamespaces)\n       sdn-agent remove-host-rules   (node teardown: the iptables chains of the agent)\n       sdn-agent crds                 (print the CustomResourceDefinitions as YAML)\n\nflags:\n{}", agent::config::FLAGS)
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-h" | "--help" | "help") => {
            eprintln!("{}", usage());
            return Ok(());
        }
        Some("run") => {
            args.remove(0);
        }
        Some("crds") => {
            // The CRDs of network.openshift.io/v1, as deploy/crds.yaml holds them.
            let text = agent::cluster::crd::render_yaml()?;
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the CRDs to stdout")?;
            return Ok(());
        }
        Some("controller") => {
            // The cluster-wide allocator of Kubernetes mode (HostSubnets, NetNamespaces).
            args.remove(0);
            let cfg = agent::config::Config::from_args(&args)
                .context("bad configuration (see sdn-agent --help)")?;
            let mut term = signal(SignalKind::terminate())?;
            let mut int = signal(SignalKind::interrupt())?;
            return agent::controller::run(cfg, async {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            })
            .await;
        }
        Some("remove-host-rules") => {
            // Teardown of a node: the agent's iptables chains and the jumps to them.
            agent::hostports::remove_all(&agent::iptables::Iptables::host())
                .await
                .context("removing the agent's host port rules")?;
            return agent::iptables::remove()
                .await
                .context("removing the agent's iptables rules");
        }
        Some(a) if !a.starts_with("--") => bail!("unknown command {a:?}\n{}", usage()),
        _ => {}
    }
    let cfg = agent::config::Config::from_args(&args)
        .context("bad configuration (see sdn-agent --help)")?;
    let node = agent::node::Node::start(cfg).await?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    node.run_until(async {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
    .await;
    tracing::info!("stopping (pods keep running)");
    node.stop().await;
    Ok(())
}
