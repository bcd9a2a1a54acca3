//! `sdn-agent`: the node agent. It owns `br0` over OVSDB and OpenFlow, serves the CNI shim on a
//! root-only Unix socket and programs the pipeline of `docs/pipeline.md` (see `agent::daemon`
//! for the start-up order). SIGTERM or SIGINT stops serving and removes the CNI config file;
//! pods, ports and flows stay in place, so a restart (even after SIGKILL) causes no data-plane
//! gap.
//!
//! The command line is clap's: `sdn-agent [run] [FLAGS]`, `sdn-agent controller [FLAGS]`,
//! `sdn-agent remove-host-rules`, `sdn-agent crds`; `--help` on each, `--version`, flags as
//! `--flag value` or `--flag=value`, every flag also an environment variable (see
//! [`agent::config::Flags`]).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{signal, SignalKind};

use agent::config::{Config, Flags};

/// The SDN node agent: owns the Open vSwitch bridge br0 and serves the sdn-cni plugin.
#[derive(Debug, Parser)]
#[command(
    name = "sdn-agent",
    version,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Without a command: the flags of `run`.
    #[command(flatten)]
    flags: Flags,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the node agent (the default when no command is given)
    #[command(args_override_self = true)]
    Run(Flags),
    /// Kubernetes mode: the cluster-wide allocator of HostSubnets and NetNamespaces
    #[command(args_override_self = true)]
    Controller(Flags),
    /// Node teardown: remove the agent's iptables chains and the jumps to them
    RemoveHostRules,
    /// Print the CustomResourceDefinitions of network.openshift.io/v1 as YAML
    Crds,
}

fn config(flags: &Flags) -> Result<Config> {
    Config::from_flags(flags).context("bad configuration (see sdn-agent --help)")
}

async fn until_signal() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install the SIGTERM/SIGINT handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            eprintln!("error: {}", agent::config::flag_error(&e));
            eprintln!("run `sdn-agent --help` (or `sdn-agent COMMAND --help`) for the flags");
            std::process::exit(2);
        }
        // --help, --version.
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let flags = match cli.command {
        None => cli.flags,
        Some(Cmd::Run(flags)) => flags,
        Some(Cmd::Crds) => {
            let text = agent::cluster::crd::render_yaml()?;
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the CRDs to stdout")?;
            return Ok(());
        }
        Some(Cmd::Controller(flags)) => {
            return agent::controller::run(config(&flags)?, until_signal()).await;
        }
        Some(Cmd::RemoveHostRules) => {
            agent::hostports::remove_all(&agent::iptables::Iptables::host())
                .await
                .context("removing the agent's host port rules")?;
            return agent::iptables::remove()
                .await
                .context("removing the agent's iptables rules");
        }
    };
    let node = agent::daemon::Daemon::start(config(&flags)?).await?;
    node.run_until(until_signal()).await;
    tracing::info!("stopping (pods keep running)");
    node.stop().await;
    Ok(())
}
