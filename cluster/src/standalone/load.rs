//! Reading the directory: which files count, each file's objects (bounded in size), the
//! duplicate and conflict rules, the last good objects kept for a file that broke, and the
//! problems reported in words.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::sync::Arc;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::types::{parse_objects, ClusterObject, Format, Kind};
use crate::validate::ValidationError;
use crate::{ClusterError, ClusterState};

/// What a file looked like at the last poll. Inode and ctime catch rename-replace and
/// same-size rewrites within one mtime tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

impl Stamp {
    pub(crate) fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// One watched file: its stamp, the objects it had when it was last good, its current problem.
#[derive(Debug)]
pub(crate) struct FileEntry {
    pub(crate) stamp: Stamp,
    pub(crate) objects: Vec<ClusterObject>,
    pub(crate) error: Option<ClusterError>,
}

/// The result of assembling all files.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) state: ClusterState,
    pub(crate) errors: Vec<ClusterError>,
    /// The file each object in `state` came from.
    pub(crate) origins: BTreeMap<(Kind, String), PathBuf>,
}

/// Reads the directory and remembers every file's last good objects (synchronous; the watcher
/// runs it on tokio's blocking pool).
#[derive(Debug)]
pub(crate) struct Loader {
    pub(crate) dir: PathBuf,
    pub(crate) files: BTreeMap<String, FileEntry>,
    pub(crate) dir_error: Option<ClusterError>,
}

impl Loader {
    pub(crate) fn new(dir: PathBuf) -> Loader {
        Loader {
            dir,
            files: BTreeMap::new(),
            dir_error: None,
        }
    }

