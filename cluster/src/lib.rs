//! The cluster and the node's settings as every program of a node reads them: the node agent,
//! the cluster controller and `sdnctl` link this crate and nothing of each other.
//!
//! - [`config`]: the node's settings (file, flags, `SDN_*` variables), validated as a whole;
//!   they name the cluster networks, the state directory and the sockets all three programs use.
//! - [`yaml`]: how YAML is read and written.
//! - [`ports`]: what a pod port's `external_ids` record about its tenant (read by sdnctl too).
//! - [`tenants`]: sdnctl's standalone tenant administration (state directory edits under a lock).
//! - [`audit`]: which namespaces log their isolation decisions (the `k8s.ovn.org/acl-logging`
//!   annotation).
//!
//! The rest is the cluster state itself: the OpenShift `network.openshift.io/v1` objects a node
//! needs (`ClusterNetwork`, `HostSubnet`, `NetNamespace`, `EgressNetworkPolicy`) and the
//! Kubernetes objects it reads (`Namespace`, `Pod`, `NetworkPolicy`), where they come from, and
//! how changes reach the agent.
//!
//! - [`types`]: the wire shapes (fields at the top level, OpenShift's spelling) and the parser.
//! - [`validate`]: single-object checks with errors that name the field and the value.
//! - [`state`]: [`ClusterState`], lookups, cross-object checks, node subnet allocation.
//! - [`standalone`]: [`StandaloneSource`], a watched directory of YAML/JSON files, its atomic
//!   writer and [`seed`] for a node's first start.
//! - [`kube`]: [`kube::KubeSource`], kube-rs watchers on the API server (Kubernetes mode).
//! - [`files`]: how every file a node's programs write is written (atomically, fsynced where it
//!   must survive the machine), and the test hook that kills a writer at each step.
//! - [`crd`]: the CustomResourceDefinitions of the kinds, generated from the types (the types
//!   themselves implement `kube::Resource`, so kube-rs clients and watchers take them as they are).
//!
//! The seam is [`ClusterSource`]: anything that can hand out a `watch` receiver of the latest
//! [`ClusterState`]. The standalone directory is one implementation, the Kubernetes source (kube-rs
//! watchers) the other, so nothing downstream knows where the objects come from. Writing objects (creating a tenant, allocating a subnet) is deliberately not on the
//! trait yet: in standalone mode the agent and `sdnctl` write files, in Kubernetes mode a
//! controller writes through the API; the trait is for reading.

pub mod audit;
pub mod cnp;
pub mod config;
pub mod crd;
pub mod dual_stack;
pub mod egress6;
pub mod files;
mod kept;
pub mod kube;
pub mod netpol;
pub mod nodes;
pub mod pods;
pub mod ports;
pub mod reflected;
mod slim;
pub mod standalone;
pub mod state;
pub mod tenants;
pub mod types;
pub mod validate;
pub mod yaml;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

pub use standalone::{
    broken_net_namespace, seed, ClusterNetworkSpec, StandaloneSource, DEFAULT_POLL_INTERVAL,
    MAX_STATE_FILE_BYTES,
};
pub use state::{ClusterState, PodInfo};
pub use types::{
    ClusterNetwork, ClusterNetworkEntry, ClusterObject, EgressNetworkPolicy,
    EgressNetworkPolicyPeer, EgressNetworkPolicyRule, EgressNetworkPolicySpec, EgressRuleType,
    HostSubnet, Kind, NetNamespace, ObjectMeta, ParseError,
};
pub use validate::ValidationError;

/// A source of cluster state.
///
/// Implementations publish a complete [`ClusterState`] after every change (never a partial one)
/// and only when it actually differs from the previous one. Receivers see the latest value;
/// intermediate versions may be skipped, so consumers must reconcile against the whole state
/// rather than replay events.
pub trait ClusterSource: Send + Sync + std::fmt::Debug {
    /// A receiver of the state: its current value is the latest state, and `changed()` wakes on
    /// every later change. Cheap; call it once per consumer.
    fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>>;

    /// The latest state.
    fn current(&self) -> Arc<ClusterState> {
        self.subscribe().borrow().clone()
    }

