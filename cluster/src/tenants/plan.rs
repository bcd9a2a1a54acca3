//! The plan of a tenant command (pure): the change it makes to the NetNamespaces, or the refusal,
//! with the message sdnctl prints.

use crate::standalone::new_uid;
use crate::validate::dns1123_label;
use crate::{ClusterError, ClusterState, Kind, NetNamespace};
use multitenant::admin::{self, PodsOfNamespace, Refusal};
use multitenant::{Tenancy, Vnid};
use serde::Serialize;
use std::fmt;
use std::fs;
use std::path::Path;

use super::*;

/// One namespace's change, as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The namespace.
    pub namespace: String,
    /// The VNID before (`None`: created).
    pub from: Option<u32>,
    /// The VNID after (`None`: deleted).
    pub to: Option<u32>,
    /// What happened, e.g. `joined tenant-a`, `isolated`, `already global`.
    pub reason: String,
    /// Whether the state directory was changed.
    pub changed: bool,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = &self.namespace;
        match (self.from, self.to) {
            (None, Some(to)) => write!(f, "{ns}: created with VNID {to} ({})", self.reason),
            (Some(from), None) => write!(f, "{ns}: deleted, was VNID {from} ({})", self.reason),
            (Some(from), Some(to)) if !self.changed => {
                debug_assert_eq!(from, to);
                write!(f, "{ns}: VNID {to}, unchanged ({})", self.reason)
            }
            (Some(from), Some(to)) => write!(f, "{ns}: VNID {from} -> {to} ({})", self.reason),
            (None, None) => write!(f, "{ns}: {}", self.reason),
        }
    }
}

/// What a command will do to the state directory ([`plan`]'s result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The change, as reported.
    pub change: Change,
    /// The NetNamespace to write, if any.
    pub write: Option<NetNamespace>,
    /// The NetNamespace to delete, if any.
    pub delete: Option<String>,
    /// A VNID freshly allocated.
    pub allocated: Option<u32>,
    /// Where the allocation walk stands after this command, when it moved: the VNID allocated,
    /// else the largest tenant VNID in use before the command (so one released by this very
    /// command, e.g. the old VNID of a namespace that joined another, is not handed out next).
    pub remember: Option<u32>,
}

/// Checks that `name` is a namespace name (a DNS-1123 label).
pub fn check_name(name: &str) -> Result<(), TenantError> {
    dns1123_label(name).map_err(|reason| TenantError::BadName {
        name: name.to_string(),
        reason,
    })
}

/// Decides what `cmd` does to `state` (pure). `pods` are the local pods; `last` the last VNID
/// handed out (the allocation walk resumes after it). `dir` only names the directory in errors.
pub fn plan_change(
    state: &ClusterState,
    cmd: &TenantCommand,
    pods: &PodCounts,
    last: Option<u32>,
    dir: &Path,
) -> Result<Plan, TenantError> {
    let name = cmd.name();
    check_name(name)?;
    if let TenantCommand::Join { other, .. } = cmd {
        check_name(other)?;
    }
    let mut tenancy = tenancy_of(state, cmd, pods, last)?;
    let local = match pods {
        PodCounts::Known(p) => PodsOfNamespace::Known(p.count(name)),
        PodCounts::Unknown(reason) => PodsOfNamespace::Unknown(reason),
    };
    let d = admin::decide(&mut tenancy, cmd, local).map_err(|r| refused(r, name, dir))?;
    let change = Change {
        namespace: name.to_string(),
        from: d.from.map(Vnid::id),
        to: d.to.map(Vnid::id),
        reason: d.reason,
        changed: d.changed,
    };
    let allocated = d.allocated.map(Vnid::id);
    let to = d.to.map(Vnid::id);
    let mut planned = match (cmd, to) {
        (TenantCommand::Create { .. }, Some(v)) => {
            let mut nn = NetNamespace::new(name, v);
            nn.metadata.uid = Some(new_uid());
            Plan {
                change,
                write: Some(nn),
                delete: None,
                allocated,
                remember: None,
            }
        }
        (TenantCommand::Delete { .. }, _) | (_, None) => Plan {
            change,
            write: None,
            delete: Some(name.to_string()),
            allocated: None,
            remember: None,
        },
        (_, Some(v)) => {
            // The existing object (uid, labels, egress IPs kept) with a new netid.
            let write = change.changed.then(|| {
                let mut nn = state
                    .net_namespaces
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| NetNamespace::new(name, v));
                nn.net_id = v;
                nn
            });
            Plan {
                change,
                write,
                delete: None,
                allocated,
                remember: None,
            }
        }
    };
    let tenant_range = multitenant::FIRST_TENANT_VNID..=Vnid::LAST_TENANT;
    let high = state
        .net_namespaces
        .values()
        .map(|n| n.net_id)
        .filter(|v| tenant_range.contains(v))
        .max();
    planned.remember = planned
        .allocated
        .or_else(|| high.max(last))
        .filter(|v| Some(*v) != last);
    Ok(planned)
}

