//! `sdnctl audit-logging NAME`: a standalone namespace's audit logging, kept where standalone
//! mode keeps it (the `k8s.ovn.org/acl-logging` annotation of the NetNamespace file), written
//! under the directory's lock like every tenant change.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::dir::{check_own_file, open_locked};
use super::{check_name, net_namespace_of, write_annotation, TenantError};
use crate::audit::{parse_acl_logging, AclLogging, ACL_LOGGING_ANNOTATION};
use crate::ClusterError;

/// What `sdnctl audit-logging` did.
#[derive(Debug, Serialize)]
pub struct AuditLoggingChange {
    /// The namespace.
    pub namespace: String,
    /// Its VNID.
    pub vnid: u32,
    /// The annotation now (`None`: removed, logging off).
    pub annotation: Option<String>,
    /// Whether the file changed.
    pub changed: bool,
    /// The file written.
    pub file: Option<PathBuf>,
    /// Problems of the state directory that did not stop the command.
    #[serde(skip)]
    pub problems: Vec<ClusterError>,
}

impl fmt::Display for AuditLoggingChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self
            .annotation
            .as_deref()
            .map(|a| parse_acl_logging(a).logging)
            .unwrap_or_default();
        let sev =
            |s: Option<crate::audit::Severity>| s.map_or("off".to_string(), |s| s.to_string());
        write!(
            f,
            "namespace {}: audit logging deny {}, allow {}{}",
            self.namespace,
            sev(l.deny),
            sev(l.allow),
            if self.changed { "" } else { " (unchanged)" }
        )
    }
}

/// Sets NAME's audit logging (`logging` all off removes the annotation), keeping everything
/// else of its NetNamespace.
pub fn set_audit_logging(
    dir: &Path,
    name: &str,
    logging: AclLogging,
) -> Result<AuditLoggingChange, TenantError> {
    check_name(name)?;
    let (_lock, snap) = open_locked(dir)?;
    let mut nn = net_namespace_of(&snap, dir, name)?;
    let want = logging.any().then(|| logging.to_annotation());
    let had = crate::audit::annotation(&nn.metadata);
    let changed = had != want;
    let mut file = None;
    if changed {
        check_own_file(dir, name, &snap.problems)?;
        file = Some(write_annotation(
            dir,
            &mut nn,
            ACL_LOGGING_ANNOTATION,
            want.clone(),
        )?);
    }
    Ok(AuditLoggingChange {
        namespace: name.to_string(),
        vnid: nn.net_id,
        annotation: want,
        changed,
        file,
        problems: snap.problems,
    })
}
