//! The shape of the code stays the shape of the architecture (docs/architecture.md):
//!
//! - the agent's folders are floors, and a floor uses only the floors below it
//!   (`telemetry` < `host`, `cni` < `bridge` < `features` < `pod` < `operator` < `node`);
//! - no file of the agent imports a file that imports it back, directly or around a circle;
//! - `sdnctl` and the controller stand on their own: neither links the agent, and sdnctl links
//!   none of the agent's datapath crates (netlink, Prometheus, the DNS resolver...);
//! - no source file (tests aside) is longer than 700 lines unless its `//!` says why it must
//!   be one piece;
//! - `anyhow` is used only by the binaries' `main.rs` (libraries return typed errors), and no
//!   module glues its parts back together with `pub use part::*` (what a module exports is
//!   listed where it is exported).
//!
//! Imports are read from the source text (`crate::` paths and `super::` paths outside comments
//! and test modules); the dependency graph from `cargo tree` (offline, from Cargo.lock).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The agent's folders, by floor.
const FLOORS: [(&str, u8); 8] = [
    ("telemetry", 0),
    ("host", 1),
    ("cni", 1),
    ("bridge", 2),
    ("features", 3),
    ("pod", 4),
    ("operator", 5),
    ("node", 6),
];

/// The longest source file that needs no reason.
const LONGEST: usize = 700;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of a file before its unit-test module (`#[cfg(test)]` then `mod tests {`).
fn code_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod tests {"))
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// A file's module path inside the agent (`pod::add`, `node`, `bridge::flowstore::change`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The module paths a file names: `crate::a::b`, `crate::{a::b, c}` and `super::x`, outside
/// comments.
fn referenced(module: &str, is_mod_rs: bool, lines: &[&str]) -> BTreeSet<String> {
    let text: String = lines
        .iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_string()
    };
    let mut rest = text.as_str();
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for part in inner.split(',') {
                let p = ident(part.trim());
                if !p.is_empty() {
                    out.insert(p);
                }
            }
        } else {
            out.insert(ident(after));
        }
        rest = after;
    }
    // `super::x` from `a/b.rs` (module a::b) is a::x; from `a/b/mod.rs` (module a::b) too.
    let parent: Vec<&str> = module.split("::").collect();
    let base = if is_mod_rs || parent.len() > 1 {
        parent[..parent.len() - 1].join("::")
    } else {
        String::new()
    };
    let mut rest = text.as_str();
    while let Some(i) = rest.find("super::") {
        let after = &rest[i + "super::".len()..];
        let name = ident(after);
        if !name.is_empty() && !name.starts_with("super") {
            out.insert(if base.is_empty() {
                name
            } else {
                format!("{base}::{name}")
            });
        }
        rest = after;
    }
    out
}

/// The agent's import graph: module -> the modules it imports (not its own ancestors, whose
/// items a module sees by nesting).
fn agent_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join("agent/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut names = BTreeMap::new();
    for f in &files {
        if f.file_name()
            .is_some_and(|n| n == "main.rs" || n == "lib.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let module = module_of(&src, f);
        let is_mod_rs = f.file_name().is_some_and(|n| n == "mod.rs");
        let refs = referenced(&module, is_mod_rs, &code_lines(&text));
        names.insert(module, refs);
    }
    let modules: BTreeSet<String> = names.keys().cloned().collect();
    let resolve = |path: &str| -> Option<String> {
        let mut parts: Vec<&str> = path.split("::").collect();
        while !parts.is_empty() {
            let candidate = parts.join("::");
            if modules.contains(&candidate) {
                return Some(candidate);
            }
            parts.pop();
        }
        None
    };
    names
        .iter()
        .map(|(m, refs)| {
            let targets = refs
                .iter()
                .filter_map(|r| resolve(r))
                .filter(|t| t != m && !m.starts_with(&format!("{t}::")))
                .collect();
            (m.clone(), targets)
        })
        .collect()
}

fn floor(module: &str) -> Option<u8> {
    let top = module.split("::").next().unwrap();
    FLOORS.iter().find(|(f, _)| *f == top).map(|(_, n)| *n)
}

#[test]
fn every_agent_folder_is_a_floor_and_uses_only_floors_below() {
    let graph = agent_graph();
    assert!(
        graph.len() > 40,
        "found only {} modules in agent/src",
        graph.len()
    );
    let mut wrong = Vec::new();
    for (m, targets) in &graph {
        let Some(fm) = floor(m) else {
            wrong.push(format!("{m} is in no folder of the architecture"));
            continue;
        };
        for t in targets {
            let ft = floor(t).unwrap();
            if ft > fm {
                wrong.push(format!("{m} (floor {fm}) imports {t} (floor {ft})"));
            }
        }
    }
    // The graph is read, not assumed: the top floor uses the ones below.
    assert!(
        graph["node"].iter().any(|t| t.starts_with("pod")),
        "the reader found no import of pod in node: {:?}",
        graph["node"]
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_agent_file_imports_a_file_that_imports_it_back() {
    let graph = agent_graph();
    // Tarjan's strongly connected components: any with more than one module is a circle.
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        circles: Vec<Vec<&'a str>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut circle = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    circle.push(w);
                    if w == v {
                        break;
                    }
                }
                if circle.len() > 1 {
                    circle.sort();
                    self.circles.push(circle);
                }
            }
        }
    }
    let mut walk = Walk {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        circles: Vec::new(),
    };
    for m in graph.keys() {
        if !walk.index.contains_key(m.as_str()) {
            walk.visit(m);
        }
    }
    assert!(
        walk.circles.is_empty(),
        "import circles: {:?}",
        walk.circles
    );
}

