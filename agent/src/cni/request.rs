//! A shim request: the wire body (one JSON object, `cni_proto::RequestBody`; see `docs/architecture.md`), validated into a
//! [`Request`] the handlers can trust.
//!
//! Validation is pure ([`Request::from_body`]) except the netns existence check
//! ([`check_netns`]), which the server runs for ADD and CHECK only: DEL must succeed when the
//! namespace is already gone (or CNI_NETNS is empty, as containerd's second DEL sends).
//!
//! Every error names the field the runtime set (the `CNI_*` variable or config key) and the
//! offending value. Codes: 4 for environment variables (CNI_COMMAND, CNI_CONTAINERID,
//! CNI_NETNS, CNI_IFNAME, CNI_ARGS), 1 for a command the config's version does not have,
//! 1 or 7 for the config (see [`NetConf::parse`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::args::CniArgs;
use super::config::NetConf;
use super::names::{check_ifname, is_container_id, CONTAINER_ID_RULE};
use super::types::{parse_command, CniError, Command};
use super::version::CniVersion;

/// The longest netns path we accept (PATH_MAX).
pub const MAX_NETNS_PATH_LEN: usize = 4096;

/// The shim's deadline when the config has no `timeoutSeconds` (the protocol's default).
pub const DEFAULT_SHIM_TIMEOUT_SECS: u64 = cni_proto::DEFAULT_TIMEOUT_SECS;

/// How long the server may take so its answer reaches the shim before the shim's own deadline
/// `shim`: a tenth of it, at most one second, is left for the answer to travel.
pub fn answer_within(shim: Duration) -> Duration {
    shim - (shim / 10).min(Duration::from_secs(1))
}

/// The namespace of pods that neither `K8S_POD_NAMESPACE` nor the config's `namespace` place.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The request body as the shim sends it (`cni_proto::RequestBody`); a key is absent (or null)
/// when its variable was unset.
pub type RequestBody = cni_proto::RequestBody<Value>;

/// A validated request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The command.
    pub command: Command,
    /// CNI_CONTAINERID: valid for ADD/DEL/CHECK; for GC/STATUS the value given, or empty.
    pub container_id: String,
    /// CNI_NETNS: an absolute path; for ADD/CHECK it existed and was a network namespace when
    /// validated; for DEL it may be `None` or gone.
    pub netns: Option<PathBuf>,
    /// CNI_IFNAME: valid for ADD/DEL/CHECK; for GC/STATUS the value given, or empty.
    pub ifname: String,
    /// CNI_ARGS, parsed.
    pub args: CniArgs,
    /// CNI_PATH, split on ':' (empty entries dropped).
    pub path: Vec<PathBuf>,
    /// The network configuration, parsed.
    pub config: NetConf,
    /// The network configuration, verbatim.
    pub raw_config: Value,
    /// When the server stops waiting for the handler and answers code 11. Handlers should
    /// finish (or roll back) before it, but are never cancelled.
    pub deadline: Instant,
}

