//! `sdn-agent`: the node agent. It owns `br0` over OVSDB and OpenFlow, serves the CNI shim on a
//! root-only Unix socket and programs the pipeline of `docs/pipeline.md` (see `agent::node`
//! for the start-up order). SIGTERM or SIGINT stops serving; the CNI config files stay, so
//! runtimes keep seeing the network as configured while the agent restarts or is upgraded (the
//! shim answers "try again later" meanwhile); pods, ports and flows stay in place, so a restart
//! (even after SIGKILL) causes no data-plane gap. Removing the node's network for good is
//! `sdn-agent remove-cni-config` and `sdn-agent remove-host-rules`.
//!
//! The command line is clap's: `sdn-agent [run] [FLAGS]`, `sdn-agent controller [FLAGS]`,
//! `sdn-agent remove-host-rules`, `sdn-agent remove-cni-config`,
//! `sdn-agent hand-back-to-openshift-sdn`, `sdn-agent crds`, `sdn-agent settings`; `--help` on each, `--version`, flags as
//! `--flag value` or `--flag=value`, every flag also an environment variable (see
//! [`cluster::config::Flags`]). Logs go to stderr as text or JSON (`--log-format`), at
//! `--log-level` (or `RUST_LOG`), changeable while running with `sdnctl log-level`.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use cluster::config::{Config, Flags};

/// The SDN node agent: owns the Open vSwitch bridge br0 and serves the sdn-cni plugin.
/// Without a command it runs the agent (`sdn-agent run --help` lists its flags).
#[derive(Debug, Parser)]
#[command(name = "sdn-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// The command line with `run` put in front when no command is named, so `sdn-agent --mtu=1400`
/// runs the agent, and only `run` and `controller` read flags and `SDN_*` variables (`crds`
/// and the teardown commands work whatever the environment holds).
fn args() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let named = args.get(1).and_then(|a| a.to_str()).is_some_and(|a| {
        matches!(
            a,
            "run"
                | "controller"
                | "remove-host-rules"
                | "remove-cni-config"
                | "hand-back-to-openshift-sdn"
                | "crds"
                | "settings"
                | "help"
                | "-h"
                | "--help"
                | "-V"
                | "--version"
        )
    });
    if !named {
        args.insert(1.min(args.len()), "run".into());
    }
    args
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the node agent (the default when no command is named)
    #[command(args_override_self = true)]
    Run(Flags),
    /// Kubernetes mode: the cluster-wide allocator of HostSubnets and NetNamespaces
    #[command(args_override_self = true)]
    Controller(Flags),
    /// Node teardown: remove the agent's iptables chains and the jumps to them
    RemoveHostRules,
    /// Node teardown: remove the CNI network config files the agent wrote (the agent keeps them
    /// when it stops, so that runtimes see no gap during restarts and upgrades)
    RemoveCniConfig {
        /// CNI network config directory
        #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
        cni_conf_dir: std::path::PathBuf,
        /// The agent's CNI network name
        #[arg(long, value_name = "NAME", default_value = "sdn")]
        cni_network_name: String,
    },
    /// Roll a takeover back: with the agent stopped, leave the node as openshift-sdn needs to
    /// find it (its leases of the running pods, its CNI config; ours, our chains and our idle
    /// pool ports removed); openshift-sdn then reattaches the pods when it starts. Reads the
    /// agent's flags (ovsdb, ipamDir, cniConfDir, cniNetworkName, cniSocket)
    #[command(args_override_self = true)]
    HandBackToOpenshiftSdn(Flags),
    /// Print the CustomResourceDefinitions of network.openshift.io/v1 as YAML
    Crds,
    /// Print the settings reference (every key, flag, variable, default) as Markdown
    Settings,
}

fn config(flags: &Flags) -> Result<Config> {
    Config::from_flags(flags).context("bad configuration (see sdn-agent run --help)")
}

#[tokio::main]
async fn main() -> Result<()> {
    agent::host::heap::keep_large_blocks_out_of_the_heap();
    let cli = match Cli::try_parse_from(args()) {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            eprintln!("error: {}", cluster::config::flag_error(&e));
            eprintln!("run `sdn-agent run --help` (or `sdn-agent COMMAND --help`) for the flags");
            std::process::exit(2);
        }
        // --help, --version.
        Err(e) => e.exit(),
    };
    // The logger follows the configuration of `run` and `controller` (logFormat, logLevel);
    // the other commands log as text at info.
    let (format, level) = match &cli.command {
        Cmd::Run(f) | Cmd::Controller(f) => {
            let cfg = config(f)?;
            (cfg.log_format, cfg.log_level)
        }
        _ => (
            agent::telemetry::logging::LogFormat::Text,
            "info".to_string(),
        ),
    };
    agent::telemetry::logging::init(format, &level).map_err(anyhow::Error::msg)?;
    let flags = match cli.command {
        Cmd::Run(flags) => flags,
        Cmd::Settings => {
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, cluster::config::reference().as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the settings reference to stdout")?;
            return Ok(());
        }
        Cmd::Crds => {
            let text = cluster::crd::render_yaml()?;
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the CRDs to stdout")?;
            return Ok(());
        }
        Cmd::Controller(flags) => {
            controller::run(config(&flags)?, controller::until_signal()).await?;
            return Ok(());
        }
        Cmd::HandBackToOpenshiftSdn(flags) => {
            let done = agent::node::hand_back(&config(&flags)?).await?;
            let mut text: String = done.iter().map(|l| format!("{l}\n")).collect();
            text.push_str(
                "the node is ready for openshift-sdn: schedule its DaemonSet pod here; it sets br0 \
                 up again and reattaches the running pods\n",
            );
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing to stdout")?;
            return Ok(());
        }
        Cmd::RemoveCniConfig {
            cni_conf_dir,
            cni_network_name,
        } => {
            let removed = agent::node::remove_cni_configs(&cni_conf_dir, &cni_network_name)?;
            let text: String = removed
                .iter()
                .map(|f| format!("removed {}\n", f.display()))
                .collect();
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing to stdout")?;
            return Ok(());
        }
        Cmd::RemoveHostRules => {
            agent::features::hostports::remove_all(&agent::host::iptables::Iptables::host())
                .await
                .context("removing the agent's host port rules")?;
            return agent::host::iptables::remove()
                .await
                .context("removing the agent's iptables rules");
        }
    };
    let node = agent::node::Daemon::start(config(&flags)?).await?;
    node.run_until(controller::until_signal()).await;
    tracing::info!("stopping (pods keep running; the CNI config stays, so runtimes retry until the agent is back)");
    node.stop().await;
    Ok(())
}
