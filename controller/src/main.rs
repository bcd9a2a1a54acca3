//! `sdn-controller`: the cluster controller of Kubernetes mode as its own program (the
//! Deployment's container may run it, or `sdn-agent controller`, the same code). A thin front
//! end: flags and `SDN_*` variables into the node settings, a logger, [`controller::run`] until
//! SIGTERM or SIGINT.

use anyhow::{Context, Result};
use clap::Parser;

use cluster::config::{flag_error, Config, Flags, LogFormat};

/// The cluster controller of Kubernetes mode: a HostSubnet for every Node, a NetNamespace for
/// every Namespace, the default ClusterNetwork; one active replica, elected by a Lease.
#[derive(Debug, Parser)]
#[command(name = "sdn-controller", version, args_override_self = true)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            eprintln!("error: {}", flag_error(&e));
            eprintln!("run `sdn-controller --help` for the flags");
            std::process::exit(2);
        }
        Err(e) => e.exit(),
    };
    let cfg =
        Config::from_flags(&cli.flags).context("bad configuration (see sdn-controller --help)")?;
    init_logging(cfg.log_format, &cfg.log_level)?;
    Ok(controller::run(cfg, controller::until_signal()).await?)
}

/// Logs to stderr in the configured format and level (`RUST_LOG` wins when set).
fn init_logging(format: LogFormat, level: &str) -> Result<()> {
    let level = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => level.to_string(),
    };
    let filter = cluster::config::parse_filter(&level).map_err(anyhow::Error::msg)?;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("installing the logger: {e}"))
}
