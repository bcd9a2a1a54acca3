//! The HTTP side of the fake API server: routing Kubernetes REST paths to the store, and watch
//! streams.
//!
//! Plain HTTP/1.1 (hyper 1), JSON only: what kube-rs and client-go speak to a server without TLS.
//! Every request holds the store lock for its whole read-modify-write, so requests are atomic
//! and totally ordered. A watch registers its subscription under that lock, then a task per
//! stream turns store events into newline-delimited `{"type":..,"object":..}` lines sent as
//! separate HTTP chunks; hyper flushes each one as soon as the body has nothing more ready, so a
//! client sees every event when it happens.
//!
//! Limits: no authentication, authorization, admission, CBOR, table output or HTTP/2; protobuf
//! only for the Namespace kubectl creates, and an empty OpenAPI v2 document (`proto`);
//! a list with `resourceVersionMatch=Exact` is served from the current state (a real server
//! serves that exact past state).

use super::patch::{json_patch, merge_patch};
use super::resources::{Registry, ResourceType};
use super::select::{FieldSelector, LabelSelector};
use super::store::{ApiError, Event, EventType, Part, Store, WatchMsg};
use super::Requests;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest request body accepted (kube-apiserver's limit).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Tunables of a fake API server.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many events the history keeps; a watch from a version older than the history gets
    /// a 410 ERROR event. Default 10,000.
    pub history_limit: usize,
    /// How often watches that asked for bookmarks get one. Default 1 s.
    pub bookmark_interval: Duration,
    /// Watch duration when the request gives no `timeoutSeconds`. Default 30 min.
    pub default_watch_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(1),
            default_watch_timeout: Duration::from_secs(1800),
        }
    }
}

/// State shared by the server tasks and the test-side handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) registry: RwLock<Registry>,
    pub(crate) requests: Mutex<Requests>,
    pub(crate) options: Options,
    pub(crate) addr: SocketAddr,
    /// Plurals whose lists without a field selector are held (a slow list of the whole
    /// cluster) until released: [`super::FakeApi::hold_lists`].
    pub(crate) held: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    /// The types the stored CustomResourceDefinitions serve ([`Shared::serve_crds`]).
    crd_types: Mutex<Vec<ResourceType>>,
}

impl Shared {
    pub(crate) fn new(addr: SocketAddr, options: Options) -> Self {
        Shared {
            store: Mutex::new(Store::new(options.history_limit)),
            registry: RwLock::new(Registry::default()),
            requests: Mutex::new(Requests::default()),
            options,
            addr,
            held: tokio::sync::watch::Sender::new(std::collections::BTreeSet::new()),
            crd_types: Mutex::new(Vec::new()),
        }
    }

    /// After a write of a CustomResourceDefinition: serve what the stored ones define, and
    /// stop serving what a deleted one defined.
    pub(crate) fn serve_crds(&self) {
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        let Some(ty) = reg
            .by_plural("customresourcedefinitions")
            .find(|t| t.group == super::resources::CRD_GROUP)
            .cloned()
        else {
            return;
        };
        let crds = self.store().all(&ty, None);
        let mut before = self.crd_types.lock().unwrap_or_else(|e| e.into_inner());
        *before = reg.serve_crds(&crds, &before);
    }

    /// The store, even if a thread panicked while holding it (the store stays consistent: every
    /// method validates before it changes anything).
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn registry(&self) -> Registry {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record(&self, verb: &str, path: &str) {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(verb, path);
    }
}

/// The response body: a whole JSON document, or a watch stream.
pub(crate) type Body = Either<Full<Bytes>, ChannelBody>;

/// A streamed body fed by a channel; each message is one chunk.
#[derive(Debug)]
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut resp = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &e.status())
}

/// Decodes `%XX` escapes and `+` (query strings); invalid escapes are kept as they are.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parsed query parameters.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Query(
            q.unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k, true), percent_decode(v, true))
                })
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }

    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: only \"All\" is supported"
            ))),
        }
    }
}