    /// Looks at the directory; re-reads new and changed files, forgets deleted ones. Returns
    /// whether anything (a file or a problem) changed.
    pub(crate) fn scan(&mut self) -> bool {
        let entries = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                // Keep every file's objects: a vanished or unreadable directory is a problem to
                // report, not an instruction to delete the cluster.
                let changed = self.dir_error.is_none();
                self.dir_error = Some(ClusterError::io(&self.dir, "list", e));
                return changed;
            }
        };
        let mut changed = self.dir_error.take().is_some();
        let mut seen = BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_watched(&name) {
                continue;
            }
            let path = self.dir.join(&name);
            // Follows symlinks (ConfigMap volumes); a dangling link is skipped like a missing file.
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            seen.insert(name.clone());
            let stamp = Stamp::of(&meta);
            if self.files.get(&name).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            changed = true;
            let previous = self.files.remove(&name).map(|f| f.objects);
            let entry = match load_file(&path) {
                Ok(objects) => FileEntry {
                    stamp,
                    objects,
                    error: None,
                },
                Err(e) => FileEntry {
                    stamp,
                    objects: previous.unwrap_or_default(),
                    error: Some(e),
                },
            };
            self.files.insert(name, entry);
        }
        let before = self.files.len();
        self.files.retain(|name, _| seen.contains(name));
        changed || self.files.len() != before
    }

    /// Builds the state from every file's good objects, in file name order. An object defined
    /// by more than one file: when they all say the same, the first is used and the others are
    /// reported; when they differ, `previous` (the state in effect) decides: its object stays,
    /// or, when it had none, the object is left out. A stray copy can thus never change a VNID
    /// (or a subnet) that is in effect.
    pub(crate) fn assemble(&self, previous: &ClusterState) -> Loaded {
        let mut loaded = Loaded::default();
        loaded.errors.extend(self.dir_error.clone());
        let mut defined: BTreeMap<(Kind, String), Vec<(PathBuf, &ClusterObject)>> = BTreeMap::new();
        let mut order: Vec<(Kind, String)> = Vec::new();
        for (name, entry) in &self.files {
            let path = self.dir.join(name);
            loaded.errors.extend(entry.error.clone());
            for obj in &entry.objects {
                let key = (obj.kind(), obj.key());
                let defs = defined.entry(key.clone()).or_default();
                if defs.is_empty() {
                    order.push(key);
                }
                defs.push((path.clone(), obj));
            }
        }
        let mut picked: Vec<(PathBuf, ClusterObject)> = Vec::new();
        // ClusterNetworkPolicies that files define differently: each definition, failing closed.
        let mut contested: Vec<(PathBuf, ClusterObject, String)> = Vec::new();
        for key in order {
            let defs = &defined[&key];
            let (first, obj) = &defs[0];
            if defs.iter().all(|(_, o)| o.same_content(obj)) {
                for (second, _) in &defs[1..] {
                    loaded.errors.push(ClusterError::Duplicate {
                        kind: key.0,
                        name: key.1.clone(),
                        first: first.clone(),
                        second: second.clone(),
                    });
                }
                loaded.origins.insert(key, first.clone());
                picked.push((first.clone(), (*obj).clone()));
                continue;
            }
            let kept = previous.get(key.0, &key.1);
            if key.0 == Kind::ClusterNetworkPolicy {
                let files: Vec<String> =
                    defs.iter().map(|(f, _)| f.display().to_string()).collect();
                let why = format!("defined differently by {}", files.join(" and "));
                for (file, def) in defs {
                    contested.push((file.clone(), (*def).clone(), why.clone()));
                }
            }
            loaded.errors.push(ClusterError::Conflict {
                kind: key.0,
                name: key.1.clone(),
                definitions: defs.iter().map(|(f, o)| (f.clone(), o.summary())).collect(),
                kept: kept.as_ref().map(ClusterObject::summary),
            });
            if let Some(kept) = kept {
                let file = defs
                    .iter()
                    .find(|(_, o)| o.same_content(&kept))
                    .map_or(first, |(f, _)| f)
                    .clone();
                loaded.origins.insert(key, file.clone());
                picked.push((file, kept));
            }
        }
        // The ClusterNetwork first: HostSubnets are checked against it.
        let mut subnets = crate::state::SubnetIndex::default();
        for kind in [
            Kind::ClusterNetwork,
            Kind::NetNamespace,
            Kind::HostSubnet,
            Kind::EgressNetworkPolicy,
            Kind::ClusterNetworkPolicy,
            Kind::Node,
        ] {
            for (file, obj) in picked.iter().filter(|(_, o)| o.kind() == kind) {
                if let ClusterObject::HostSubnet(hs) = obj {
                    if let Err(source) = loaded.state.check_host_subnet_in(hs, &subnets) {
                        loaded.origins.remove(&(kind, hs.name().to_string()));
                        loaded.errors.push(ClusterError::Invalid {
                            file: file.clone(),
                            kind,
                            name: hs.name().to_string(),
                            source: Box::new(source),
                        });
                        continue;
                    }
                    subnets.insert_host_subnet(hs.name(), hs);
                }
                loaded.state.insert(obj.clone());
            }
        }
        // A ClusterNetworkPolicy that files define differently is not left out (that would
        // open what it denies): every definition's subject is denied everything at its tier and
        // priority (each under its own key, `name (file)`) until the files agree.
        for (file, obj, why) in contested {
            if let ClusterObject::ClusterNetworkPolicy(o) = obj {
                let name = o.name().to_string();
                if let Some(mut p) = crate::cnp::fail_closed(&o.value) {
                    p.name = format!("{name} ({})", file.display());
                    Arc::make_mut(&mut loaded.state.cluster_policies).insert(p.name.clone(), p);
                }
                loaded.state.refused_cluster_policies.insert(name, why);
            }
        }
        // No cluster-wide pod list to wait for: a ClusterNetworkPolicy's pod peers are this
        // node's pods (and namespaces that hold their VNID alone, by VNID, on every node).
        loaded.state.peer_pods_listed = true;
        // The nodes are the Node files: all there is to list, unless one of them is not in
        // effect for a problem (two files disagree, or it is refused with none before it):
        // then the nodes are not known, and the rules with `nodes` peers fail closed.
        // A file that cannot be read at all (its kinds unknown) with nothing of it in effect
        // may be a Node: while a policy has `nodes` peers, the nodes are not known either.
        let unreadable = self
            .files
            .values()
            .any(|f| f.error.is_some() && f.objects.is_empty());
        let node_peers = loaded
            .state
            .cluster_policies
            .values()
            .any(multitenant::cluster_policy::ClusterPolicy::has_node_peers);
        let unsettled = loaded
            .errors
            .iter()
            .any(|e| unsettled_node(e).is_some_and(|name| !loaded.state.nodes.contains_key(name)));
        loaded.state.nodes_listed = !unsettled && (!unreadable || !node_peers);
        // Audit logging is a NetNamespace annotation here (no Namespace objects).
        loaded.state.audit_logging = Arc::new(crate::audit::read_all(
            loaded.state.net_namespaces.iter().filter_map(|(name, n)| {
                let v = n.metadata.annotations.as_ref()?;
                v.get(crate::audit::ACL_LOGGING_ANNOTATION)
                    .map(|v| (name.as_str(), v.as_str()))
            }),
        ));
        // Namespaces whose NetNamespace file is unusable: named as such in ADD errors.
        for e in &loaded.errors {
            if let Some((namespace, why)) = broken_net_namespace(e) {
                if !loaded.state.net_namespaces.contains_key(&namespace) {
                    loaded.state.broken_namespaces.insert(namespace, why);
                }
            }
        }
        // An EgressNetworkPolicy that cannot be used fails closed: its namespace's external
        // traffic is dropped until the file is fixed or removed (the egress firewall reads this).
        for e in &loaded.errors {
            if let ClusterError::Invalid {
                kind: Kind::EgressNetworkPolicy,
                name,
                source,
                ..
            } = e
            {
                if !loaded.state.egress_policies.contains_key(name) {
                    loaded
                        .state
                        .refused_egress_policies
                        .insert(name.clone(), format!("invalid: {source}"));
                }
            }
        }
        loaded
    }
}

