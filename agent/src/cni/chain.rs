//! Which interface a pod may get, decided from the conflist the runtime read: a pool port
//! only where the agent has seen the whole chain and knows every plugin after `sdn-cni` works
//! on it, a plain veth everywhere else.
//!
//! Why: a pod on a port-pool port gets a passthru macvlan on the port's parked veth peer (no
//! ovs-vswitchd reconfiguration on the ADD path, see `pod::pool`). Plugins chained after
//! `sdn-cni` see that interface. Most do not care what it is (`portmap`, `tuning`, `firewall`,
//! `sbr` work on it); the reference `bandwidth` plugin does: it looks for the veth peer of the
//! container's interface to shape on the host side, and fails every ADD and CHECK without one.
//! The CNI protocol does not tell a plugin what follows it, so the agent reads the conflist the
//! runtime reads (the first file of its `cniConfDir`, in name order, with the request's network
//! name, as libcni picks it: `.conflist` files first, then single-plugin `.conf` and `.json`
//! files) and gives the pod a pool port only when that file chains nothing after `sdn-cni`
//! that is not known to work on the pooled interface ([`Interface::Pool`]).
//!
//! A network whose config the agent cannot see (a chain configured outside `cniConfDir`:
//! cnitool's `NETCONFPATH`, a runtime with a directory of its own) gets a plain veth: it works
//! under every plugin, and the agent cannot know what follows it. Files over 1 MiB and files
//! that do not parse are skipped. Unknown plugins count as needing a veth.

use std::fs;
use std::path::{Path, PathBuf};

/// Plugins known to work on the pooled interface (a macvlan on the parked peer).
pub const POOL_SAFE: [&str; 5] = ["portmap", "tuning", "firewall", "sbr", "static"];

/// This plugin's type in a conflist.
pub const PLUGIN_TYPE: &str = "sdn-cni";

/// The interface a pod may get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interface {
    /// A pool port: the network's config chains nothing after `sdn-cni` that needs a veth.
    Pool,
    /// A plain veth, and why.
    PlainVeth(PlainVeth),
}

/// Why a pod gets a plain veth, not a pool port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlainVeth {
    /// A plugin chained after `sdn-cni` is not known to work on the pooled interface.
    ChainedPlugin {
        /// Its type.
        plugin: String,
        /// The file that chains it.
        file: PathBuf,
    },
    /// No file of `cniConfDir` configures the network with `sdn-cni` in it: the chain is
    /// configured elsewhere, and the agent cannot know what follows it.
    ChainNotSeen {
        /// The request's network name.
        network: String,
    },
}

impl std::fmt::Display for PlainVeth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlainVeth::ChainedPlugin { plugin, file } => write!(
                f,
                "plugin {plugin:?} chained after {PLUGIN_TYPE} in {} needs a veth",
                file.display()
            ),
            PlainVeth::ChainNotSeen { network } => write!(
                f,
                "network {network:?} has no config with {PLUGIN_TYPE} in the CNI config directory, so its chain is unknown"
            ),
        }
    }
}

/// The interface a pod of network `network` may get, from the config files in `dir`.
pub fn interface_for(dir: &Path, network: &str) -> Interface {
    match chained_after(dir, network) {
        None => Interface::PlainVeth(PlainVeth::ChainNotSeen {
            network: network.to_string(),
        }),
        Some((file, after)) => match needs_veth(&after) {
            Some(plugin) => Interface::PlainVeth(PlainVeth::ChainedPlugin {
                plugin: plugin.to_string(),
                file,
            }),
            None => Interface::Pool,
        },
    }
}

/// The file configuring network `network` with `sdn-cni` in it, and the types of the plugins
/// chained after `sdn-cni` there; `None` when no file of `dir` does. The first file with the
/// network's name decides, as for libcni: `.conflist` files first, then `.conf` and `.json`.
pub fn chained_after(dir: &Path, network: &str) -> Option<(PathBuf, Vec<String>)> {
    let entries = fs::read_dir(dir).ok()?;
    let mut files: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    files.sort();
    let with_ext = |ext: &'static [&'static str]| {
        files
            .iter()
            .filter(move |p| p.extension().is_some_and(|e| ext.iter().any(|x| e == *x)))
    };
    let lists = with_ext(&["conflist"]).chain(with_ext(&["conf", "json"]));
    for f in lists {
        if fs::metadata(f).map_or(true, |m| m.len() > 1024 * 1024) {
            continue;
        }
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if v["name"].as_str() != Some(network) {
            continue;
        }
        let types: Vec<String> = match v["plugins"].as_array() {
            Some(ps) => ps
                .iter()
                .map(|p| p["type"].as_str().unwrap_or_default().to_string())
                .collect(),
            None => vec![v["type"].as_str().unwrap_or_default().to_string()],
        };
        // The first file of the name is the one the runtime uses, with or without sdn-cni.
        return types
            .iter()
            .position(|t| t == PLUGIN_TYPE)
            .map(|i| (f.clone(), types[i + 1..].to_vec()));
    }
    None
}

/// The first plugin of `chained` not known to work on the pooled interface, if any.
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
        fs::write(
            dir.join("70-single.conf"),
            serde_json::json!({"cniVersion": "1.0.0", "name": "single", "type": "sdn-cni"})
                .to_string(),
        )
        .unwrap();
        assert_eq!(interface_for(&dir, "sdn"), Interface::Pool);
        let (file, bw) = chained_after(&dir, "bw").unwrap();
        assert_eq!(bw, ["portmap", "bandwidth"], "20-bw comes first");
        assert_eq!(file, dir.join("20-bw.conflist"));
        assert_eq!(
            interface_for(&dir, "bw"),
            Interface::PlainVeth(PlainVeth::ChainedPlugin {
                plugin: "bandwidth".into(),
                file
            })
        );
        assert_eq!(interface_for(&dir, "safe"), Interface::Pool);
        assert_eq!(interface_for(&dir, "single"), Interface::Pool, "a .conf");
        // sdn-cni is not in the network's first file: the runtime runs another chain.
        assert!(chained_after(&dir, "other").is_none());
        // A network configured elsewhere (NETCONFPATH, another runtime's directory).
        let unseen = interface_for(&dir, "missing");
        assert_eq!(
            unseen,
            Interface::PlainVeth(PlainVeth::ChainNotSeen {
                network: "missing".into()
            })
        );
        assert!(unseen_text(&unseen).contains("its chain is unknown"));
        assert!(chained_after(&dir.join("nowhere"), "sdn").is_none());
        assert_eq!(needs_veth(&["cilium-cni".to_string()]), Some("cilium-cni"));
        fs::remove_dir_all(&dir).unwrap();
    }

    fn unseen_text(i: &Interface) -> String {
        match i {
            Interface::PlainVeth(why) => why.to_string(),
            Interface::Pool => String::new(),
        }
    }
}