/// What a path names.
#[derive(Debug)]
enum Route {
    /// A discovery document.
    Doc(Value),
    /// A resource collection or object.
    Res(Target),
}

#[derive(Debug)]
struct Target {
    ty: ResourceType,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn route(reg: &Registry, server: &str, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode(s, false))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let doc = |d: Option<Value>| d.map(Route::Doc).ok_or_else(ApiError::no_resource);
    match segs.as_slice() {
        ["version"] => Ok(Route::Doc(json!({
            "major": "1",
            "minor": "34",
            "gitVersion": "v1.34.0-fake",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24",
            "compiler": "gc",
            "platform": "linux/amd64",
        }))),
        ["api"] => Ok(Route::Doc(reg.api_versions(server))),
        ["apis"] => Ok(Route::Doc(reg.group_list())),
        ["apis", g] => doc(reg.group(g)),
        ["api", v] => doc(reg.resource_list("", v)),
        ["apis", g, v] => doc(reg.resource_list(g, v)),
        ["api", v, rest @ ..] => resource(reg, "", v, rest),
        ["apis", g, v, rest @ ..] => resource(reg, g, v, rest),
        _ => Err(ApiError::no_resource()),
    }
}

fn resource(reg: &Registry, group: &str, version: &str, rest: &[&str]) -> Result<Route, ApiError> {
    let (ty, ns, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if reg
                .find(group, version, plural)
                .is_some_and(|t| t.namespaced) =>
        {
            let ty = reg.find(group, version, plural).cloned();
            (ty, Some(ns.to_string()), tail)
        }
        [plural, tail @ ..] => {
            let ty = reg.find(group, version, plural).cloned();
            // A namespaced object must be addressed through its namespace.
            if ty.as_ref().is_some_and(|t| t.namespaced) && !tail.is_empty() {
                return Err(ApiError::no_resource());
            }
            (ty, None, tail)
        }
        [] => return Err(ApiError::no_resource()),
    };
    let ty = ty.ok_or_else(ApiError::no_resource)?;
    let (name, sub) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, "status"] if ty.status_subresource => {
            (Some(name.to_string()), Some("status".to_string()))
        }
        _ => return Err(ApiError::no_resource()),
    };
    Ok(Route::Res(Target { ty, ns, name, sub }))
}

/// The Kubernetes verb of a request, as audit logs and RBAC name it.
fn verb(method: &Method, route: &Result<Route, ApiError>, q: &Query) -> &'static str {
    let named = matches!(route, Ok(Route::Res(Target { name: Some(_), .. })));
    match (method, route) {
        (_, Err(_)) => "unknown",
        (&Method::GET, Ok(Route::Doc(_))) => "get",
        (&Method::GET, _) if named => "get",
        (&Method::GET, _) if q.flag("watch") => "watch",
        (&Method::GET, _) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) if named => "delete",
        (&Method::DELETE, _) => "deletecollection",
        _ => "unknown",
    }
}

/// Serves one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let q = Query::parse(req.uri().query());
    let reg = shared.registry();
    let route = route(&reg, &shared.addr.to_string(), &path);
    let verb = verb(&method, &route, &q);
    shared.record(verb, &path);
    tracing::debug!(%method, %path, query = ?req.uri().query(), verb, "fake api request");
    let resp = match route {
        // The OpenAPI document kubectl validates against (see `proto`): empty.
        Err(_) if path == "/openapi/v2" && method == Method::GET => {
            let mut r = Response::new(Either::Left(Full::new(Bytes::new())));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(super::proto::OPENAPI_V2_CONTENT_TYPE),
            );
            Ok(r)
        }
        Err(e) => Err(e),
        Ok(Route::Doc(d)) if method == Method::GET => Ok(json_response(StatusCode::OK, &d)),
        Ok(Route::Doc(_)) => Err(method_not_allowed(&method)),
        Ok(Route::Res(t)) => {
            let crd = t.ty.plural == "customresourcedefinitions";
            let r = serve_resource(&shared, t, verb, q, req).await;
            if crd && r.is_ok() && !matches!(verb, "get" | "list" | "watch") {
                shared.serve_crds();
            }
            r
        }
    };
    Ok(resp.unwrap_or_else(|e| {
        tracing::debug!(%method, %path, code = e.code, message = %e.message, "fake api error");
        error_response(&e)
    }))
}