/// The tenancy of `state` as `cmd` sees it: its global namespaces, the VNIDs in use (those of
/// local pods too, for the commands that allocate), the allocation walk resumed after `last`.
fn tenancy_of(
    state: &ClusterState,
    cmd: &TenantCommand,
    pods: &PodCounts,
    last: Option<u32>,
) -> Result<Tenancy, TenantError> {
    let name = cmd.name();
    let globals: Vec<&str> = match cmd {
        TenantCommand::Create { global: true, .. } => vec![name],
        _ => Vec::new(),
    };
    let mut tenancy = Tenancy::new(globals);
    let assignments: Vec<(String, u32)> = state
        .net_namespaces
        .values()
        .map(|n| (n.name().to_string(), n.net_id))
        .collect();
    // Validated NetNamespaces have 24-bit netids, so this only fails on a hand-built state.
    let load = |t: &mut Tenancy, a: Vec<(String, u32)>| {
        t.load(a)
            .map_err(|e| TenantError::InvalidState(e.to_string()))
    };
    // Only tenant VNIDs matter to the walk (loading 2^24-1, the VNID of pods of an unknown
    // tenant, would restart it from 10).
    let tenant_range = multitenant::FIRST_TENANT_VNID..=Vnid::LAST_TENANT;
    load(&mut tenancy, assignments)?;
    // Resume the walk after the last VNID handed out.
    if let Some(last) = last.filter(|v| tenant_range.contains(v)) {
        tenancy.resume_after(last);
    }
    // VNIDs on local pod ports stay in use. Only the allocating commands read pods; holding also
    // moves the walk past the largest, which is harmless.
    if let PodCounts::Known(p) = pods {
        if cmd.needs_pods() {
            tenancy.hold(
                p.vnids
                    .iter()
                    .filter(|v| tenant_range.contains(*v))
                    .filter_map(|v| Vnid::new(*v)),
            );
        }
    }
    Ok(tenancy)
}

/// A refusal of the tenancy rules as this crate's error, naming the namespace and directory.
fn refused(r: Refusal, name: &str, dir: &Path) -> TenantError {
    match r {
        Refusal::Exists(v) => TenantError::Exists {
            name: name.to_string(),
            vnid: v.id(),
        },
        Refusal::VnidTaken { vnid, holders } => TenantError::VnidTaken {
            name: name.to_string(),
            vnid,
            holders: holders.join(", "),
        },
        Refusal::Unknown(n) => TenantError::Unknown {
            name: n,
            dir: dir.to_path_buf(),
        },
        Refusal::CannotIsolateDefault => TenantError::CannotIsolateDefault,
        Refusal::CannotDeleteDefault => TenantError::CannotDeleteDefault,
        Refusal::JoinSelf => TenantError::JoinSelf {
            name: name.to_string(),
        },
        Refusal::HasPods { pods, vnid } => TenantError::HasPods {
            name: name.to_string(),
            pods,
            vnid: vnid.id(),
        },
        Refusal::PodsUnknown(reason) => TenantError::PodsUnknown {
            name: name.to_string(),
            reason,
        },
        Refusal::Exhausted(e) => TenantError::Exhausted(e),
    }
}

/// Whether a problem of the state directory could hide NetNamespaces (so the VNIDs in use are
/// not all known): a file that cannot be read, or a broken file that mentions NetNamespace.
/// Problems that only concern other kinds (a HostSubnet outside the cluster network, a file of
/// HostSubnets that does not parse) do not block tenant commands.
pub fn hides_net_namespaces(problem: &ClusterError) -> bool {
    let file = match problem {
        ClusterError::Io { path, .. } => return path.is_file() || !path.exists(),
        ClusterError::Parse { file, .. } => file,
        ClusterError::Conflict { kind, .. } => return *kind == Kind::NetNamespace,
        ClusterError::Invalid { kind, file, .. } => {
            if *kind == Kind::NetNamespace {
                return true;
            }
            file
        }
        _ => return false,
    };
    match fs::read_to_string(file) {
        Ok(text) => text.to_ascii_lowercase().contains("netnamespace"),
        Err(_) => true,
    }
}
