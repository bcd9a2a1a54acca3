//! `sdn-cni`: the CNI plugin the container runtime executes. It answers VERSION itself and
//! forwards ADD, DEL, CHECK, GC and STATUS to `sdn-agent` over the agent's Unix socket
//! (`POST /cni`, HTTP/1.1; the body is `cni_proto::RequestBody`, see `docs/architecture.md`).
//!
//! Why so small: the runtime executes the plugin once per pod operation, so it must start fast
//! and fail clearly. It uses std, serde_json and the `cni-proto` crate only (the protocol it shares with the
//! agent), no async runtime, no logging framework.
//! Everything it needs beyond the CNI variables comes from the network config (`socket`,
//! `timeoutSeconds`), so it works with the stripped environment runtimes use on cleanup.
//!
//! Output contract: stdout holds exactly one JSON object (the result, the agent's error or the
//! shim's own error from `error.rs`) or nothing (a successful DEL/CHECK/GC/STATUS); exit 0 on
//! success, 1 on error. Diagnostics go to stderr only when `SDN_CNI_DEBUG` is set.
//!
//! Measuring the per-exec cost (see `cni-shim/bench.sh`):
//! `cargo build -p cni-shim --profile release-small && cni-shim/bench.sh target/release-small/sdn-cni 1000`.
//!
//! Limits: the per-command minimum CNI versions and the contents of the variables are checked
//! by the agent, not here.

mod agent;
mod config;
mod env;
mod error;
mod http;
mod request;

use std::io::{self, Read, Write};
use std::time::Instant;

use crate::env::Command;
use crate::error::{CniError, DECODE_FAILURE, FALLBACK_VERSION, IO_FAILURE};

/// The largest network config read from stdin.
const MAX_STDIN: u64 = 16 << 20;

/// What to print on stdout and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Output {
    text: String,
    exit: i32,
}

impl Output {
    fn error(e: &CniError, cni_version: &str) -> Output {
        debug(format_args!("error: {e}"));
        Output {
            text: e.to_json_tagged(cni_version),
            exit: 1,
        }
    }
}

fn main() {
    let started = Instant::now();
    let out = run(&env::process_var, &mut io::stdin().lock());
    let mut text = out.text;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let mut stdout = io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    debug(format_args!(
        "exit {} after {:?}",
        out.exit,
        started.elapsed()
    ));
    std::process::exit(if written.is_ok() { out.exit } else { 1 });
}

/// Runs one plugin invocation: `var` reads the environment, `stdin` holds the network config.
fn run(var: env::Lookup<'_>, stdin: &mut impl Read) -> Output {
    let command = match env::command(var) {
        Ok(c) => c,
        Err(e) => return Output::error(&e, FALLBACK_VERSION),
    };
    let mut raw = Vec::new();
    if let Err(e) = stdin.take(MAX_STDIN + 1).read_to_end(&mut raw) {
        let e = CniError::new(
            IO_FAILURE,
            "cannot read the network config from stdin",
            e.to_string(),
        );
        return Output::error(&e, FALLBACK_VERSION);
    }
    if raw.len() as u64 > MAX_STDIN {
        let e = CniError::new(
            DECODE_FAILURE,
            "failed to decode the network config on stdin",
            format!("more than {MAX_STDIN} bytes"),
        );
        return Output::error(&e, FALLBACK_VERSION);
    }
    if command == Command::Version {
        return Output {
            text: config::version_reply(&raw),
            exit: 0,
        };
    }
    let decoded = config::decode(&raw);
    let version = decoded
        .as_ref()
        .ok()
        .and_then(config::supported_version)
        .unwrap_or_else(|| FALLBACK_VERSION.to_owned());
    let cni_env = match env::read(command, var) {
        Ok(v) => v,
        Err(e) => return Output::error(&e, &version),
    };
    let conf = match decoded.and_then(|map| config::validate(&map)) {
        Ok(c) => c,
        Err(e) => return Output::error(&e, &version),
    };
    // serde_json accepted the bytes, so they are UTF-8; the check only keeps this panic-free.
    let raw_text = match std::str::from_utf8(&raw) {
        Ok(t) => t,
        Err(e) => {
            let e = CniError::new(
                DECODE_FAILURE,
                "failed to decode the network config on stdin",
                e.to_string(),
            );
            return Output::error(&e, &version);
        }
    };
    let Some(body) = request::body(command, &cni_env, raw_text) else {
        let e = CniError::new(
            DECODE_FAILURE,
            "failed to decode the network config on stdin",
            "it is not one JSON object",
        );
        return Output::error(&e, &version);
    };
    debug(format_args!(
        "{} {:?}/{:?} -> {} (deadline {:?})",
        command.as_str(),
        cni_env.container_id,
        cni_env.ifname,
        conf.socket.display(),
        conf.timeout
    ));
    match agent::forward(&conf, command, body) {
        Ok(a) => Output {
            text: a.body,
            exit: if a.ok { 0 } else { 1 },
        },
        Err(e) => Output::error(&e, &conf.cni_version),
    }
}

/// Writes a diagnostic line to stderr when `SDN_CNI_DEBUG` is set.
fn debug(args: std::fmt::Arguments<'_>) {
    if std::env::var_os("SDN_CNI_DEBUG").is_some() {
        let _ = writeln!(io::stderr(), "sdn-cni: {args}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn invoke(vars: &[(&str, &str)], stdin: &str) -> Output {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| Ok(map.get(k).cloned());
        run(&lookup, &mut stdin.as_bytes())
    }

    fn parsed(out: &Output) -> serde_json::Value {
        serde_json::from_str(&out.text).unwrap()
    }

    #[test]
    fn version_needs_nothing_but_the_command() {
        let out = invoke(&[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(out.exit, 0);
        assert_eq!(parsed(&out)["cniVersion"], "1.1.0");
    }

    #[test]
    fn env_error_uses_config_version_when_supported() {
        let out = invoke(
            &[("CNI_COMMAND", "ADD")],
            r#"{"cniVersion":"0.4.0","name":"n"}"#,
        );
        assert_eq!(out.exit, 1);
        let v = parsed(&out);
        assert_eq!(v["code"], 4);
        assert_eq!(v["cniVersion"], "0.4.0");
        let out = invoke(
            &[("CNI_COMMAND", "GC")],
            r#"{"cniVersion":"9.0.0","name":"n"}"#,
        );
        let v = parsed(&out);
        assert_eq!(v["code"], 1);
        assert_eq!(v["cniVersion"], "1.0.0");
    }

    #[test]
    fn missing_command_is_code_4_without_reading_stdin() {
        struct Boom;
        impl Read for Boom {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                panic!("stdin must not be read")
            }
        }
        let out = run(&|_: &str| Ok(None), &mut Boom);
        assert_eq!(out.exit, 1);
        assert_eq!(parsed(&out)["code"], 4);
    }
}
