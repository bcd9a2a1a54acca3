//! What `sdnctl namespaces` lists: one row per NetNamespace with its VNID, multicast and local
//! pods, as a table or as JSON.

use crate::{ClusterError, ClusterState, Kind};
use multitenant::Vnid;
use serde::Serialize;
use std::collections::BTreeMap;

use super::*;

/// One row of `sdnctl namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRow {
    /// The namespace.
    pub name: String,
    /// Its VNID (`None`: local pods but no NetNamespace).
    pub vnid: Option<u32>,
    /// Whether it is global (VNID 0).
    pub global: bool,
    /// Other namespaces with the same VNID.
    pub shares_with: Vec<String>,
    /// Local pods (`None`: unknown).
    pub pods: Option<usize>,
    /// Whether multicast is in effect for its VNID (every namespace on it annotated).
    pub multicast: bool,
    /// Files that define the NetNamespace differently (`netid 11 in a.yaml`); empty when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflict: Vec<String>,
    /// Why its NetNamespace file is unusable, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
}

/// The rows of `sdnctl namespaces`: every NetNamespace by name, then namespaces that have local
/// pods but no NetNamespace (pods of a namespace deleted with `--force`), then NetNamespaces that
/// files define differently (`problems`' conflicts; the agent keeps the VNID it had for them).
pub fn rows(
    state: &ClusterState,
    pods: &PodCounts,
    problems: &[ClusterError],
) -> Vec<NamespaceRow> {
    let mut by_vnid: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (name, nn) in state.net_namespaces.iter() {
        by_vnid.entry(nn.net_id).or_default().push(name);
    }
    let count = |n: &str| pods.known().map(|p| p.count(n));
    let multicast = state.multicast_vnids();
    let mut out: Vec<NamespaceRow> = state
        .net_namespaces
        .iter()
        .map(|(name, nn)| NamespaceRow {
            name: name.clone(),
            vnid: Some(nn.net_id),
            global: nn.net_id == 0,
            shares_with: by_vnid
                .get(&nn.net_id)
                .into_iter()
                .flatten()
                .filter(|n| *n != name)
                .map(|n| n.to_string())
                .collect(),
            pods: count(name),
            conflict: Vec::new(),
            multicast: Vnid::new(nn.net_id).is_some_and(|v| multicast.contains(&v)),
            unusable: None,
        })
        .collect();
    if let Some(p) = pods.known() {
        for (name, n) in &p.per_namespace {
            if !state.net_namespaces.contains_key(name) {
                out.push(NamespaceRow {
                    name: name.clone(),
                    vnid: None,
                    global: false,
                    shares_with: Vec::new(),
                    pods: Some(*n),
                    conflict: Vec::new(),
                    multicast: false,
                    unusable: None,
                });
            }
        }
    }
    for p in problems {
        let ClusterError::Conflict {
            kind: Kind::NetNamespace,
            name,
            definitions,
            ..
        } = p
        else {
            continue;
        };
        let conflict: Vec<String> = definitions
            .iter()
            .map(|(file, what)| {
                let file = file.file_name().map_or_else(
                    || file.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                format!("{what} in {file}")
            })
            .collect();
        match out.iter_mut().find(|r| r.name == *name) {
            Some(row) => row.conflict = conflict,
            None => out.push(NamespaceRow {
                name: name.clone(),
                vnid: None,
                global: false,
                shares_with: Vec::new(),
                pods: count(name),
                conflict,
                multicast: false,
                unusable: None,
            }),
        }
    }
    // NetNamespaces whose file is broken: named, so an ADD's "no NetNamespace" has a reason.
    for p in problems {
        let Some((name, why)) = crate::broken_net_namespace(p) else {
            continue;
        };
        match out.iter_mut().find(|r| r.name == name) {
            Some(row) if row.vnid.is_none() => row.unusable = Some(why),
            Some(_) => {}
            None => out.push(NamespaceRow {
                name: name.clone(),
                vnid: None,
                global: false,
                shares_with: Vec::new(),
                pods: count(&name),
                conflict: Vec::new(),
                multicast: false,
                unusable: Some(why),
            }),
        }
    }
    out
}

/// The table of `sdnctl namespaces`: NAME, VNID, SHARES-WITH (`global` for VNID 0, `-` for
/// none), PODS (`?` when unknown), MULTICAST (`on` when in effect for the VNID).
pub fn table(rows: &[NamespaceRow]) -> String {
    let mut cells: Vec<[String; 5]> = vec![[
        "NAME".into(),
        "VNID".into(),
        "SHARES-WITH".into(),
        "PODS".into(),
        "MULTICAST".into(),
    ]];
    for r in rows {
        let shares = match r.vnid {
            _ if !r.conflict.is_empty() => format!("(conflict: {})", r.conflict.join(", ")),
            None if r.unusable.is_some() => format!(
                "(NetNamespace file unusable: {})",
                r.unusable.as_deref().unwrap_or_default()
            ),
            None => "(no NetNamespace)".to_string(),
            Some(0) => "global".to_string(),
            Some(_) if r.shares_with.is_empty() => "-".to_string(),
            Some(_) => r.shares_with.join(","),
        };
        cells.push([
            r.name.clone(),
            r.vnid.map_or("-".to_string(), |v| v.to_string()),
            shares,
            r.pods.map_or("?".to_string(), |n| n.to_string()),
            if r.multicast { "on" } else { "-" }.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| cells.iter().map(|c| c[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for c in &cells {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