/// Whether a directory entry is one of ours to read.
pub(crate) fn is_watched(name: &str) -> bool {
    !name.starts_with('.')
        && (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
}

/// The largest state file read: far above any real object file (a NetNamespace is a few
/// hundred bytes, an EgressNetworkPolicy of 1000 rules about 100 KB), far below what would cost
/// the agent memory (a 10 MB stray file cost 26-29 MB of RSS when it was read).
pub const MAX_STATE_FILE_BYTES: u64 = 1024 * 1024;

/// The namespace a state directory problem makes unusable, with why: a NetNamespace that is
/// invalid, or a file named as the writer names a namespace's file
/// (`netnamespace-<name>.yaml`) that cannot be read, parsed or is too large. `None` for other
/// problems (conflicts are shown on their own).
pub fn broken_net_namespace(problem: &ClusterError) -> Option<(String, String)> {
    let file = match problem {
        ClusterError::Invalid {
            kind: Kind::NetNamespace,
            name,
            ..
        } => return Some((name.clone(), problem.to_string())),
        ClusterError::Io { path, .. } => path,
        ClusterError::Parse { file, .. } | ClusterError::TooLarge { file, .. } => file,
        _ => return None,
    };
    let name = file.file_name()?.to_str()?.to_ascii_lowercase();
    let stem = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .or_else(|| name.strip_suffix(".json"))?;
    let namespace = stem.strip_prefix("netnamespace-")?;
    (!namespace.is_empty()).then(|| (namespace.to_string(), problem.to_string()))
}

/// Reads, parses and validates one file; any problem fails the whole file. A file over
/// [`MAX_STATE_FILE_BYTES`] is refused unread.
pub(crate) fn load_file(path: &Path) -> Result<Vec<ClusterObject>, ClusterError> {
    let size = fs::metadata(path)
        .map_err(|e| ClusterError::io(path, "read", e))?
        .len();
    if size > MAX_STATE_FILE_BYTES {
        return Err(ClusterError::TooLarge {
            file: path.to_path_buf(),
            size,
            max: MAX_STATE_FILE_BYTES,
        });
    }
    let text = fs::read_to_string(path).map_err(|e| ClusterError::io(path, "read", e))?;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    };
    let objects = parse_objects(&text, format).map_err(|source| ClusterError::Parse {
        file: path.to_path_buf(),
        source: Box::new(source),
    })?;
    let mut names = BTreeSet::new();
    for obj in &objects {
        let invalid = |source| ClusterError::Invalid {
            file: path.to_path_buf(),
            kind: obj.kind(),
            name: obj.key(),
            source: Box::new(source),
        };
        obj.validate().map_err(invalid)?;
        if !names.insert((obj.kind(), obj.key())) {
            return Err(invalid(ValidationError::new(
                "metadata.name",
                obj.key(),
                "the file defines this object twice",
            )));
        }
    }
    Ok(objects)
}

/// Reads a directory once.
pub(crate) fn load_dir(dir: &Path) -> Loaded {
    let mut loader = Loader::new(dir.to_path_buf());
    loader.scan();
    loader.assemble(&ClusterState::default())
}

/// Logs problems that are new since `before` and those that went away.
pub(crate) fn log_changes(before: &[ClusterError], after: &[ClusterError]) {
    let old: BTreeSet<String> = before.iter().map(ToString::to_string).collect();
    let new: BTreeSet<String> = after.iter().map(ToString::to_string).collect();
    for e in new.difference(&old) {
        tracing::error!("cluster state: {e}");
    }
    for e in old.difference(&new) {
        tracing::info!("cluster state: resolved: {e}");
    }
}

/// The Node a problem keeps from taking effect, if it is about one.
fn unsettled_node(e: &ClusterError) -> Option<&str> {
    match e {
        ClusterError::Invalid {
            kind: Kind::Node,
            name,
            ..
        }
        | ClusterError::Conflict {
            kind: Kind::Node,
            name,
            ..
        } => Some(name),
        ClusterError::Parse { source, .. } => match &**source {
            crate::types::ParseError::Field {
                kind: Kind::Node,
                name,
                ..
            } => Some(name),
            _ => None,
        },
        _ => None,
    }
}