fn method_not_allowed(m: &Method) -> ApiError {
    ApiError::other(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource: {m}"),
    )
}

async fn read_body(req: Request<Incoming>) -> Result<(String, Bytes), ApiError> {
    let ctype = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::other(413, "RequestEntityTooLarge", format!("request body: {e}")))?
        .to_bytes();
    Ok((ctype, body))
}

/// Parses a JSON (or YAML) object body.
fn parse_object(ctype: &str, body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = match ctype {
        "" | "application/json" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid json: {e}")))?,
        "application/yaml" | "application/apply-patch+yaml" => serde_saphyr::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid yaml: {e}")))?,
        "application/vnd.kubernetes.protobuf" => super::proto::decode(body)
            .map_err(|e| ApiError::other(415, "UnsupportedMediaType", e))?,
        other => {
            return Err(ApiError::other(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other:?})"),
            ))
        }
    };
    Ok(v)
}

fn selectors(ty: &ResourceType, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
    let f = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), |f| {
        ty.selectable(f)
    })
    .map_err(|e| ApiError::bad_request(e.0))?;
    Ok((l, f))
}

fn parse_rv(s: Option<&str>) -> Result<Option<u64>, ApiError> {
    match s {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: {s:?}: must be a number"
            ))
        }),
    }
}

fn list_doc(ty: &ResourceType, rv: u64, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": ty.api_version(),
        "kind": format!("{}List", ty.kind),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": Value::Array(items),
    })
}

async fn serve_resource(
    shared: &Arc<Shared>,
    t: Target,
    verb: &str,
    q: Query,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Target { ty, ns, name, sub } = t;
    let ns = ns.as_deref();
    let part = if sub.is_some() {
        Part::Status
    } else {
        Part::Main
    };
    match (verb, name) {
        ("get", Some(name)) => {
            let store = shared.store();
            let obj = store
                .get(&ty, ns, &name)
                .ok_or_else(|| ApiError::not_found(&ty, &name))?;
            Ok(json_response(StatusCode::OK, obj))
        }
        ("list", None) => {
            if q.get("fieldSelector").unwrap_or_default().is_empty() {
                let mut held = shared.held.subscribe();
                // Ends when released (or the server stops).
                let _ = held.wait_for(|h| !h.contains(&ty.plural)).await;
            }
            list(shared, &ty, ns, &q)
        }
        ("watch", None) => watch(shared, &ty, ns, &q),
        ("create", None) => {
            let dry = q.dry_run()?;
            let (ctype, body) = read_body(req).await?;
            let obj = parse_object(&ctype, &body)?;
            let created = shared.store().create(&ty, ns, obj, dry)?;
            Ok(json_response(StatusCode::CREATED, &created))
        }
        ("update", Some(name)) => {
            let dry = q.dry_run()?;
            let (ctype, body) = read_body(req).await?;
            let obj = parse_object(&ctype, &body)?;
            let updated = shared.store().update(&ty, ns, &name, obj, part, dry)?;
            Ok(json_response(StatusCode::OK, &updated))
        }
        ("patch", Some(name)) => {
            let dry = q.dry_run()?;
            let (ctype, body) = read_body(req).await?;
            let (code, obj) = patch(shared, &ty, ns, &name, part, &ctype, &body, &q, dry)?;
            Ok(json_response(code, &obj))
        }
        ("delete", Some(name)) => {
            let (ctype, body) = read_body(req).await?;
            let opts = if body.iter().all(u8::is_ascii_whitespace) {
                Value::Null
            } else {
                parse_object(&ctype, &body)?
            };
            let dry = q.dry_run()?
                || opts["dryRun"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == "All"));
            let uid = opts["preconditions"]["uid"].as_str();
            let rv = opts["preconditions"]["resourceVersion"].as_str();
            let mut store = shared.store();
            let gone = store.delete(&ty, ns, &name, uid, rv, dry)?;
            let pending = store.get(&ty, ns, &name).is_some() && !dry;
            let code = if pending {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, &gone))
        }
        ("deletecollection", None) => {
            let dry = q.dry_run()?;
            let (l, f) = selectors(&ty, &q)?;
            let mut store = shared.store();
            let victims = store.all(&ty, ns);
            let mut gone = Vec::new();
            for o in victims.iter().filter(|o| l.matches(o) && f.matches(o)) {
                let n = o["metadata"]["name"].as_str().unwrap_or_default();
                let ons = o["metadata"]["namespace"].as_str();
                gone.push(store.delete(&ty, ons, n, None, None, dry)?);
            }
            let rv = store.resource_version();
            Ok(json_response(StatusCode::OK, &list_doc(&ty, rv, gone)))
        }
        _ => Err(method_not_allowed(req.method())),
    }
}