#[test]
fn the_import_reader_sees_a_circle_when_there_is_one() {
    // The reader the two tests above rely on, on a made-up pair of files.
    let a = referenced(
        "operator::api",
        false,
        &["use crate::operator::trace::trace;"],
    );
    let b = referenced(
        "operator::trace",
        false,
        &[
            "// crate::node::start is only a comment",
            "use crate::{operator::api::Client, pod::Pods};",
            "use super::observe::NodeView;",
        ],
    );
    assert!(a.contains("operator::trace::trace"), "{a:?}");
    assert!(b.contains("operator::api::Client"), "{b:?}");
    assert!(b.contains("pod::Pods"), "{b:?}");
    assert!(b.contains("operator::observe::NodeView"), "{b:?}");
    assert!(!b.iter().any(|r| r.starts_with("node")), "{b:?}");
}

fn normal_deps(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

#[test]
fn sdnctl_and_the_controller_link_no_agent_and_sdnctl_no_datapath() {
    let sdnctl = normal_deps("sdnctl");
    assert!(
        sdnctl.contains("local-api") && sdnctl.contains("cluster"),
        "{sdnctl:?}"
    );
    for crate_ in [
        "agent",
        "rtnetlink",
        "netlink-packet-route",
        "prometheus",
        "hickory-resolver",
        "controller",
    ] {
        assert!(!sdnctl.contains(crate_), "sdnctl links {crate_}");
    }
    let controller = normal_deps("controller");
    assert!(controller.contains("cluster"), "{controller:?}");
    for crate_ in [
        "agent",
        "rtnetlink",
        "netlink-packet-route",
        "prometheus",
        "hickory-resolver",
    ] {
        assert!(
            !controller.contains(crate_),
            "the controller links {crate_}"
        );
    }
}

/// Every source file of the workspace's crates (tests/ aside).
fn source_files() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = Vec::new();
    for member in [
        "ovs",
        "flows",
        "multitenant",
        "cni-proto",
        "cluster",
        "controller",
        "local-api",
        "agent",
        "sdnctl",
        "cni-shim",
    ] {
        rust_files(&root.join(member).join("src"), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    files
}

#[test]
fn no_source_file_is_longer_than_700_lines_without_saying_why() {
    let root = workspace();
    let mut long = Vec::new();
    for f in source_files() {
        // A file of tests is one piece by nature.
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let lines = code_lines(&text);
        let says_why = lines
            .iter()
            .take_while(|l| l.starts_with("//!"))
            .any(|l| l.starts_with("//! Why one piece:"));
        if lines.len() > LONGEST && !says_why {
            long.push(format!(
                "{}: {} lines",
                f.strip_prefix(&root).unwrap().display(),
                lines.len()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "split these, or say in their //! why each must be one piece (\"//! Why one piece: ...\"):\n{}",
        long.join("\n")
    );
}

#[test]
fn anyhow_only_in_main_and_no_glob_re_exports() {
    let root = workspace();
    let mut found = Vec::new();
    for f in source_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        let is_main = f.file_name().is_some_and(|n| n == "main.rs");
        for (i, l) in code_lines(&text).iter().enumerate() {
            let code = l.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if !is_main && code.contains("anyhow") {
                found.push(format!("{name}:{}: anyhow outside main.rs: {code}", i + 1));
            }
            if code.starts_with("pub use") && code.ends_with("::*;") {
                found.push(format!("{name}:{}: a glob re-export: {code}", i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
