//! `sdnctl audit`: the node's audit log, read from its file (the rotated files first, oldest
//! to newest, then the current one), filtered by namespace and verdict, printed as lines a
//! human reads or (`--json`) as written; `--follow` keeps printing as the agent writes,
//! across rotations.
//!
//! Why read the file and not ask the agent: the file is the audit trail (it outlives the agent
//! and is what an auditor is handed); reading it directly shows exactly what was recorded. The
//! file is found as the agent writes it: `--file`, the config's `auditLogFile`, the running
//! agent's answer, else the default. Both formats are read: JSON lines are parsed and filtered
//! by field; RFC 5424 lines by their `key=value` text.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::config::Config;
use serde_json::Value;

use crate::agent::agent_config;
use crate::{out, Cli, Cmd, Failure};

/// What to show.
struct Filter {
    namespace: Option<String>,
    verdict: Option<String>,
}

impl Filter {
    fn keeps(&self, line: &str) -> bool {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => self.keeps_json(&v),
            Err(_) => self.keeps_text(line),
        }
    }

    fn keeps_json(&self, v: &Value) -> bool {
        if let Some(want) = &self.verdict {
            if v["verdict"].as_str() != Some(want.as_str()) {
                return false;
            }
        }
        if let Some(ns) = &self.namespace {
            let is = |x: &Value| x.as_str() == Some(ns.as_str());
            let named = is(&v["namespace"])
                || is(&v["src"]["namespace"])
                || is(&v["dst"]["namespace"])
                || v["namespaces"].as_array().is_some_and(|a| a.iter().any(is));
            if !named {
                return false;
            }
        }
        true
    }

    fn keeps_text(&self, line: &str) -> bool {
        if let Some(want) = &self.verdict {
            if !line.contains(&format!(" verdict={want} ")) {
                return false;
            }
        }
        if let Some(ns) = &self.namespace {
            let named = line.contains(&format!(" namespace={ns} "))
                || line.contains(&format!("src=\"{ns}/"))
                || line.contains(&format!("dst=\"{ns}/"))
                || line
                    .split(" namespaces=")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .is_some_and(|list| list.split(',').any(|n| n == ns));
            if !named {
                return false;
            }
        }
        true
    }
}

/// One end in words: `ns/pod 10.128.0.5:43210`.
fn end(v: &Value) -> String {
    let who = match (
        v["namespace"].as_str(),
        v["pod"].as_str(),
        v["host"].as_str(),
    ) {
        (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
        (Some(ns), None, _) => format!("{ns}/-"),
        (None, _, Some(h)) => h.to_string(),
        _ => "-".into(),
    };
    let ip = v["ip"].as_str().unwrap_or("-");
    match v["port"].as_u64() {
        Some(p) if ip.contains(':') => format!("{who} [{ip}]:{p}"),
        Some(p) => format!("{who} {ip}:{p}"),
        None => format!("{who} {ip}"),
    }
}

/// A JSON line as a human reads it (a line of another shape as it is).
fn human(line: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return line.to_string();
    };
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let mut out = format!("{} {} {}", s("time"), s("node"), s("event"));
    match v["event"].as_str() {
        Some("decision") | Some("repeats") => {
            out += &format!(
                " {} {} [{}] {} -> {} {}",
                s("verdict").to_uppercase(),
                s("kind"),
                s("namespace"),
                end(&v["src"]),
                end(&v["dst"]),
                s("protocol")
            );
            if let Some(d) = v["direction"].as_str() {
                out += &format!(" {d}");
            }
            out += &format!(": {}", s("object"));
            if let Some(r) = v["rule"].as_str() {
                out += &format!(", {r}");
            }
            if let Some(n) = v["packets"].as_u64() {
                if v["event"] == "repeats" {
                    out += &format!(
                        " ({n} more packets in {} ms)",
                        v["duration_ms"].as_u64().unwrap_or(0)
                    );
                }
            }
        }
        _ => {
            if !s("verdict").is_empty() {
                out += &format!(" {}", s("verdict"));
            }
            if let Some(a) = v["namespaces"].as_array() {
                let ns: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                out += &format!(" [{}]", ns.join(","));
            }
            if let Some(n) = v["packets"].as_u64() {
                out += &format!(" {n} packets");
            }
            if let Some(m) = v["message"].as_str() {
                out += &format!(": {m}");
            }
        }
    }
    out
}

/// The audit log file, as the agent writes it.
fn locate(a: &Cli, file: Option<&PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(f) = file {
        return Ok(f.clone());
    }
    if let Some(cfg) = agent_config(a)? {
        return Ok(cfg.audit_log_file);
    }
    if let Some(p) = crate::agent::agent_audit_log(a) {
        return Ok(p);
    }
    Ok(Config::default().audit_log_file)
}

/// `FILE.n`.
fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{n}"));
    p.into()
}

