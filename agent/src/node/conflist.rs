//! The CNI network config files: the main network's `10-<network>.conflist` (written when the
//! node serves: it is how runtimes learn the node is ready, and it stays while the agent
//! restarts), in standalone mode a `20-<network>-<namespace>.conflist` per tenant, and their
//! removal at node teardown.

use crate::lock;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::error::{Result, Step};

use super::*;

/// Node teardown: removes the CNI network config files an agent with network `name` writes in
/// `dir` (`10-<name>.conflist` and the tenant networks' `20-<name>-<namespace>.conflist`).
/// Returns the files removed.
pub fn remove_cni_configs(dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_step(|| format!("listing {}", dir.display())),
    };
    let main = format!("10-{name}.conflist");
    let tenant = format!("20-{name}-");
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file == main || (file.starts_with(&tenant) && file.ends_with(".conflist")) {
            let path = entry.path();
            std::fs::remove_file(&path).with_step(|| format!("removing {}", path.display()))?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

/// Removes a CNI network config file (missing is fine).
pub(super) fn remove_conf(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(file = %path.display(), error = %e, "removing a CNI config");
        }
    }
}

/// Writes a CNI network config file `name` (atomically and durably, [`cluster::files`]); with `namespace`,
/// the plugin puts every container of that network into that namespace (tenant).
pub(super) fn write_conf(
    path: &Path,
    cfg: &Config,
    name: &str,
    namespace: Option<&str>,
) -> Result<()> {
    let mut plugin = serde_json::json!({
        "type": "sdn-cni",
        "socket": cfg.cni_socket,
        "capabilities": {"portMappings": true, "bandwidth": true},
    });
    if let Some(ns) = namespace {
        plugin["namespace"] = ns.into();
    }
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [plugin],
    });
    let bytes = serde_json::to_vec_pretty(&conf).step("encoding the CNI config")?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let dir = path.parent().step("CNI conf path has no directory")?;
    std::fs::create_dir_all(dir).with_step(|| format!("creating {}", dir.display()))?;
    // A runtime reads it at boot: whole, and on disk. (Temporary files of a write cut off by
    // a kill go first; runtimes ignore them, their names end in neither .conf nor .conflist.)
    cluster::files::remove_stale_temps(dir);
    cluster::files::write(path, &bytes, 0o644, cluster::files::Durability::PowerLoss)
        .with_step(|| format!("writing {}", path.display()))
}

impl Daemon {
    /// Standalone mode: one CNI network per tenant namespace, so a runtime without Kubernetes
    /// (podman) can put a container into a tenant: `<confdir>/20-<network>-<namespace>.conflist`
    /// names network `<network>-<namespace>` and sets the plugin's `namespace`. Written for
    /// every NetNamespace except `default` (which is the main network), removed when the
    /// NetNamespace goes (also while the agent was down); they stay while the agent restarts.
    pub(super) fn sync_tenant_networks(&self) {
        if !matches!(self.config.cluster_state, ClusterStateSource::Standalone(_)) {
            return;
        }
        let state = self.state.borrow().clone();
        let net = &self.config.cni_network_name;
        let mut want = BTreeSet::new();
        for ns in state.net_namespaces.keys().filter(|n| *n != "default") {
            let name = format!("{net}-{ns}");
            let path = self.config.cni_conf_dir.join(format!("20-{name}.conflist"));
            if let Err(e) = write_conf(&path, &self.config, &name, Some(ns)) {
                tracing::warn!(namespace = %ns, error = %crate::features::contract::chain(&e), "writing the tenant network config");
            }
            want.insert(path);
        }
        // What is on disk, not only what this run wrote: a namespace deleted while the agent
        // was down loses its network at the first sync after the restart.
        let _serial = lock(&self.tenant_confs);
        let on_disk = std::fs::read_dir(&self.config.cni_conf_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().map(|f| f.to_string_lossy()).is_some_and(|f| {
                    f.starts_with(&format!("20-{net}-")) && f.ends_with(".conflist")
                })
            });
        for stale in on_disk.filter(|p| !want.contains(p)) {
            remove_conf(&stale);
        }
    }
}