fn list(
    shared: &Arc<Shared>,
    ty: &ResourceType,
    ns: Option<&str>,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let (l, f) = selectors(ty, q)?;
    let rv = parse_rv(q.get("resourceVersion"))?;
    match q.get("resourceVersionMatch") {
        None | Some("") => {}
        Some("NotOlderThan" | "Exact") if rv.is_none() => {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ))
        }
        Some("NotOlderThan" | "Exact") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}"
            )))
        }
    }
    let limit = match q.get("limit") {
        None | Some("") => None,
        Some(s) => Some(s.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!("limit: Invalid value: {s:?}: must be a number"))
        })?),
    };
    let cont = q.get("continue").filter(|c| !c.is_empty());
    let mut store = shared.store();
    if let Some(rv) = rv {
        if rv > store.resource_version() {
            return Err(ApiError::other(
                504,
                "Timeout",
                format!(
                    "Too large resource version: {rv}, current: {}",
                    store.resource_version()
                ),
            ));
        }
    }
    let page = store.list(ty, ns, |o| l.matches(o) && f.matches(o), limit, cont)?;
    let mut doc = list_doc(ty, page.rv, page.items);
    if let Some(c) = page.continue_token {
        doc["metadata"]["continue"] = json!(c);
    }
    if let Some(n) = page.remaining {
        doc["metadata"]["remainingItemCount"] = json!(n);
    }
    Ok(json_response(StatusCode::OK, &doc))
}

#[allow(clippy::too_many_arguments)]
fn patch(
    shared: &Arc<Shared>,
    ty: &ResourceType,
    ns: Option<&str>,
    name: &str,
    part: Part,
    ctype: &str,
    body: &[u8],
    q: &Query,
    dry: bool,
) -> Result<(StatusCode, Value), ApiError> {
    let apply = ctype == "application/apply-patch+yaml";
    let patch: Value = match ctype {
        "application/merge-patch+json"
        | "application/strategic-merge-patch+json"
        | "application/json-patch+json" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid json: {e}")))?,
        "application/apply-patch+yaml" => {
            if q.get("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    ty,
                    name,
                    "fieldManager: Required value: is required for apply patch",
                ));
            }
            serde_saphyr::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the apply body is not valid yaml: {e}")))?
        }
        other => {
            return Err(ApiError::other(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"),
            ))
        }
    };
    let mut store = shared.store();
    let cur = store.get(ty, ns, name).cloned();
    let Some(cur) = cur else {
        if apply && part == Part::Main {
            let mut obj = patch;
            if !obj.is_object() {
                return Err(ApiError::bad_request("the apply body must be an object"));
            }
            match obj["metadata"]["name"].as_str() {
                Some(n) if n != name => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )))
                }
                _ => obj["metadata"]["name"] = json!(name),
            }
            let created = store.create(ty, ns, obj, dry)?;
            return Ok((StatusCode::CREATED, created));
        }
        return Err(ApiError::not_found(ty, name));
    };
    let mut new = cur.clone();
    if ctype == "application/json-patch+json" {
        json_patch(&mut new, &patch).map_err(|e| ApiError::invalid(ty, name, &e.0))?;
    } else {
        if !patch.is_object() {
            return Err(ApiError::bad_request("a merge patch must be a json object"));
        }
        merge_patch(&mut new, &patch);
    }
    let updated = store.update(ty, ns, name, new, part, dry)?;
    Ok((StatusCode::OK, updated))
}