/// `sdnctl audit`.
pub(crate) fn show(a: &Cli, cmd: &Cmd) -> Result<(), Failure> {
    let Cmd::Audit {
        namespace,
        verdict,
        follow,
        tail,
        file,
    } = cmd
    else {
        return Ok(());
    };
    let path = locate(a, file.as_ref())?;
    let filter = Filter {
        namespace: namespace.clone(),
        verdict: verdict.clone(),
    };
    let json = a.json;
    let render = |l: &str| if json { l.to_string() } else { human(l) };
    if !path.exists() && !*follow {
        return Err(Failure::Error(format!(
            "no audit log at {} (the agent writes it when it starts; pass --file or --config if it is elsewhere)",
            path.display()
        )));
    }
    // The rotated files, oldest first, then the current one.
    let mut files: Vec<PathBuf> = (1..=1000)
        .map(|n| rotated(&path, n))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(path.clone());
    let mut kept: VecDeque<String> = VecDeque::new();
    let mut printed = String::new();
    let mut position = (0u64, 0u64);
    for f in &files {
        let Ok(fh) = File::open(f) else { continue };
        if f == &path {
            let md = fh.metadata().map_err(|e| Failure::Error(e.to_string()))?;
            position = (md.ino(), md.len());
        }
        let mut r = BufReader::new(fh);
        let mut line = String::new();
        let mut read = 0u64;
        while r
            .read_line(&mut line)
            .map_err(|e| Failure::Error(format!("{}: {e}", f.display())))?
            > 0
        {
            if !line.ends_with('\n') {
                break;
            }
            read += line.len() as u64;
            let l = line.trim_end();
            if filter.keeps(l) {
                kept.push_back(render(l));
                if let Some(n) = tail {
                    while kept.len() > *n {
                        kept.pop_front();
                    }
                }
            }
            line.clear();
        }
        if f == &path {
            position.1 = read;
        }
    }
    for l in kept {
        printed.push_str(&l);
        printed.push('\n');
    }
    out(&printed)?;
    if *follow {
        follow_file(&path, position, &filter, &render)?;
    }
    Ok(())
}

/// Prints what is appended to `path` from `(inode, offset)` on, starting over in a new file
/// when the agent rotates it.
fn follow_file(
    path: &Path,
    (mut inode, mut offset): (u64, u64),
    filter: &Filter,
    render: &dyn Fn(&str) -> String,
) -> Result<(), Failure> {
    let mut partial = String::new();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(mut f) = File::open(path) else {
            continue;
        };
        let Ok(md) = f.metadata() else { continue };
        if md.ino() != inode || md.len() < offset {
            // Rotated (or truncated): the rest of the old file is in FILE.1; read it first.
            if md.ino() != inode && inode != 0 {
                if let Ok(mut old) = File::open(rotated(path, 1)) {
                    if old.metadata().map(|m| m.ino()).ok() == Some(inode) {
                        let _ = old.seek(SeekFrom::Start(offset));
                        let mut rest = String::new();
                        let _ = old.read_to_string(&mut rest);
                        emit(&mut partial, &rest, filter, render)?;
                    }
                }
            }
            inode = md.ino();
            offset = 0;
            partial.clear();
        }
        if md.len() == offset {
            continue;
        }
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| Failure::Error(e.to_string()))?;
        let mut more = String::new();
        let n = f
            .read_to_string(&mut more)
            .map_err(|e| Failure::Error(e.to_string()))?;
        offset += n as u64;
        emit(&mut partial, &more, filter, render)?;
    }
}

fn emit(
    partial: &mut String,
    more: &str,
    filter: &Filter,
    render: &dyn Fn(&str) -> String,
) -> Result<(), Failure> {
    partial.push_str(more);
    let mut text = String::new();
    while let Some(i) = partial.find('\n') {
        let line: String = partial.drain(..=i).collect();
        let l = line.trim_end();
        if filter.keeps(l) {
            text.push_str(&render(l));
            text.push('\n');
        }
    }
    out(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DENY: &str = r#"{"time":"2026-11-29T04:00:00.000Z","node":"node-a","event":"decision","verdict":"deny","severity":"alert","kind":"tenancy","namespace":"tenant-b","object":"tenancy","rule":"different tenants: VNID 11 (tenant-a) to VNID 12 (tenant-b)","src":{"namespace":"tenant-a","pod":"client","ip":"10.128.0.2","port":40000},"dst":{"namespace":"tenant-b","pod":"server","ip":"10.128.0.3","port":8080},"protocol":"udp","src_vnid":11,"dst_vnid":12,"packets":1}"#;

    #[test]
    fn filters_read_both_formats() {
        let f = |ns: Option<&str>, v: Option<&str>| Filter {
            namespace: ns.map(String::from),
            verdict: v.map(String::from),
        };
        assert!(f(Some("tenant-a"), None).keeps(DENY));
        assert!(f(Some("tenant-b"), Some("deny")).keeps(DENY));
        assert!(!f(Some("other"), None).keeps(DENY));
        assert!(!f(None, Some("allow")).keeps(DENY));
        let text = "<129>1 2026-11-29T04:00:00.000Z node-a sdn-agent 7 audit - event=decision verdict=deny kind=tenancy namespace=tenant-b proto=udp src=\"tenant-a/client 10.128.0.2:40000\" dst=\"tenant-b/server 10.128.0.3:8080\" packets=1";
        assert!(f(Some("tenant-a"), Some("deny")).keeps(text));
        assert!(f(Some("tenant-b"), None).keeps(text));
        assert!(!f(Some("tenant"), None).keeps(text));
        assert!(!f(None, Some("allow")).keeps(text));
        let suppressed =
            r#"{"event":"suppressed","verdict":"deny","namespaces":["x","tenant-b"],"packets":9}"#;
        assert!(f(Some("tenant-b"), None).keeps(suppressed));
    }

    #[test]
    fn a_decision_reads_as_one_line_of_words() {
        let h = human(DENY);
        assert_eq!(
            h,
            "2026-11-29T04:00:00.000Z node-a decision DENY tenancy [tenant-b] tenant-a/client 10.128.0.2:40000 -> tenant-b/server 10.128.0.3:8080 udp: tenancy, different tenants: VNID 11 (tenant-a) to VNID 12 (tenant-b)"
        );
    }
}
