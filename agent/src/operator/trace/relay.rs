//! A live trace across nodes: the node that sends the packet asks the node it goes to over
//! VXLAN to watch for it, and that node's agent reports the packet's arrival and fate.
//!
//! The two agents talk through the cluster state, as every other object here does: in
//! standalone mode a request file in `<state directory>/live-traces/` (`<name>.request.json`)
//! that the target node's agent finds (it looks every [`POLL`]) and answers in
//! `<name>.reply.json`; in Kubernetes mode a ConfigMap `live-trace-<name>` in
//! `liveTraceNamespace`, labelled with the target node (each agent watches the ones labelled
//! for it), answered in `live-trace-<name>-reply`. The target answers first "armed" (its rows
//! are in and its datapath cache follows them), then with what its br0 did. The sending node sends the packet once the target is armed (or
//! says that it did not answer), and removes both files when it is done; a request past its
//! expiry is never armed, and a target removes the files of an expired request it finds.
//!
//! On the target, the trace's rows match the same mark and source, and the packet arrives by
//! VXLAN ([`flows::live_trace::Known::tunneled`]); its reports go to another controller id than
//! the node's own traces ([`flows::live_trace::Probe::relay`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flows::live_trace::{Known, Probe, Transport};
use k8s_openapi::api::core::v1::ConfigMap;
use local_api::{LiveHop, Outcome};
use serde::{Deserialize, Serialize};

use super::armed;
use crate::operator::observe::NodeView;

/// How often a node looks for requests.
pub(super) const POLL: Duration = Duration::from_millis(100);
/// How long the target watches for the packet once armed.
const WATCH: Duration = Duration::from_millis(800);
/// After the report that ends the packet's path, how long the target waits for stragglers.
const SETTLE: Duration = Duration::from_millis(100);
/// How long a request lives.
pub(super) const LIFETIME: Duration = Duration::from_secs(10);

/// What the sending node asks of the target.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Request {
    /// Unique: `<origin node>-<trace id>`.
    pub name: String,
    /// The node that sends the packet.
    pub origin: String,
    /// The node asked to watch.
    pub target: String,
    /// The mark.
    pub dscp: u8,
    /// The packet's source and destination.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// `icmp`, `tcp` or `udp`.
    pub protocol: String,
    /// The source port (TCP, UDP).
    #[serde(default)]
    pub src_port: u16,
    /// The destination port (TCP, UDP).
    #[serde(default)]
    pub dst_port: u16,
    /// Seconds since the epoch after which nobody arms it.
    pub expires: u64,
}

/// The target's answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Reply {
    /// The node that answers.
    pub node: String,
    /// Its rows are in: the packet may go.
    pub armed: bool,
    /// It has finished watching.
    pub done: bool,
    /// What the packet met there.
    #[serde(default)]
    pub hops: Vec<LiveHop>,
    /// Where it ended there.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// In words.
    #[serde(default)]
    pub verdict: String,
    /// Why it could not watch.
    #[serde(default)]
    pub error: Option<String>,
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where requests and replies are: the standalone state directory's `live-traces/`, or in
/// Kubernetes mode ConfigMaps in `liveTraceNamespace`.
pub(super) async fn board(view: &NodeView) -> Result<Board, String> {
    match &view.config.cluster_state {
        cluster::config::ClusterStateSource::Standalone(dir) => {
            Ok(Board::Dir(dir.join("live-traces")))
        }
        cluster::config::ClusterStateSource::Kubernetes => {
            let client = cluster::kube::client(view.config.kubeconfig.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            Ok(Board::Kube(kube::Api::namespaced(
                client,
                &view.config.live_trace_namespace,
            )))
        }
    }
}

/// The label every live-trace ConfigMap has (`request` or `reply`).
const KIND_LABEL: &str = "sdn.openshift.io/live-trace";
/// The label naming the node a request is for.
const TARGET_LABEL: &str = "sdn.openshift.io/live-trace-target";

/// A node's value of [`TARGET_LABEL`]: a hash of its name (a label value holds 63
/// characters, a node name 253; the request itself names the node, and that is checked).
fn target_label(node: &str) -> String {
    format!("{:08x}", fnv(node))
}

/// Where requests and replies are kept.
pub(super) enum Board {
    /// Files: `<name>.request.json`, `<name>.reply.json`.
    Dir(PathBuf),
    /// ConfigMaps: `live-trace-<name>` (request) and `live-trace-<name>-reply`.
    Kube(kube::Api<ConfigMap>),
}

fn config_map(name: String, labels: &[(&str, &str)], key: &str, json: String) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some([(key.to_string(), json)].into_iter().collect()),
        ..Default::default()
    }
}