impl Request {
    /// Validates a body received at `now`. The deadline is `now` plus the smaller of
    /// `max_timeout` and [`answer_within`] of the shim's own deadline (the config's
    /// `timeoutSeconds`, default 120 s), so the runtime sees the agent's "try again later"
    /// rather than the shim giving up first.
    pub fn from_body(
        body: RequestBody,
        now: Instant,
        max_timeout: Duration,
    ) -> Result<Request, CniError> {
        body.check_protocol()?;
        let command: Command = match body.command.as_deref() {
            None | Some("") => return Err(CniError::invalid_env("CNI_COMMAND is missing")),
            Some(c) => parse_command(c)?,
        };
        let raw_config = body.config.ok_or_else(|| {
            CniError::invalid_config(
                "request has no network config (the runtime passes it on the plugin's stdin)",
            )
        })?;
        let config = NetConf::parse(&raw_config)?;
        let version = config.cni_version;
        match command {
            Command::Check if !version.supports_check() => {
                return Err(CniError::incompatible_version(format!(
                    "CHECK needs cniVersion 0.4.0 or later; the network config asks for {version}"
                )))
            }
            Command::Gc | Command::Status if !version.supports_gc_and_status() => {
                return Err(CniError::incompatible_version(format!(
                    "{command} needs cniVersion 1.1.0 or later; the network config asks for {version}"
                )))
            }
            _ => {}
        }

        let per_attachment = command.is_per_attachment();
        let container_id = match body.container_id.filter(|c| !c.is_empty()) {
            None if per_attachment => {
                return Err(CniError::invalid_env(format!(
                    "CNI_CONTAINERID is missing ({command} needs the container id)"
                )))
            }
            None => String::new(),
            Some(c) if is_container_id(&c) => c,
            Some(c) => {
                return Err(CniError::invalid_env(format!(
                    "CNI_CONTAINERID {c:?} is not a valid container id ({CONTAINER_ID_RULE})"
                )))
            }
        };
        let ifname = match body.ifname.filter(|i| !i.is_empty()) {
            None if per_attachment => {
                return Err(CniError::invalid_env(format!(
                    "CNI_IFNAME is missing ({command} needs the interface name)"
                )))
            }
            None => String::new(),
            Some(i) => {
                check_ifname(&i)
                    .map_err(|why| CniError::invalid_env(format!("CNI_IFNAME {i:?} {why}")))?;
                i
            }
        };
        let netns = match body.netns.filter(|n| !n.is_empty()) {
            None if matches!(command, Command::Add | Command::Check) => {
                return Err(CniError::invalid_env(format!(
                    "CNI_NETNS is missing ({command} needs the path of the container's network namespace)"
                )))
            }
            None => None,
            Some(n) => {
                if !n.starts_with('/') {
                    return Err(CniError::invalid_env(format!(
                        "CNI_NETNS {n:?} is not an absolute path"
                    )));
                }
                if n.contains('\0') || n.len() > MAX_NETNS_PATH_LEN {
                    return Err(CniError::invalid_env(format!(
                        "CNI_NETNS {n:?} is not a usable path (NUL byte or longer than {MAX_NETNS_PATH_LEN} bytes)"
                    )));
                }
                Some(PathBuf::from(n))
            }
        };
        let args = CniArgs::parse(body.args.as_deref().unwrap_or(""))?;
        let path = body
            .path
            .as_deref()
            .unwrap_or("")
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        let shim = config
            .timeout
            .unwrap_or(Duration::from_secs(DEFAULT_SHIM_TIMEOUT_SECS));
        let timeout = max_timeout.min(answer_within(shim));
        Ok(Request {
            command,
            container_id,
            netns,
            ifname,
            args,
            path,
            config,
            raw_config,
            deadline: now + timeout,
        })
    }

    /// The CNI version results and errors are rendered in.
    pub fn version(&self) -> CniVersion {
        self.config.cni_version
    }

    /// The pod's namespace: `K8S_POD_NAMESPACE`, else the config's `namespace`, else
    /// [`DEFAULT_NAMESPACE`].
    pub fn pod_namespace(&self) -> &str {
        self.args
            .pod_namespace()
            .or(self.config.namespace.as_deref())
            .unwrap_or(DEFAULT_NAMESPACE)
    }
}

/// NSFS_MAGIC from `linux/magic.h`: the filesystem type of network namespace files.
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Checks that `path` exists and is a namespace file (on nsfs: a `/proc/<pid>/ns/net` link or
/// an `ip netns` bind mount). Code 4 when not; the message names the path.
pub async fn check_netns(path: &Path) -> Result<(), CniError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || check_netns_blocking(&owned))
        .await
        .map_err(|e| CniError::internal(format!("netns check for {path:?} failed: {e}")))?
}

fn check_netns_blocking(path: &Path) -> Result<(), CniError> {
    use std::os::unix::ffi::OsStrExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            CniError::invalid_env(format!("CNI_NETNS {path:?} does not exist"))
        } else {
            CniError::invalid_env(format!("CNI_NETNS {path:?} cannot be read: {e}"))
        }
    })?;
    if meta.is_dir() {
        return Err(CniError::invalid_env(format!(
            "CNI_NETNS {path:?} is a directory, not a network namespace"
        )));
    }
    let mut c_path = path.as_os_str().as_bytes().to_vec();
    c_path.push(0);
    // SAFETY: `statfs` is plain old data, for which all zero bytes are a valid value.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `buf` is a valid out-pointer.
    let rc = unsafe { libc::statfs(c_path.as_ptr().cast(), &mut buf) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(CniError::invalid_env(format!(
            "CNI_NETNS {path:?} cannot be read: {e}"
        )));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    let f_type = buf.f_type as i64;
    if f_type != NSFS_MAGIC {
        return Err(CniError::invalid_env(format!(
            "CNI_NETNS {path:?} is not a network namespace (not on nsfs; a deleted namespace leaves such a file)"
        )));
    }
    check_netns_type(path)?;
    // The node's own namespaces, by identity (device and inode), not by path: a bind mount or
    // a /proc/<pid>/ns/net link of the node's namespace must not become a pod's.
    use std::os::unix::fs::MetadataExt;
    let id = (meta.dev(), meta.ino());
    for (own, what) in [
        ("/proc/self/ns/net", "the agent's own network namespace"),
        ("/proc/1/ns/net", "the host's network namespace"),
    ] {
        if std::fs::metadata(own).is_ok_and(|m| (m.dev(), m.ino()) == id) {
            return Err(CniError::invalid_env(format!(
                "CNI_NETNS {path:?} is {what}: a pod needs a network namespace of its own; nothing was changed"
            )));
        }
    }
    Ok(())
}

