//! The object store behind the fake API server: objects, the global resourceVersion counter, the
//! bounded event history and the live watch subscriptions.
//!
//! Objects are JSON values keyed by resource type (group, version, plural) and (namespace, name);
//! the namespace is empty for cluster-scoped kinds. Every write takes the next value of one global
//! counter as its `metadata.resourceVersion`, as etcd revisions do, and appends an event to the
//! history (bounded; events that fall off raise the "too old" floor). Watch subscriptions register
//! under the same lock that writes take, so a watch started from resourceVersion R sees exactly
//! the events after R: those in the history, then the live ones, with no gap and no duplicate.
//!
//! The store enforces what clients rely on: `AlreadyExists` on create, `Conflict` on a stale
//! `resourceVersion` or failed preconditions, no new version for a no-op update, `generation`
//! bumped when anything but metadata (and status, for kinds with a status subresource) changes,
//! and finalizers (delete sets `deletionTimestamp`; the object goes when its finalizers are gone).
//!
//! Limits: no graceful deletion of pods, no namespace lifecycle (a namespace is deleted at once and
//! objects in it stay), no `managedFields`, no admission or schema validation beyond names.

use super::resources::ResourceType;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedSender;

/// An API error, carrying the fields of the Kubernetes `Status` it is served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`, ...).
    pub reason: &'static str,
    /// Human-readable message, worded as kube-apiserver words it.
    pub message: String,
    /// `details`: name, group and kind (plural) of the object concerned, if any.
    pub details: Option<(String, String, String)>,
}

// A hand-written `Error` impl: the tests crate does not depend on thiserror.
impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.message, self.code, self.reason)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    fn with_details(mut self, ty: &ResourceType, name: &str) -> Self {
        self.details = Some((name.to_string(), ty.group.clone(), ty.plural.clone()));
        self
    }

    /// 404 for an object.
    pub fn not_found(ty: &ResourceType, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} {name:?} not found", ty.qualified()),
            details: None,
        }
        .with_details(ty, name)
    }

    /// 404 for a path nothing is served at.
    pub fn no_resource() -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".to_string(),
            details: None,
        }
    }

    /// 409 on create of an existing object.
    pub fn already_exists(ty: &ResourceType, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} {name:?} already exists", ty.qualified()),
            details: None,
        }
        .with_details(ty, name)
    }

    /// 409 on a stale resourceVersion or failed precondition.
    pub fn conflict(ty: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                ty.qualified()
            ),
            details: None,
        }
        .with_details(ty, name)
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    /// 422 for an invalid object.
    pub fn invalid(ty: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} {name:?} is invalid: {why}", ty.kind),
            details: None,
        }
        .with_details(ty, name)
    }

    /// 410 for a watch or continue token older than the history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError {
            code: 410,
            reason: "Expired",
            message: message.into(),
            details: None,
        }
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            code: 500,
            reason: "InternalError",
            message: message.into(),
            details: None,
        }
    }

    /// Any other code and reason.
    pub fn other(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// The Kubernetes `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((name, group, kind)) = &self.details {
            let mut d = Map::new();
            d.insert("name".into(), json!(name));
            if !group.is_empty() {
                d.insert("group".into(), json!(group));
            }
            d.insert("kind".into(), json!(kind));
            s["details"] = Value::Object(d);
        }
        s
    }
}

/// The kind of change an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The watch wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Identifies a resource type in the store.
pub type ResKey = (String, String, String);

/// The store key of a type.
pub fn res_key(ty: &ResourceType) -> ResKey {
    (ty.group.clone(), ty.version.clone(), ty.plural.clone())
}

/// One change, as kept in the history and sent to watches.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Which resource type changed.
    pub res: ResKey,
    /// Added, modified or deleted.
    pub kind: EventType,
    /// The object after the change (for deletes: the last state, with the delete's version).
    pub object: Value,
    /// The object before a modification, so selector-filtered watches can turn a change that
    /// leaves or enters the selection into DELETED or ADDED.
    pub prev: Option<Value>,
}