impl Board {
    /// Posts a request (a reply left under its name goes first).
    pub(super) async fn post(&self, req: &Request) -> Result<(), String> {
        let json = serde_json::to_string(req).map_err(|e| e.to_string())?;
        match self {
            Board::Dir(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let _ = std::fs::remove_file(dir.join(format!("{}.reply.json", req.name)));
                let path = dir.join(format!("{}.request.json", req.name));
                cluster::files::write(
                    &path,
                    json.as_bytes(),
                    0o644,
                    cluster::files::Durability::Process,
                )
                .map_err(|e| format!("{}: {e}", path.display()))
            }
            Board::Kube(api) => {
                let reply = format!("live-trace-{}-reply", req.name);
                let _ = api.delete(&reply, &Default::default()).await;
                let cm = config_map(
                    format!("live-trace-{}", req.name),
                    &[
                        (KIND_LABEL, "request"),
                        (TARGET_LABEL, &target_label(&req.target)),
                    ],
                    "request.json",
                    json,
                );
                api.create(&Default::default(), &cm)
                    .await
                    .map(drop)
                    .map_err(|e| format!("creating ConfigMap live-trace-{}: {e}", req.name))
            }
        }
    }

    /// The reply to request `name`, when there is one.
    pub(super) async fn reply(&self, name: &str) -> Option<Reply> {
        let bytes = match self {
            Board::Dir(dir) => std::fs::read(dir.join(format!("{name}.reply.json"))).ok()?,
            Board::Kube(api) => api
                .get_opt(&format!("live-trace-{name}-reply"))
                .await
                .ok()??
                .data?
                .remove("reply.json")?
                .into_bytes(),
        };
        serde_json::from_slice(&bytes).ok()
    }

    /// Whether request `name` is still there (its sender has not finished or given up).
    async fn requested(&self, name: &str) -> bool {
        match self {
            Board::Dir(dir) => dir.join(format!("{name}.request.json")).exists(),
            Board::Kube(api) => api
                .get_opt(&format!("live-trace-{name}"))
                .await
                .is_ok_and(|cm| cm.is_some()),
        }
    }

    /// Writes the reply to request `name`, unless its sender has removed the request (a reply
    /// then would be left behind; one written as the request went is removed again).
    async fn answer(&self, name: &str, reply: &Reply) {
        if !self.requested(name).await {
            return;
        }
        let done = match serde_json::to_string(reply) {
            Err(e) => Err(e.to_string()),
            Ok(json) => match self {
                Board::Dir(dir) => cluster::files::write(
                    &dir.join(format!("{name}.reply.json")),
                    json.as_bytes(),
                    0o644,
                    cluster::files::Durability::Process,
                )
                .map_err(|e| e.to_string()),
                Board::Kube(api) => {
                    let cm = config_map(
                        format!("live-trace-{name}-reply"),
                        &[(KIND_LABEL, "reply")],
                        "reply.json",
                        json,
                    );
                    let pp = kube::api::PatchParams::apply("sdn-agent").force();
                    api.patch(
                        &format!("live-trace-{name}-reply"),
                        &pp,
                        &kube::api::Patch::Apply(&cm),
                    )
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
                }
            },
        };
        if let Err(e) = done {
            tracing::warn!(trace = name, error = %e, "a live trace's reply could not be written");
            return;
        }
        // The sender may have removed its request (and looked for no reply) while this one
        // was written: nobody would remove the reply then.
        if !self.requested(name).await {
            self.remove(name).await;
        }
    }

    /// Removes request `name` and its reply.
    pub(super) async fn remove(&self, name: &str) {
        match self {
            Board::Dir(dir) => {
                let _ = std::fs::remove_file(dir.join(format!("{name}.request.json")));
                let _ = std::fs::remove_file(dir.join(format!("{name}.reply.json")));
            }
            Board::Kube(api) => {
                for n in [
                    format!("live-trace-{name}"),
                    format!("live-trace-{name}-reply"),
                ] {
                    let _ = api.delete(&n, &Default::default()).await;
                }
            }
        }
    }

    /// The requests for `node` in the directory (unreadable files are skipped: a writer may be
    /// mid-rename).
    fn files_for(dir: &std::path::Path, node: &str) -> Vec<Request> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".request.json"))
            .filter_map(|e| serde_json::from_slice::<Request>(&std::fs::read(e.path()).ok()?).ok())
            .filter(|r| r.target == node)
            .collect()
    }
}