    /// What keeps the source from seeing the whole cluster now, one line each (files that do
    /// not parse or conflict, watches that fail), for `/readyz`, `sdnctl status` and the
    /// metrics. Empty when the state is complete.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Errors of the cluster state sources. Clonable so a source can keep and report the current
/// problems (`StandaloneSource::errors`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    /// A file system operation failed.
    #[error("{path}: cannot {op}: {source}", path = path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was attempted (`read`, `write`, `rename`, `list`...).
        op: &'static str,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The configuration asks for something this version does not do.
    #[error("{0}")]
    Unsupported(String),
    /// A file is larger than any cluster object file can be; it is not read.
    #[error("{file}: {size} bytes, over the {max} bytes a state file may have; it is not read (a stray file? remove it)", file = file.display())]
    TooLarge {
        /// The file.
        file: PathBuf,
        /// Its size.
        size: u64,
        /// The limit ([`standalone::MAX_STATE_FILE_BYTES`]).
        max: u64,
    },
    /// A file does not parse.
    #[error("{file}: {source}", file = file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// What is wrong, with document and field.
        #[source]
        source: Box<ParseError>,
    },
    /// An object has a bad field.
    #[error("{file}: {kind} {name:?}: {source}", file = file.display())]
    Invalid {
        /// The file holding the object (or the file that would be written).
        file: PathBuf,
        /// The object's kind.
        kind: Kind,
        /// The object's name.
        name: String,
        /// The field and what is wrong with it.
        #[source]
        source: Box<ValidationError>,
    },
    /// Two files (or one file twice) define the same object.
    #[error("{kind} {name:?} is defined in both {first} and {second}, the same in each: the one in {first} is used; remove the other", first = first.display(), second = second.display())]
    Duplicate {
        /// The object's kind.
        kind: Kind,
        /// The object's name.
        name: String,
        /// The file whose object is used.
        first: PathBuf,
        /// The file whose object is ignored.
        second: PathBuf,
    },
    /// Two or more files define the same object differently. The object in effect does not
    /// change: the agent keeps the one it had (`kept`), or leaves the object out while it never
    /// had one.
    #[error("{kind} {name:?} is defined differently in {}: {}; remove all but one", definitions.iter().map(|(f, what)| format!("{} ({what})", f.display())).collect::<Vec<_>>().join(" and "), kept.as_ref().map(|k| format!("keeping the one in effect ({k})")).unwrap_or_else(|| "none of them is used".into()))]
    Conflict {
        /// The object's kind.
        kind: Kind,
        /// The object's name.
        name: String,
        /// Every file defining it, with what that file says (`netid 11`).
        definitions: Vec<(PathBuf, String)>,
        /// What stays in effect, when the object was in effect before the conflict.
        kept: Option<String>,
    },
    /// The ClusterNetwork on disk disagrees with the agent's configuration.
    #[error("{file}: ClusterNetwork \"default\" has {field} {in_file} but the agent is configured with {in_config}: make the file and the configuration agree", file = file.display())]
    ConfigMismatch {
        /// The file holding the ClusterNetwork.
        file: PathBuf,
        /// The field that differs.
        field: &'static str,
        /// Its value in the file.
        in_file: String,
        /// Its value in the configuration.
        in_config: String,
    },
    /// This node's HostSubnet disagrees with the configuration and is not in a file the agent
    /// may rewrite.
    #[error("{file}: HostSubnet {node:?} has hostIP {in_file} but the agent is configured with node IP {in_config}: fix the file (or move the object to {own})", file = file.display(), own = own.display())]
    HostIpMismatch {
        /// The file holding the HostSubnet.
        file: PathBuf,
        /// The node.
        node: String,
        /// hostIP in the file.
        in_file: String,
        /// The configured node IP.
        in_config: String,
        /// The file the agent would rewrite.
        own: PathBuf,
    },
    /// An object must change to match the configuration, but it lives in a file the agent does
    /// not rewrite (a file an operator wrote, maybe holding other objects).
    #[error("{file}: {what}; the agent rewrites only {own}: make the change there yourself, or move the object to {own}", file = file.display(), own = own.display())]
    NotOwnFile {
        /// The file holding the object.
        file: PathBuf,
        /// What must change.
        what: String,
        /// The file the agent would rewrite.
        own: PathBuf,
    },
    /// No node subnet is left.
    #[error("no free node subnet for node {node:?} in the cluster networks ({networks}): every subnet is taken by a HostSubnet; delete the HostSubnets of departed nodes or add a cluster network")]
    SubnetsExhausted {
        /// The node that needed one.
        node: String,
        /// The cluster networks searched.
        networks: String,
    },
    /// The ClusterNetwork or this node's HostSubnet cannot be read from the state directory, so
    /// seeding would work from a wrong picture (it could write a second one).
    #[error("{dir}: cannot start: {missing} cannot be read while {} file problem(s) remain (it may be in a file that does not parse); first: {}", errors.len(), errors.first().map(ToString::to_string).unwrap_or_default(), dir = dir.display())]
    Broken {
        /// The directory.
        dir: PathBuf,
        /// What is missing: `the ClusterNetwork "default"`, `HostSubnet "node-1"`.
        missing: String,
        /// Every problem found.
        errors: Vec<ClusterError>,
    },
    /// An object could not be rendered as YAML.
    #[error("cannot render {what} as YAML: {message}")]
    Render {
        /// The object.
        what: String,
        /// The serializer's message.
        message: String,
    },
    /// Starting a watcher needs a tokio runtime.
    #[error("the standalone source of {dir} must be started inside a tokio runtime", dir = dir.display())]
    NoRuntime {
        /// The directory.
        dir: PathBuf,
    },
}

impl ClusterError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, e: std::io::Error) -> Self {
        ClusterError::Io {
            path: path.into(),
            op,
            source: Arc::new(e),
        }
    }
}

/// Locks a std mutex, taking the data over from a thread that panicked while holding it (the
/// mutexes here guard plain data that stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An error and its causes, `outer: inner: root` (each level once), for a log line or a
/// record: the programs' typed errors keep their causes as `source`.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        cause = c.source();
    }
    text
}