/// How one watch stream filters and frames events.
#[derive(Debug)]
struct WatchSpec {
    ty: ResourceType,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchSpec {
    fn selects(&self, o: &Value) -> bool {
        let ns_ok = match &self.ns {
            Some(ns) => o["metadata"]["namespace"].as_str() == Some(ns.as_str()),
            None => true,
        };
        ns_ok && self.labels.matches(o) && self.fields.matches(o)
    }

    /// The wire event for a store event, if this watch sees it. A change that takes an object
    /// into the selection is ADDED, out of it DELETED, as kube-apiserver does.
    fn line(&self, ev: &Event) -> Option<Bytes> {
        let now = self.selects(&ev.object);
        let kind = match ev.kind {
            EventType::Added | EventType::Deleted => now.then_some(ev.kind.as_str()),
            EventType::Modified => {
                let was = ev.prev.as_ref().is_some_and(|p| self.selects(p));
                match (was, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }?;
        Some(event_line(kind, &ev.object))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut obj = json!({
            "kind": self.ty.kind,
            "apiVersion": self.ty.api_version(),
            "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null},
        });
        if initial_end {
            obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        event_line("BOOKMARK", &obj)
    }
}

fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch(
    shared: &Arc<Shared>,
    ty: &ResourceType,
    ns: Option<&str>,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(ty, q)?;
    let rv = q.get("resourceVersion").unwrap_or_default();
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    match (q.get("resourceVersionMatch"), send_initial) {
        (None | Some(""), false) | (Some("NotOlderThan"), true) => {}
        (other, true) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires resourceVersionMatch=NotOlderThan, got {other:?}"
            )))
        }
        (Some(other), false) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Forbidden: {other:?} is only allowed for watch with sendInitialEvents=true"
            )))
        }
    }
    if send_initial && !bookmarks {
        return Err(ApiError::bad_request(
            "allowWatchBookmarks: Required value: sendInitialEvents requires allowWatchBookmarks=true",
        ));
    }
    let from = match rv {
        "" | "0" => None,
        _ if send_initial => None,
        s => parse_rv(Some(s))?,
    };
    let timeout =
        match q.get("timeoutSeconds") {
            None | Some("") => shared.options.default_watch_timeout,
            Some(s) => Duration::from_secs(s.parse().map_err(|_| {
                ApiError::bad_request(format!("timeoutSeconds: Invalid value: {s:?}"))
            })?),
        };
    let spec = WatchSpec {
        ty: ty.clone(),
        ns: ns.map(str::to_string),
        labels,
        fields,
    };
    let (sub_tx, sub_rx) = mpsc::unbounded_channel();
    let start = shared.store().watch(ty, from, sub_tx.clone());
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(256);
    let shared = shared.clone();
    match start {
        Ok((backlog, start_rv)) => {
            tokio::spawn(pump(
                shared,
                spec,
                backlog,
                send_initial.then_some(start_rv),
                sub_rx,
                sub_tx,
                out_tx,
                bookmarks,
                timeout,
            ));
        }
        Err(e) => {
            // kube-apiserver answers a watch from a forgotten version with 200 and one ERROR event.
            let line = event_line("ERROR", &e.status());
            tokio::spawn(async move {
                let _ = out_tx.send(line).await;
            });
        }
    }
    let mut resp = Response::new(Either::Right(ChannelBody { rx: out_rx }));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// Feeds one watch stream until it times out, is closed or expired, or the client goes away.