/// `NS_GET_NSTYPE` from `linux/nsfs.h`: the `CLONE_NEW*` type of a namespace file.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Checks that a namespace file is a *network* namespace (nsfs also holds mount, pid, user...
/// namespaces: `/proc/<pid>/ns/mnt` passes the file-system check).
fn check_netns_type(path: &Path) -> Result<(), CniError> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)
        .map_err(|e| CniError::invalid_env(format!("CNI_NETNS {path:?} cannot be opened: {e}")))?;
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the descriptor, which is open.
    let t = unsafe { libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE as _) };
    // Kernels before 4.11 do not know the ioctl: the nsfs check above is all they allow.
    if t >= 0 && t != libc::CLONE_NEWNET {
        return Err(CniError::invalid_env(format!(
            "CNI_NETNS {path:?} is a namespace file but not a network namespace (another kind of namespace)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(command: &str, version: &str) -> RequestBody {
        RequestBody {
            protocol: Some(cni_proto::PROTOCOL),
            command: Some(command.into()),
            container_id: Some("0123abcd".into()),
            netns: Some("/run/netns/p1".into()),
            ifname: Some("eth0".into()),
            args: Some("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=p".into()),
            path: Some("/opt/cni/bin::/usr/lib/cni".into()),
            config: Some(json!({"cniVersion": version, "name": "sdn", "type": "sdn-cni"})),
        }
    }

    fn validate(b: RequestBody) -> Result<Request, CniError> {
        Request::from_body(b, Instant::now(), Duration::from_secs(120))
    }

    fn err(b: RequestBody) -> CniError {
        validate(b).unwrap_err()
    }

    #[test]
    fn valid_add() {
        let now = Instant::now();
        let r = Request::from_body(body("ADD", "1.0.0"), now, Duration::from_secs(120)).unwrap();
        assert_eq!(r.command, Command::Add);
        assert_eq!(r.container_id, "0123abcd");
        assert_eq!(r.netns.as_deref(), Some(Path::new("/run/netns/p1")));
        assert_eq!(r.ifname, "eth0");
        assert_eq!(r.args.pod_name(), Some("p"));
        assert_eq!(r.pod_namespace(), "ns1");
        assert_eq!(
            r.path,
            vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
        );
        assert_eq!(r.version(), CniVersion::V1_0_0);
        assert_eq!(r.raw_config["name"], "sdn");
        assert_eq!(r.deadline, now + Duration::from_secs(119));
    }

    #[test]
    fn deadline_answers_before_the_shim_gives_up() {
        assert_eq!(
            answer_within(Duration::from_secs(120)),
            Duration::from_secs(119)
        );
        assert_eq!(
            answer_within(Duration::from_secs(5)),
            Duration::from_millis(4500)
        );
        assert_eq!(
            answer_within(Duration::from_secs(1)),
            Duration::from_millis(900)
        );
        let now = Instant::now();
        // No timeoutSeconds: the shim's default of 120 s.
        let r = Request::from_body(body("ADD", "1.0.0"), now, Duration::from_secs(300)).unwrap();
        assert_eq!(r.deadline, now + Duration::from_secs(119));
        let mut b = body("ADD", "1.0.0");
        b.config.as_mut().unwrap()["timeoutSeconds"] = json!(5);
        let r = Request::from_body(b.clone(), now, Duration::from_secs(120)).unwrap();
        assert_eq!(r.deadline, now + Duration::from_millis(4500));
        // ...and never longer than the server's own limit.
        let r = Request::from_body(b, now, Duration::from_secs(2)).unwrap();
        assert_eq!(r.deadline, now + Duration::from_secs(2));
    }

    #[test]
    fn pod_namespace_falls_back_to_config_then_default() {
        let mut b = body("ADD", "1.0.0");
        b.args = Some("IgnoreUnknown=1;K8S_POD_NAME=p".into());
        let r = validate(b.clone()).unwrap();
        assert_eq!(r.pod_namespace(), "default");
        b.config.as_mut().unwrap()["namespace"] = json!("tenant-a");
        let r = validate(b).unwrap();
        assert_eq!(r.pod_namespace(), "tenant-a");
    }

    #[test]
    fn the_nodes_own_namespaces_and_other_namespace_kinds_are_refused() {
        let e = check_netns_blocking(Path::new("/proc/self/ns/net")).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(
            e.msg.contains(
                "is the agent's own network namespace: a pod needs a network namespace of its own"
            ),
            "{}",
            e.msg
        );
        // PID 1's: the host's (or, when the test runs in the host's namespace, the agent's own);
        // in a sandbox without access to PID 1 it cannot even be read. Refused in every case.
        let e = check_netns_blocking(Path::new("/proc/1/ns/net")).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(
            e.msg.contains("network namespace: a pod needs") || e.msg.contains("cannot be read"),
            "{}",
            e.msg
        );
        let e = check_netns_blocking(Path::new("/proc/self/ns/mnt")).unwrap_err();
        assert!(e.msg.contains("not a network namespace"), "{}", e.msg);
    }

    #[test]
    fn del_accepts_missing_netns() {
        for netns in [None, Some(String::new())] {
            let mut b = body("DEL", "0.3.1");
            b.netns = netns;
            let r = validate(b).unwrap();
            assert_eq!(r.netns, None);
        }
        let mut b = body("DEL", "0.3.1");
        b.netns = Some("run/netns/x".into());
        assert_eq!(
            err(b).msg,
            "CNI_NETNS \"run/netns/x\" is not an absolute path"
        );
    }

    #[test]
    fn a_shim_of_another_protocol_is_refused_and_an_old_one_accepted() {
        let mut b = body("ADD", "1.0.0");
        b.protocol = Some(cni_proto::PROTOCOL + 1);
        let e = err(b);
        assert_eq!(e.code, 1);
        assert!(e.details.contains("install the sdn-cni binary"), "{e}");
        let mut b = body("ADD", "1.0.0");
        b.protocol = None;
        assert!(validate(b).is_ok());
    }

    #[test]
    fn gc_and_status_need_no_attachment() {
        for cmd in ["GC", "STATUS"] {
            let b = RequestBody {
                command: Some(cmd.into()),
                config: Some(json!({"cniVersion": "1.1.0", "name": "sdn", "type": "sdn-cni"})),
                ..Default::default()
            };
            let r = validate(b).unwrap();
            assert_eq!(r.container_id, "");
            assert_eq!(r.ifname, "");
            assert_eq!(r.netns, None);
        }
    }

    #[test]
    fn command_errors() {
        let mut b = body("ADD", "1.0.0");
        b.command = None;
        let e = err(b);
        assert_eq!((e.code, e.msg.as_str()), (4, "CNI_COMMAND is missing"));
        let e = err(body("VERSION", "1.0.0"));
        assert_eq!(e.code, 4);
        let e = err(body("CHECK", "0.3.1"));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                1,
                "CHECK needs cniVersion 0.4.0 or later; the network config asks for 0.3.1"
            )
        );
        assert!(validate(body("CHECK", "0.4.0")).is_ok());
        let e = err(body("GC", "1.0.0"));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                1,
                "GC needs cniVersion 1.1.0 or later; the network config asks for 1.0.0"
            )
        );
        let e = err(body("STATUS", "0.4.0"));
        assert_eq!(e.code, 1);
        assert!(e.msg.starts_with("STATUS needs cniVersion 1.1.0"));
    }

    #[test]
    fn environment_errors_name_field_and_value() {
        type Modify = Box<dyn Fn(&mut RequestBody)>;
        let cases: Vec<(Modify, &str)> = vec![
            (Box::new(|b| b.container_id = None), "CNI_CONTAINERID is missing (ADD needs the container id)"),
            (
                Box::new(|b| b.container_id = Some("abc/def".into())),
                "CNI_CONTAINERID \"abc/def\" is not a valid container id (1 to 256 characters: a letter or digit, then letters, digits, '_', '.' or '-')",
            ),
            (Box::new(|b| b.ifname = None), "CNI_IFNAME is missing (ADD needs the interface name)"),
            (
                Box::new(|b| b.ifname = Some("averyveryverylongname".into())),
                "CNI_IFNAME \"averyveryverylongname\" is 21 bytes long; the kernel allows at most 15",
            ),
            (
                Box::new(|b| b.ifname = Some("..".into())),
                "CNI_IFNAME \"..\" is not a valid interface name ('.' and '..' are reserved)",
            ),
            (
                Box::new(|b| b.netns = None),
                "CNI_NETNS is missing (ADD needs the path of the container's network namespace)",
            ),
            (
                Box::new(|b| b.netns = Some("netns/x".into())),
                "CNI_NETNS \"netns/x\" is not an absolute path",
            ),
            (
                Box::new(|b| b.args = Some("FOO".into())),
                "CNI_ARGS segment 1 \"FOO\" has no '='",
            ),
        ];
        for (modify, msg) in cases {
            let mut b = body("ADD", "1.0.0");
            modify(&mut b);
            let e = err(b);
            assert_eq!(e.code, 4, "{msg}");
            assert_eq!(e.msg, msg);
        }
    }

    #[test]
    fn config_errors() {
        let mut b = body("ADD", "1.0.0");
        b.config = None;
        let e = err(b);
        assert_eq!(e.code, 7);
        assert!(e.msg.starts_with("request has no network config"));
        let e = err(body("ADD", "9.9.9"));
        assert_eq!(e.code, 1);
    }
}
