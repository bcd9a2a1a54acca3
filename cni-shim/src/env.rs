//! The CNI environment: `CNI_COMMAND` and the variables each command needs.
//!
//! The variables are read through a lookup function so that tests feed a map instead of the
//! process environment. Nothing here falls back on `PATH`, `HOME` or `CNI_PATH`: runtimes strip
//! the environment on cleanup (podman runs DEL with only `CNI_COMMAND`, `CNI_CONTAINERID` and
//! `CNI_IFNAME`), and everything else the shim needs comes from the network config.
//!
//! Limits: values are checked for presence and UTF-8 only. Their contents (container id
//! characters, netns path, ifname length, `CNI_ARGS` syntax) are validated by the agent, which
//! owns those rules and says exactly what is wrong.

use crate::error::{CniError, INVALID_ENV};

pub(crate) use cni_proto::Command;

/// The CNI variables forwarded to the agent; `None` when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CniEnv {
    /// `CNI_CONTAINERID`.
    pub container_id: Option<String>,
    /// `CNI_NETNS` (may be empty on DEL).
    pub netns: Option<String>,
    /// `CNI_IFNAME`.
    pub ifname: Option<String>,
    /// `CNI_ARGS`, raw (`K=V;K=V`, values may contain `=`).
    pub args: Option<String>,
    /// `CNI_PATH`.
    pub path: Option<String>,
}

/// Looks up one variable: `Ok(None)` when unset, an error when it is not UTF-8.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>, CniError>;

/// Looks `name` up in the process environment.
pub(crate) fn process_var(name: &str) -> Result<Option<String>, CniError> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v.into_string().map(Some).map_err(|v| {
            CniError::new(
                INVALID_ENV,
                format!("invalid environment variable {name}"),
                format!("{name}={v:?} is not valid UTF-8"),
            )
        }),
    }
}

/// Reads and parses `CNI_COMMAND`.
pub(crate) fn command(var: Lookup<'_>) -> Result<Command, CniError> {
    let supported = Command::list(false);
    match var("CNI_COMMAND")? {
        None => Err(CniError::new(
            INVALID_ENV,
            "required environment variable CNI_COMMAND is not set",
            format!(
                "sdn-cni is a CNI plugin: a container runtime runs it with CNI_COMMAND set to \
                 one of {supported} and the network config on stdin"
            ),
        )),
        Some(c) => c.parse::<Command>().map_err(|_| {
            CniError::new(
                INVALID_ENV,
                format!("unknown CNI_COMMAND {c:?}"),
                format!("sdn-cni supports {supported}"),
            )
        }),
    }
}

/// Reads the variables `command` forwards, failing on the first required one that is unset or
/// empty.
pub(crate) fn read(command: Command, var: Lookup<'_>) -> Result<CniEnv, CniError> {
    for name in command.required_env() {
        if !matches!(var(name)?, Some(v) if !v.is_empty()) {
            return Err(CniError::new(
                INVALID_ENV,
                format!("required environment variable {name} is not set"),
                format!("CNI_COMMAND={} needs {name}", command.as_str()),
            ));
        }
    }
    Ok(CniEnv {
        container_id: var("CNI_CONTAINERID")?,
        netns: var("CNI_NETNS")?,
        ifname: var("CNI_IFNAME")?,
        args: var("CNI_ARGS")?,
        path: var("CNI_PATH")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>, CniError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| Ok(map.get(k).cloned())
    }

    #[test]
    fn command_missing_or_unknown_is_code_4() {
        let e = command(&lookup(&[])).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("CNI_COMMAND"), "{e}");
        let e = command(&lookup(&[("CNI_COMMAND", "add")])).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("\"add\""), "{e}");
        assert_eq!(
            command(&lookup(&[("CNI_COMMAND", "STATUS")])).unwrap(),
            Command::Status
        );
    }

    #[test]
    fn add_needs_netns_and_names_the_variable() {
        let l = lookup(&[("CNI_CONTAINERID", "c"), ("CNI_IFNAME", "eth0")]);
        let e = read(Command::Add, &l).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("CNI_NETNS"), "{e}");
        let l = lookup(&[
            ("CNI_CONTAINERID", ""),
            ("CNI_NETNS", "/n"),
            ("CNI_IFNAME", "eth0"),
        ]);
        let e = read(Command::Check, &l).unwrap_err();
        assert!(e.msg.contains("CNI_CONTAINERID"), "{e}");
    }

    #[test]
    fn del_accepts_empty_or_missing_netns() {
        let l = lookup(&[
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", ""),
        ]);
        let env = read(Command::Del, &l).unwrap();
        assert_eq!(env.netns.as_deref(), Some(""));
        let env = read(
            Command::Del,
            &lookup(&[("CNI_CONTAINERID", "c"), ("CNI_IFNAME", "eth0")]),
        )
        .unwrap();
        assert_eq!(env.netns, None);
        assert_eq!(env.path, None);
        let e = read(Command::Del, &lookup(&[("CNI_CONTAINERID", "c")])).unwrap_err();
        assert!(e.msg.contains("CNI_IFNAME"), "{e}");
    }

    #[test]
    fn gc_and_status_need_nothing() {
        assert_eq!(read(Command::Gc, &lookup(&[])).unwrap(), CniEnv::default());
        let env = read(Command::Status, &lookup(&[("CNI_ARGS", "A=b=c")])).unwrap();
        assert_eq!(env.args.as_deref(), Some("A=b=c"));
    }
}