#[allow(clippy::too_many_arguments)]
async fn pump(
    shared: Arc<Shared>,
    spec: WatchSpec,
    backlog: Vec<Arc<Event>>,
    initial_end: Option<u64>,
    mut sub_rx: mpsc::UnboundedReceiver<WatchMsg>,
    sub_tx: mpsc::UnboundedSender<WatchMsg>,
    out: mpsc::Sender<Bytes>,
    bookmarks: bool,
    timeout: Duration,
) {
    for ev in &backlog {
        if let Some(line) = spec.line(ev) {
            if out.send(line).await.is_err() {
                return;
            }
        }
    }
    if let Some(rv) = initial_end {
        if out.send(spec.bookmark(rv, true)).await.is_err() {
            return;
        }
    }
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let period = shared
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        let line = tokio::select! {
            msg = sub_rx.recv() => match msg {
                Some(WatchMsg::Event(ev)) => spec.line(&ev),
                Some(WatchMsg::Bookmark(rv)) => Some(spec.bookmark(rv, false)),
                Some(WatchMsg::Expire) => {
                    let e = ApiError::expired("too old resource version: the server's event history was reset");
                    let _ = out.send(event_line("ERROR", &e.status())).await;
                    return;
                }
                Some(WatchMsg::Close) | None => return,
            },
            _ = tick.tick(), if bookmarks => {
                // Queued behind every event committed so far, so its version is safe to resume from.
                shared.store().bookmark(&sub_tx);
                None
            }
            () = &mut deadline => return,
            () = out.closed() => return,
        };
        if let Some(line) = line {
            if out.send(line).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_path_decoding() {
        let q = Query::parse(Some("&labelSelector=app%3Dweb%2Ctier+in+(a%2Cb)&watch=1&x"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a,b)"));
        assert!(q.flag("watch"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz%41", false), "%zzA");
    }

    #[test]
    fn routes() {
        let reg = Registry::default();
        let res = |p: &str| match route(&reg, "x", p) {
            Ok(Route::Res(t)) => Some((t.ty.plural, t.ns, t.name, t.sub)),
            _ => None,
        };
        assert_eq!(res("/api/v1/pods"), Some(("pods".into(), None, None, None)));
        assert_eq!(
            res("/api/v1/namespaces/a/pods/p/status"),
            Some((
                "pods".into(),
                Some("a".into()),
                Some("p".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            res("/api/v1/namespaces/a"),
            Some(("namespaces".into(), None, Some("a".into()), None))
        );
        assert_eq!(
            res("/api/v1/namespaces/a/status"),
            Some((
                "namespaces".into(),
                None,
                Some("a".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            res("/apis/network.openshift.io/v1/hostsubnets/n1"),
            Some(("hostsubnets".into(), None, Some("n1".into()), None))
        );
        assert_eq!(res("/api/v1/pods/p"), None, "a pod needs its namespace");
        assert_eq!(
            res("/apis/network.openshift.io/v1/hostsubnets/n1/status"),
            None
        );
        assert_eq!(res("/api/v1/namespaces/a/hostsubnets"), None);
        assert_eq!(res("/api/v1/services"), None);
        assert!(matches!(route(&reg, "x", "/apis"), Ok(Route::Doc(_))));
        assert!(matches!(route(&reg, "x", "/version"), Ok(Route::Doc(_))));
        assert!(route(&reg, "x", "/apis/nope.io").is_err());
    }
}