/// What a watch subscription receives.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    /// A change of the watched type.
    Event(Arc<Event>),
    /// Everything up to this resourceVersion has been delivered: emit a BOOKMARK.
    Bookmark(u64),
    /// The server forgot the history: emit a 410 ERROR and end the stream.
    Expire,
    /// End the stream (as the server's watch timeout does).
    Close,
}

struct Sub {
    res: ResKey,
    tx: UnboundedSender<WatchMsg>,
}

impl std::fmt::Debug for Sub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sub({:?})", self.res)
    }
}

/// A saved remainder of a paginated list, served by its continue token.
#[derive(Debug)]
struct Continue {
    token: String,
    rv: u64,
    /// The rest of the list (a queue: each page takes from its front).
    items: std::collections::VecDeque<Value>,
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource (status kept, for kinds with a status subresource).
    Main,
    /// The `/status` subresource (only status taken).
    Status,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The list's resourceVersion.
    pub rv: u64,
    /// The objects of this page.
    pub items: Vec<Value>,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// How many objects remain after this page.
    pub remaining: Option<usize>,
}

/// How many paginated list remainders are kept.
const MAX_CONTINUES: usize = 64;

/// The store (see the module docs). Not thread-safe by itself: the server keeps it in a mutex and
/// holds the lock for a whole request, which makes read-modify-write (patch) atomic.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<ResKey, BTreeMap<(String, String), Value>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    floor: u64,
    subs: Vec<Sub>,
    continues: VecDeque<Continue>,
    next_token: u64,
}

static UID_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh random (version 4 layout) UID, unique within the process.
pub fn new_uid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let n = UID_COUNTER.fetch_add(1, Ordering::Relaxed);
    let s = std::collections::hash_map::RandomState::new();
    let mut h = s.build_hasher();
    h.write_u64(n);
    let a = h.finish();
    h.write_u64(a ^ 0x9e37_79b9_7f4a_7c15);
    let b = h.finish();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a & 0xfff,
        0x8000 | ((b >> 48) as u16 & 0x3fff),
        // The counter in the low bits guarantees uniqueness within the process.
        ((b & 0xffff_ff00_0000) | (n & 0xff_ffff)) & 0xffff_ffff_ffff
    )
}

/// Five random characters of the alphabet kube-apiserver uses for `generateName` suffixes.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = new_uid().replace('-', "");
    let mut v = u128::from_str_radix(&uid, 16).unwrap_or(0);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(v % ALPHABET.len() as u128) as usize] as char;
            v /= ALPHABET.len() as u128;
            c
        })
        .collect()
}

/// Formats seconds since the epoch as RFC 3339 UTC (`2024-05-01T12:00:00Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Now, as RFC 3339.
pub fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// What kube-apiserver's defaulting does to the built-in kinds the agent reads, where a client
/// can tell: a Namespace carries `kubernetes.io/metadata.name` = its name (set on every write);
/// a NetworkPolicy without `policyTypes` gets `[Ingress]`, plus `Egress` for a non-empty
/// `egress` list (`SetDefaults_NetworkPolicy`), and a rule port without `protocol` gets `TCP`.
fn apply_defaults(ty: &ResourceType, obj: &mut Value) {
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "namespaces") => {
            let name = obj["metadata"]["name"].clone();
            if name.is_string() {
                let m = meta_mut(obj);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if !labels.is_object() {
                    *labels = json!({});
                }
                labels["kubernetes.io/metadata.name"] = name;
            }
        }
        ("networking.k8s.io", "networkpolicies") => {
            let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
                return;
            };
            let empty = spec
                .get("policyTypes")
                .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty));
            if empty {
                let egress = spec
                    .get("egress")
                    .and_then(Value::as_array)
                    .is_some_and(|e| !e.is_empty());
                let mut types = vec![json!("Ingress")];
                if egress {
                    types.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), Value::Array(types));
            }
            for dir in ["ingress", "egress"] {
                for rule in spec
                    .get_mut(dir)
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    for port in rule
                        .get_mut("ports")
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(p) = port.as_object_mut() {
                            p.entry("protocol").or_insert_with(|| json!("TCP"));
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// The object's `metadata` as a mutable map (created if missing).
fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // Unreachable: set to an object just above.
        _ => unreachable!("metadata was just made an object"),
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str().filter(|s| !s.is_empty())
}

/// The object's resourceVersion as a number.
pub fn object_rv(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Sets `apiVersion`/`kind` from the type, or refuses a body that names another type.
fn check_type_meta(ty: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request is not a {} object",
            ty.kind
        )));
    }
    let want = ty.api_version();
    match obj["apiVersion"].as_str() {
        Some(av) if !av.is_empty() && av != want => {
            return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want})"
        )))
        }
        _ => obj["apiVersion"] = json!(want),
    }
    match obj["kind"].as_str() {
        Some(k) if !k.is_empty() && k != ty.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ty.kind
            )))
        }
        _ => obj["kind"] = json!(ty.kind),
    }
    Ok(())
}

