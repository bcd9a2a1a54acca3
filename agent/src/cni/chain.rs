//! Which plugins a network chains after `sdn-cni`, read from the runtime's conflist in the CNI
//! configuration directory, and whether one of them needs the pod's interface to be a veth.
//!
//! Why: a pod on a port-pool port gets a passthru macvlan on the port's parked veth peer (no
//! ovs-vswitchd reconfiguration on the ADD path, see `pod::pool`). Plugins chained after
//! `sdn-cni` see that interface. Most do not care what it is (`portmap`, `tuning`, `firewall`,
//! `sbr` work on it); the reference `bandwidth` plugin does: it looks for the veth peer of the
//! container's interface to shape on the host side, and fails every ADD and CHECK without one.
//! The CNI protocol does not tell a plugin what follows it, so the agent reads the conflist the
//! runtime reads (the first file of the directory, in name order, with the request's network
//! name, as libcni picks it) and gives a pod a plain veth, not a pool port, when a plugin after
//! `sdn-cni` is not known to work on the pooled interface. Pods of networks that chain nothing
//! such keep the pool's speed.
//!
//! Limits: only the agent's `cniConfDir` is read (where runtimes on a node look, and where the
//! agent writes its own conflist); a chain configured elsewhere is not seen. Files over 1 MiB
//! and files that do not parse are skipped. Unknown plugins count as needing a veth: the plain
//! veth works for every plugin, the pooled interface only for those known.

use std::fs;
use std::path::Path;

/// Plugins known to work on the pooled interface (a macvlan on the parked peer).
pub const POOL_SAFE: [&str; 5] = ["portmap", "tuning", "firewall", "sbr", "static"];

/// This plugin's type in a conflist.
pub const PLUGIN_TYPE: &str = "sdn-cni";

/// The types of the plugins chained after `sdn-cni` in network `network`'s conflist in `dir`
/// (empty when there is none, or `sdn-cni` is not in it).
pub fn chained_after(dir: &Path, network: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conflist"))
        .collect();
    files.sort();
    for f in files {
        if fs::metadata(&f).map_or(true, |m| m.len() > 1024 * 1024) {
            continue;
        }
        let Ok(text) = fs::read_to_string(&f) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if v["name"].as_str() != Some(network) {
            continue;
        }
        let types: Vec<String> = v["plugins"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| p["type"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        return match types.iter().position(|t| t == PLUGIN_TYPE) {
            Some(i) => types[i + 1..].to_vec(),
            None => Vec::new(),
        };
    }
    Vec::new()
}

/// The first plugin of `chained` not known to work on the pooled interface, if any: the pod
/// then gets a plain veth.
pub fn needs_veth(chained: &[String]) -> Option<&str> {
    chained
        .iter()
        .map(String::as_str)
        .find(|t| !POOL_SAFE.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_conflist_of_the_network_decides() {
        let dir = std::env::temp_dir().join(format!("sdn-chain-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, net: &str, plugins: &[&str]| {
            let ps: Vec<_> = plugins
                .iter()
                .map(|t| serde_json::json!({"type": t}))
                .collect();
            fs::write(
                dir.join(name),
                serde_json::json!({"cniVersion": "1.0.0", "name": net, "plugins": ps}).to_string(),
            )
            .unwrap();
        };
        write("10-sdn.conflist", "sdn", &["sdn-cni"]);
        write("20-bw.conflist", "bw", &["sdn-cni", "portmap", "bandwidth"]);
        write("30-bw.conflist", "bw", &["sdn-cni"]);
        write(
            "40-safe.conflist",
            "safe",
            &["sdn-cni", "portmap", "tuning", "firewall", "sbr"],
        );
        write("50-other.conflist", "other", &["bridge", "bandwidth"]);
        fs::write(dir.join("60-broken.conflist"), "{").unwrap();
        assert!(chained_after(&dir, "sdn").is_empty());
        let bw = chained_after(&dir, "bw");
        assert_eq!(bw, ["portmap", "bandwidth"], "20-bw comes first");
        assert_eq!(needs_veth(&bw), Some("bandwidth"));
        assert_eq!(needs_veth(&chained_after(&dir, "safe")), None);
        assert!(
            chained_after(&dir, "other").is_empty(),
            "sdn-cni is not in it"
        );
        assert!(chained_after(&dir, "missing").is_empty());
        assert_eq!(needs_veth(&["cilium-cni".to_string()]), Some("cilium-cni"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
