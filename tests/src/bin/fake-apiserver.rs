//! `fake-apiserver`: the tests' fake Kubernetes API server ([`sdn_tests::fakeapi`]) as a
//! process, for trying the agent and controller by hand or from scripts.
//!
//! ```text
//! fake-apiserver --listen 127.0.0.1:6443 [--kubeconfig-out FILE]
//! ```
//!
//! Prints the server URL on stdout once it serves, then runs until SIGINT or SIGTERM. The store
//! is in memory and starts empty. `RUST_LOG=debug` logs every request on stderr.

use sdn_tests::fakeapi::FakeApi;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

const USAGE: &str = "usage: fake-apiserver --listen ADDR:PORT [--kubeconfig-out FILE]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-apiserver: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen = None;
    let mut kubeconfig = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next(),
            "--kubeconfig-out" => kubeconfig = args.next(),
            "-h" | "--help" => {
                writeln!(std::io::stdout(), "{USAGE}")?;
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    let listen = listen.ok_or(USAGE)?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let api = FakeApi::try_start(listen.as_str())?;
    if let Some(path) = &kubeconfig {
        api.kubeconfig(path)?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", api.url())?;
        out.flush()?;
    }
    tracing::info!(url = %api.url(), kubeconfig = ?kubeconfig, "fake api server serving");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    })?;
    tracing::info!("fake api server stopping");
    drop(api);
    Ok(())
}