/// The object with `metadata` (and `status` when `drop_status`) removed: what `generation` tracks.
fn spec_part(obj: &Value, drop_status: bool) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if drop_status {
            m.remove("status");
        }
    }
    v
}

impl Store {
    /// An empty store keeping at most `history_limit` events.
    pub fn new(history_limit: usize) -> Self {
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            floor: 0,
            subs: Vec::new(),
            continues: VecDeque::new(),
            next_token: 1,
        }
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn ns_key(ty: &ResourceType, ns: Option<&str>) -> String {
        if ty.namespaced {
            ns.unwrap_or_default().to_string()
        } else {
            String::new()
        }
    }

    /// One object.
    pub fn get(&self, ty: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.objects
            .get(&res_key(ty))?
            .get(&(Self::ns_key(ty, ns), name.to_string()))
    }

    /// The objects of `ty` (in `ns`) that `filter` accepts, cloned (only those).
    fn matching(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        filter: &impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        self.objects
            .get(&res_key(ty))
            .map(|m| {
                m.iter()
                    .filter(|((n, _), v)| {
                        ns.is_none_or(|want| !ty.namespaced || n == want) && filter(v)
                    })
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// All objects of a type (in one namespace when `ns` is given), ordered by namespace and name.
    pub fn all(&self, ty: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        self.matching(ty, ns, &|_| true)
    }

    /// Records a change: bumps nothing (the caller set the version), stores or removes the object,
    /// appends the event to the history and sends it to the type's subscribers.
    fn commit(&mut self, ty: &ResourceType, kind: EventType, object: Value, prev: Option<Value>) {
        let key = res_key(ty);
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let objs = self.objects.entry(key.clone()).or_default();
        let okey = (Self::ns_key(ty, Some(&ns)), name);
        if kind == EventType::Deleted {
            objs.remove(&okey);
        } else {
            objs.insert(okey, object.clone());
        }
        let ev = Arc::new(Event {
            rv: self.rv,
            res: key,
            kind,
            object,
            prev,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
        self.subs
            .retain(|s| s.res != ev.res || s.tx.send(WatchMsg::Event(ev.clone())).is_ok());
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Creates an object (`POST`). `ns` is the request's namespace (namespaced kinds).
    pub fn create(
        &mut self,
        ty: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        check_type_meta(ty, &mut obj)?;
        let name = match meta_str(&obj, "name") {
            Some(n) => n.to_string(),
            None => match meta_str(&obj, "generateName") {
                Some(prefix) => {
                    let prefix = prefix.to_string();
                    let mut name = format!("{prefix}{}", name_suffix());
                    while self.get(ty, ns, &name).is_some() {
                        name = format!("{prefix}{}", name_suffix());
                    }
                    name
                }
                None => {
                    return Err(ApiError::invalid(
                        ty,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ))
                }
            },
        };
        let valid = if ty.plural == "namespaces" {
            is_dns_label(&name)
        } else {
            is_dns_subdomain(&name)
        };
        if !valid {
            return Err(ApiError::invalid(
                ty,
                &name,
                &format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 name must consist of lower case alphanumeric characters, '-' or '.'"),
            ));
        }
        self.set_namespace(ty, ns, &mut obj)?;
        if meta_str(&obj, "resourceVersion").is_some() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if self.get(ty, ns, &name).is_some() {
            return Err(ApiError::already_exists(ty, &name));
        }
        if ty.plural == "namespaces" && obj["status"]["phase"].is_null() {
            obj["status"] = json!({"phase": "Active"});
        }
        meta_mut(&mut obj).insert("name".into(), json!(name));
        apply_defaults(ty, &mut obj);
        let rv = if dry_run { self.rv + 1 } else { self.next_rv() };
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(new_uid()));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        if !dry_run {
            self.commit(ty, EventType::Added, obj.clone(), None);
        }
        Ok(obj)
    }

    /// Checks the body's namespace against the request's and sets it (namespaced kinds) or removes
    /// it (cluster-scoped kinds).
    fn set_namespace(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if ty.namespaced {
            let Some(ns) = ns else {
                return Err(ApiError::bad_request(format!(
                    "{} is namespaced: the request needs a namespace",
                    ty.qualified()
                )));
            };
            if let Some(body_ns) = meta_str(obj, "namespace") {
                if body_ns != ns {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
            meta_mut(obj).insert("namespace".into(), json!(ns));
        } else {
            meta_mut(obj).remove("namespace");
        }
        Ok(())
    }

    /// Replaces an object (`PUT`), or its status (`PUT .../status`). A non-empty
    /// `metadata.resourceVersion` in the body must be the stored one.
    pub fn update(
        &mut self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        mut obj: Value,
        part: Part,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        check_type_meta(ty, &mut obj)?;
        let cur = self
            .get(ty, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(ty, name))?;
        match meta_str(&obj, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )))
            }
            _ => {}
        }
        self.set_namespace(ty, ns, &mut obj)?;
        if let Some(rv) = meta_str(&obj, "resourceVersion") {
            if Some(rv) != meta_str(&cur, "resourceVersion") {
                return Err(ApiError::conflict(
                    ty,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
        }
        if let Some(uid) = meta_str(&obj, "uid") {
            let have = meta_str(&cur, "uid").unwrap_or_default();
            if uid != have {
                return Err(ApiError::conflict(
                    ty,
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"),
                ));
            }
        }
        let mut new = match part {
            Part::Main => {
                let mut new = obj;
                if ty.status_subresource {
                    match cur.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                let m = meta_mut(&mut new);
                m.insert("name".into(), json!(name));
                for keep in [
                    "uid",
                    "creationTimestamp",
                    "generation",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "resourceVersion",
                ] {
                    match cur["metadata"].get(keep) {
                        Some(v) => m.insert(keep.into(), v.clone()),
                        None => m.remove(keep),
                    };
                }
                m.remove("managedFields");
                apply_defaults(ty, &mut new);
                new
            }
            Part::Status => {
                let mut new = cur.clone();
                match obj.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new
            }
        };
        if new == cur {
            // kube-apiserver does not write (nor bump the version) for a no-op update.
            return Ok(cur);
        }
        if spec_part(&new, ty.status_subresource) != spec_part(&cur, ty.status_subresource) {
            let g = cur["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut new).insert("generation".into(), json!(g));
        }
        let finalizing = !new["metadata"]["deletionTimestamp"].is_null()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        let rv = if dry_run { self.rv + 1 } else { self.next_rv() };
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        if !dry_run {
            let kind = if finalizing {
                EventType::Deleted
            } else {
                EventType::Modified
            };
            self.commit(ty, kind, new.clone(), Some(cur));
        }
        Ok(new)
    }

    /// Deletes an object (`DELETE`), checking the optional uid and resourceVersion preconditions.
    /// An object with finalizers only gets a `deletionTimestamp`.
    pub fn delete(
        &mut self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        precondition_uid: Option<&str>,
        precondition_rv: Option<&str>,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let cur = self
            .get(ty, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(ty, name))?;
        if let Some(uid) = precondition_uid {
            let have = meta_str(&cur, "uid").unwrap_or_default();
            if uid != have {
                return Err(ApiError::conflict(
                    ty,
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"),
                ));
            }
        }
        if let Some(rv) = precondition_rv {
            let have = meta_str(&cur, "resourceVersion").unwrap_or_default();
            if rv != have {
                return Err(ApiError::conflict(
                    ty,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}"),
                ));
            }
        }
        let has_finalizers = cur["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if !cur["metadata"]["deletionTimestamp"].is_null() {
                return Ok(cur);
            }
            let mut new = cur.clone();
            let rv = if dry_run { self.rv + 1 } else { self.next_rv() };
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            if !dry_run {
                self.commit(ty, EventType::Modified, new.clone(), Some(cur));
            }
            return Ok(new);
        }
        let mut gone = cur.clone();
        let rv = if dry_run { self.rv + 1 } else { self.next_rv() };
        meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
        if !dry_run {
            self.commit(ty, EventType::Deleted, gone.clone(), Some(cur));
        }
        Ok(gone)
    }

    /// Creates or replaces an object without any check (test setup): fills in uid, timestamps
    /// and namespace as needed, keeps those of an existing object, and takes a new version.
    pub fn put(&mut self, ty: &ResourceType, mut obj: Value) -> Result<Value, ApiError> {
        check_type_meta(ty, &mut obj)?;
        let name = meta_str(&obj, "name")
            .ok_or_else(|| ApiError::invalid(ty, "", "metadata.name: Required value"))?
            .to_string();
        let ns = meta_str(&obj, "namespace").map(str::to_string);
        if ty.namespaced && ns.is_none() {
            return Err(ApiError::invalid(
                ty,
                &name,
                "metadata.namespace: Required value",
            ));
        }
        let cur = self.get(ty, ns.as_deref(), &name).cloned();
        apply_defaults(ty, &mut obj);
        let rv = self.next_rv();
        let m = meta_mut(&mut obj);
        if !ty.namespaced {
            m.remove("namespace");
        }
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        let cur_meta = cur.as_ref().map(|c| &c["metadata"]);
        for (field, fresh) in [
            ("uid", json!(new_uid())),
            ("creationTimestamp", json!(now())),
            ("generation", json!(1)),
        ] {
            if m.get(field).is_none_or(Value::is_null) {
                let v = cur_meta
                    .and_then(|c| c.get(field))
                    .cloned()
                    .unwrap_or(fresh);
                m.insert(field.into(), v);
            }
        }
        let kind = if cur.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.commit(ty, kind, obj.clone(), cur);
        Ok(obj)
    }

    /// Removes an object at once, ignoring finalizers (test setup). Returns it, if it existed.
    pub fn remove(&mut self, ty: &ResourceType, ns: Option<&str>, name: &str) -> Option<Value> {
        let cur = self.get(ty, ns, name).cloned()?;
        let mut gone = cur.clone();
        let rv = self.next_rv();
        meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
        self.commit(ty, EventType::Deleted, gone.clone(), Some(cur));
        Some(gone)
    }

    /// Lists objects passing `filter`, one page of at most `limit` when given; `continue_token`
    /// resumes a paginated list from its saved snapshot (410 when it was forgotten).
    pub fn list(
        &mut self,
        ty: &ResourceType,
        ns: Option<&str>,
        filter: impl Fn(&Value) -> bool,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let (rv, mut items) = match continue_token {
            Some(token) => {
                let pos = self
                    .continues
                    .iter()
                    .position(|c| c.token == token)
                    .ok_or_else(|| {
                        ApiError::expired(
                            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                        )
                    })?;
                let c = self.continues.remove(pos).ok_or_else(|| {
                    ApiError::internal("continue token vanished while held under the lock")
                })?;
                (c.rv, c.items)
            }
            None => (self.rv, self.matching(ty, ns, &filter).into()),
        };
        let limit = limit.filter(|l| *l > 0);
        match limit {
            Some(limit) if items.len() > limit => {
                // The page from the front; the rest stays queued (no copy of the remainder).
                let page: Vec<Value> = items.drain(..limit).collect();
                let rest = items;
                let token = format!("{}-{}", rv, self.next_token);
                self.next_token += 1;
                let remaining = rest.len();
                self.continues.push_back(Continue {
                    token: token.clone(),
                    rv,
                    items: rest,
                });
                while self.continues.len() > MAX_CONTINUES {
                    self.continues.pop_front();
                }
                Ok(ListPage {
                    rv,
                    items: page,
                    continue_token: Some(token),
                    remaining: Some(remaining),
                })
            }
            _ => Ok(ListPage {
                rv,
                items: items.into(),
                continue_token: None,
                remaining: None,
            }),
        }
    }

    /// Subscribes `tx` to changes of `ty`. `from: Some(rv)` replays the history after `rv` (410
    /// when `rv` is older than the history); `None` replays the current objects as ADDED.
    /// Returns the replay and the current version; live events follow on `tx`.
    pub fn watch(
        &mut self,
        ty: &ResourceType,
        from: Option<u64>,
        tx: UnboundedSender<WatchMsg>,
    ) -> Result<(Vec<Arc<Event>>, u64), ApiError> {
        let key = res_key(ty);
        let backlog = match from {
            Some(rv) => {
                if rv < self.floor {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        self.floor
                    )));
                }
                self.history
                    .iter()
                    .filter(|e| e.rv > rv && e.res == key)
                    .cloned()
                    .collect()
            }
            None => self
                .objects
                .get(&key)
                .map(|m| {
                    m.values()
                        .map(|o| {
                            Arc::new(Event {
                                rv: object_rv(o),
                                res: key.clone(),
                                kind: EventType::Added,
                                object: o.clone(),
                                prev: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        self.subs.push(Sub { res: key, tx });
        Ok((backlog, self.rv))
    }

    /// Asks the subscription behind `tx` for a bookmark: queued after every event so far.
    pub fn bookmark(&self, tx: &UnboundedSender<WatchMsg>) {
        let _ = tx.send(WatchMsg::Bookmark(self.rv));
    }

    /// Forgets the history (watches from any version before now get 410) and ends every watch
    /// with a 410 ERROR event.
    pub fn expire_watches(&mut self) {
        self.history.clear();
        self.floor = self.rv;
        self.continues.clear();
        for s in self.subs.drain(..) {
            let _ = s.tx.send(WatchMsg::Expire);
        }
    }

    /// Ends every watch stream (clients resume from their last version).
    pub fn close_watches(&mut self) {
        for s in self.subs.drain(..) {
            let _ = s.tx.send(WatchMsg::Close);
        }
    }

    /// How many watch subscriptions are live (closed ones are noticed at the next event).
    pub fn watch_count(&mut self) -> usize {
        self.subs.retain(|s| !s.tx.is_closed());
        self.subs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    fn lease() -> ResourceType {
        ResourceType::new("coordination.k8s.io", "v1", "leases", "Lease", true)
    }

    #[test]
    fn timestamps_and_uids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_825_600), "2000-02-29T12:00:00Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
        let a = new_uid();
        assert_eq!(a.len(), 36, "{a}");
        assert_ne!(a, new_uid());
        assert_eq!(name_suffix().len(), 5);
    }

    #[test]
    fn create_update_conflict_delete() {
        let ty = lease();
        let mut s = Store::new(10);
        let o = s
            .create(
                &ty,
                Some("ns"),
                json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}),
                false,
            )
            .unwrap();
        assert_eq!(o["kind"], "Lease");
        assert_eq!(o["metadata"]["namespace"], "ns");
        assert_eq!(o["metadata"]["generation"], 1);
        let err = s
            .create(&ty, Some("ns"), json!({"metadata": {"name": "l"}}), false)
            .unwrap_err();
        assert_eq!((err.code, err.reason), (409, "AlreadyExists"));
        let mut upd = o.clone();
        upd["spec"]["holderIdentity"] = json!("b");
        let u = s
            .update(&ty, Some("ns"), "l", upd.clone(), Part::Main, false)
            .unwrap();
        assert_eq!(u["metadata"]["generation"], 2);
        assert!(object_rv(&u) > object_rv(&o));
        let err = s
            .update(&ty, Some("ns"), "l", upd, Part::Main, false)
            .unwrap_err();
        assert_eq!((err.code, err.reason), (409, "Conflict"));
        let same = s
            .update(&ty, Some("ns"), "l", u.clone(), Part::Main, false)
            .unwrap();
        assert_eq!(same, u, "no-op update keeps the version");
        let d = s.delete(&ty, Some("ns"), "l", None, None, false).unwrap();
        assert!(object_rv(&d) > object_rv(&u));
        assert!(s.get(&ty, Some("ns"), "l").is_none());
    }

    #[test]
    fn watch_replays_history_and_expires() {
        let ty = lease();
        let mut s = Store::new(2);
        for n in ["a", "b", "c"] {
            s.create(&ty, Some("ns"), json!({"metadata": {"name": n}}), false)
                .unwrap();
        }
        let (tx, mut rx) = unbounded_channel();
        let err = s.watch(&ty, Some(1), tx.clone()).unwrap_err();
        assert_eq!(err.code, 410, "{err}");
        let (backlog, rv) = s.watch(&ty, Some(3), tx).unwrap();
        assert_eq!(rv, 4);
        assert_eq!(backlog.len(), 1);
        assert_eq!(backlog[0].object["metadata"]["name"], "c");
        s.remove(&ty, Some("ns"), "a").unwrap();
        match rx.try_recv().unwrap() {
            WatchMsg::Event(e) => assert_eq!(e.kind, EventType::Deleted),
            other => panic!("{other:?}"),
        }
        s.expire_watches();
        assert!(matches!(rx.try_recv().unwrap(), WatchMsg::Expire));
    }

    #[test]
    fn finalizers_delay_deletion() {
        let ty = lease();
        let mut s = Store::new(10);
        s.create(
            &ty,
            Some("ns"),
            json!({"metadata": {"name": "l", "finalizers": ["x"]}}),
            false,
        )
        .unwrap();
        let d = s.delete(&ty, Some("ns"), "l", None, None, false).unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string());
        let mut cleared = d.clone();
        cleared["metadata"]["finalizers"] = json!([]);
        s.update(&ty, Some("ns"), "l", cleared, Part::Main, false)
            .unwrap();
        assert!(s.get(&ty, Some("ns"), "l").is_none());
    }

    #[test]
    fn paginated_list_serves_a_snapshot() {
        let ty = lease();
        let mut s = Store::new(10);
        for n in ["a", "b", "c"] {
            s.create(&ty, Some("ns"), json!({"metadata": {"name": n}}), false)
                .unwrap();
        }
        let p1 = s.list(&ty, None, |_| true, Some(2), None).unwrap();
        assert_eq!(p1.items.len(), 2);
        s.remove(&ty, Some("ns"), "c");
        let p2 = s
            .list(&ty, None, |_| true, Some(2), p1.continue_token.as_deref())
            .unwrap();
        assert_eq!(p2.items[0]["metadata"]["name"], "c");
        assert_eq!(p2.rv, p1.rv);
        assert!(p2.continue_token.is_none());
        let err = s.list(&ty, None, |_| true, None, Some("nope")).unwrap_err();
        assert_eq!(err.code, 410);
    }
}