/// Waits until the reply to request `name` is `ready` (or `give_up`); the reply then.
pub(super) async fn await_reply(
    board: &Board,
    name: &str,
    give_up: Instant,
    ready: impl Fn(&Reply) -> bool,
) -> Option<Reply> {
    loop {
        let r = board.reply(name).await;
        if r.as_ref().is_some_and(&ready) || Instant::now() >= give_up {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The target's side, for the life of the agent: finds the requests for this node (a look
/// at the directory every [`POLL`]; a watch of the ConfigMaps labelled for it) and watches for
/// each one's packet.
pub(crate) async fn answer_forever(view: Arc<NodeView>) {
    let board = loop {
        match board(&view).await {
            Ok(b) => break Arc::new(b),
            Err(e) => {
                tracing::warn!(error = %e, "live traces from other nodes cannot be answered yet; retrying");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    };
    let node = view.config.node_name.clone();
    // The requests for this node already taken, with when each expires (the sweep's list in
    // Kubernetes mode: no LIST needed).
    let mut taken: BTreeMap<String, u64> = BTreeMap::new();
    let take = |req: Request, taken: &mut BTreeMap<String, u64>| {
        if req.target != node || taken.insert(req.name.clone(), req.expires).is_some() {
            return;
        }
        let (view, board) = (view.clone(), board.clone());
        tokio::spawn(async move {
            if req.expires < now_secs() {
                // Its sender is gone: nobody else removes it.
                board.remove(&req.name).await;
                return;
            }
            let reply = watch(&view, &board, &req).await;
            board.answer(&req.name, &reply).await;
        });
    };
    match &*board {
        Board::Dir(dir) => loop {
            tokio::time::sleep(POLL).await;
            let (requests, expired): (Vec<_>, Vec<_>) = Board::files_for(dir, &node)
                .into_iter()
                .partition(|r| r.expires >= now_secs());
            // Their senders are gone (a killed agent): nobody else removes them.
            for r in expired {
                board.remove(&r.name).await;
            }
            taken.retain(|n, _| requests.iter().any(|r| &r.name == n));
            for req in requests {
                take(req, &mut taken);
            }
        },
        Board::Kube(api) => {
            use futures::StreamExt;
            use kube::runtime::WatchStreamExt;
            let selector = format!(
                "{KIND_LABEL}=request,{TARGET_LABEL}={}",
                target_label(&node)
            );
            let cfg = kube::runtime::watcher::Config::default().labels(&selector);
            let mut events =
                std::pin::pin!(kube::runtime::watcher(api.clone(), cfg).default_backoff());
            let mut sweep = tokio::time::interval(LIFETIME);
            loop {
                let ev = tokio::select! {
                    ev = events.next() => match ev {
                        Some(ev) => ev,
                        None => break,
                    },
                    _ = sweep.tick() => {
                        // Requests whose senders are gone (a killed agent).
                        let now = now_secs();
                        let expired: Vec<String> = taken
                            .iter()
                            .filter(|(_, e)| **e < now)
                            .map(|(n, _)| n.clone())
                            .collect();
                        for n in expired {
                            board.remove(&n).await;
                            taken.remove(&n);
                        }
                        continue;
                    }
                };
                let cm = match ev {
                    Ok(kube::runtime::watcher::Event::Apply(cm))
                    | Ok(kube::runtime::watcher::Event::InitApply(cm)) => cm,
                    Ok(kube::runtime::watcher::Event::Delete(cm)) => {
                        if let Some(n) = cm
                            .metadata
                            .name
                            .as_deref()
                            .and_then(|n| n.strip_prefix("live-trace-"))
                        {
                            taken.remove(n);
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "the live-trace watch broke; it resumes");
                        continue;
                    }
                };
                let req = cm
                    .data
                    .and_then(|mut d| d.remove("request.json"))
                    .and_then(|j: String| serde_json::from_str::<Request>(&j).ok());
                match req {
                    Some(req) => take(req, &mut taken),
                    None => tracing::warn!(
                        config_map = cm.metadata.name.as_deref().unwrap_or(""),
                        "a live-trace request this agent cannot read; ignored"
                    ),
                }
            }
        }
    }
}

/// Arms this node for `req`'s packet, says so, watches, and returns what its br0 did.
async fn watch(view: &NodeView, board: &Board, req: &Request) -> Reply {
    let node = view.config.node_name.clone();
    let failed = |e: String| Reply {
        node: node.clone(),
        done: true,
        error: Some(e),
        ..Reply::default()
    };
    if !flows::live_trace::TAGS.contains(&req.dscp) {
        return failed(format!(
            "DSCP {} is not a live trace's mark (4k+3): refused",
            req.dscp
        ));
    }
    let transport = match req.protocol.as_str() {
        "icmp" => Transport::Icmp,
        "tcp" => Transport::Tcp(req.src_port),
        "udp" => Transport::Udp(req.src_port),
        other => return failed(format!("unknown protocol {other:?}")),
    };
    let probe = Probe {
        id: fnv(&req.name),
        tag: req.dscp,
        src: req.src,
        transport,
        relay: true,
    };
    let pods = view.pods.list().await;
    let dst_pod = pods
        .iter()
        .find(|p| p.ip.map(IpAddr::V4) == Some(req.dst) || p.ip6.map(IpAddr::V6) == Some(req.dst));
    let known = Known {
        dst: Some(req.dst),
        dst_port: (req.dst_port != 0).then_some(req.dst_port),
        in_ports: Some(vec![flows::base::VXLAN_PORT, flows::base::TUN_PORT]),
        out_port: Some(dst_pod.map_or(0, |p| p.ofport)),
        src_port: None,
        tunneled: true,
    };
    let mut armed = match armed::arm(view, &probe, &known, true).await {
        Ok(a) => a,
        Err(e) => return failed(e.to_string()),
    };
    board
        .answer(
            &req.name,
            &Reply {
                node: node.clone(),
                armed: true,
                ..Reply::default()
            },
        )
        .await;
    let start = Instant::now();
    let seen = armed
        .collect(start, start + WATCH, SETTLE, |n, rows| {
            armed::ends_path(n, rows, true)
        })
        .await;
    let rows = std::mem::take(&mut armed.rows);
    armed.disarm().await;
    let owners = view.cookie_owners().await;
    let (hops, vxlan) = armed::hops(&rows, &owners, &seen);
    let pod_at = |port: u32| {
        pods.iter()
            .find(|p| p.ofport == port)
            .map(|p| format!("{}/{}", p.namespace, p.name))
    };
    let (outcome, verdict) = match armed::ending(&rows, &seen, vxlan.as_ref(), &pod_at) {
        Some((o, words, _)) => (Some(o), words),
        None if seen.is_empty() => (
            None,
            format!(
                "the packet did not arrive within {} ms of this node being ready for it",
                WATCH.as_millis()
            ),
        ),
        None => (Some(Outcome::Dropped), armed::no_ending(&seen)),
    };
    Reply {
        node,
        armed: true,
        done: true,
        hops,
        outcome,
        verdict,
        error: None,
    }
}

/// A 32-bit id from a request's name (the rows' cookie on the target).
fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, target: &str, expires: u64) -> Request {
        Request {
            name: name.into(),
            origin: "node-1".into(),
            target: target.into(),
            dscp: 3,
            src: "10.128.0.2".parse().unwrap(),
            dst: "10.129.0.2".parse().unwrap(),
            protocol: "tcp".into(),
            src_port: 50_000,
            dst_port: 8080,
            expires,
        }
    }

    #[test]
    fn requests_are_found_by_their_node_and_replies_cleared_when_posted_again() {
        let dir = std::env::temp_dir().join(format!("sdn-relay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let board = Board::Dir(dir.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = request("node-1-0000002a", "node-2", now_secs() + 10);
            board.post(&r).await.unwrap();
            board
                .post(&request("node-1-0000002b", "node-3", 0))
                .await
                .unwrap();
            assert_eq!(Board::files_for(&dir, "node-2"), vec![r.clone()]);
            // A reply is written only while its request is there.
            let reply = Reply {
                node: "node-2".into(),
                armed: true,
                ..Reply::default()
            };
            board.answer(&r.name, &reply).await;
            assert_eq!(board.reply(&r.name).await, Some(reply.clone()));
            // The same name posted again starts without the old reply.
            board.post(&r).await.unwrap();
            assert_eq!(board.reply(&r.name).await, None);
            board.remove(&r.name).await;
            board.answer(&r.name, &reply).await;
            assert_eq!(board.reply(&r.name).await, None, "a late reply was written");
            assert!(Board::files_for(&dir, "node-2").is_empty());
        });
        std::fs::remove_dir_all(&dir).unwrap();
        // A label value holds 63 characters; a node name may have 253.
        let long = "n".repeat(253);
        assert_eq!(target_label(&long).len(), 8);
        assert_ne!(target_label("node-1"), target_label("node-2"));
    }
}
