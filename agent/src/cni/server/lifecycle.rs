//! One request's life: the peer check, the HTTP exchange with body limits, the per-sandbox lock,
//! the deadline, abandonment when the shim goes away, the handler's answer in the cniVersion
//! asked for, and the metrics and log line of each request. One state machine, kept in one file.

use std::convert::Infallible;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::Notify;

use crate::cni::config::NetConf;
use crate::cni::request::{check_netns, Request, RequestBody};
use crate::cni::result::AddResult;
use crate::cni::types::{codes, CniError, Command};
use crate::cni::version::CniVersion;
use tokio::time::{timeout, timeout_at, Instant};
use tracing::{info, info_span, warn, Instrument};

use super::*;

/// Who is on the other end, and whether they may talk to us.
#[derive(Clone, Debug)]
pub(super) struct Peer {
    pub(crate) uid: Option<u32>,
    pub(crate) pid: Option<i32>,
    pub(crate) refusal: Option<String>,
}

pub(super) fn check_peer(stream: &UnixStream, allowed: &[u32]) -> Peer {
    match stream.peer_cred() {
        Ok(cred) => {
            let uid = cred.uid();
            let refusal = (!allowed.contains(&uid)).then(|| {
                if allowed == [0] {
                    format!("peer uid {uid} is not root")
                } else {
                    format!("peer uid {uid} is not allowed (allowed uids: {allowed:?})")
                }
            });
            Peer {
                uid: Some(uid),
                pid: cred.pid(),
                refusal,
            }
        }
        Err(e) => Peer {
            uid: None,
            pid: None,
            refusal: Some(format!("peer credentials unavailable: {e}")),
        },
    }
}

pub(super) async fn serve_connection<H: Handler>(stream: UnixStream, ctx: Arc<Ctx<H>>) {
    let peer = check_peer(&stream, &ctx.opts.allowed_uids);
    if let Some(why) = &peer.refusal {
        let known = |v: Option<String>| v.unwrap_or_else(|| "unknown".to_string());
        warn!(uid = %known(peer.uid.map(|u| u.to_string())), pid = %known(peer.pid.map(|p| p.to_string())), "refusing CNI connection: {why}");
    }
    let limit = ctx.opts.read_timeout * 2 + ctx.opts.request_timeout + Duration::from_secs(5);
    let svc_ctx = ctx.clone();
    let svc = service_fn(move |req| {
        let ctx = svc_ctx.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(handle_http(ctx, peer, req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.opts.read_timeout)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    match timeout(limit, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => info!(error = %e, "CNI connection ended with an error"),
        Err(_) => warn!(
            "CNI connection still open after {} s; closing it",
            limit.as_secs()
        ),
    }
}

pub(super) type Response = hyper::Response<Full<Bytes>>;

pub(super) fn response(status: StatusCode, body: String) -> Response {
    let json = !body.is_empty();
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if json {
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    r
}

/// The HTTP status for a CNI error code (see the module docs).
pub(super) fn http_status(code: u32) -> StatusCode {
    match code {
        1..=7 => StatusCode::BAD_REQUEST,
        codes::TRY_AGAIN_LATER | codes::PLUGIN_NOT_AVAILABLE | codes::LIMITED_CONNECTIVITY => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        codes::PERMISSION_DENIED => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(super) fn error_response(e: &CniError, version: CniVersion) -> Response {
    let mut r = response(http_status(e.code), e.to_json(version));
    r.extensions_mut().insert(ErrorCode(e.code));
    r
}

pub(super) async fn handle_http<H: Handler>(
    ctx: Arc<Ctx<H>>,
    peer: Peer,
    req: hyper::Request<Incoming>,
) -> Response {
    let received = Instant::now();
    let v1 = CniVersion::V1_0_0;
    if let Some(why) = peer.refusal {
        return error_response(&CniError::permission_denied(why), v1);
    }
    if req.uri().path() != "/cni" {
        let e = CniError::new(
            codes::INTERNAL,
            format!(
                "no such endpoint {:?}; the shim posts to /cni",
                req.uri().path()
            ),
            "",
        );
        return response(StatusCode::NOT_FOUND, e.to_json(v1));
    }
    if req.method() != Method::POST {
        let e = CniError::new(
            codes::INTERNAL,
            format!("method {} is not allowed on /cni; use POST", req.method()),
            "",
        );
        let mut r = response(StatusCode::METHOD_NOT_ALLOWED, e.to_json(v1));
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let max = ctx.opts.max_body_bytes;
    let too_large = || {
        let e = CniError::decode(format!("request body is larger than {max} bytes"));
        response(StatusCode::PAYLOAD_TOO_LARGE, e.to_json(v1))
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large();
    }
    let collected = timeout(
        ctx.opts.read_timeout,
        Limited::new(req.into_body(), max).collect(),
    )
    .await;
    let bytes = match collected {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => {
            let e = CniError::decode(format!("cannot read the request body: {e}"));
            return error_response(&e, v1);
        }
        Err(_) => {
            let e = CniError::decode(format!(
                "request body not received within {} s",
                ctx.opts.read_timeout.as_secs()
            ));
            return error_response(&e, v1);
        }
    };
    let body: RequestBody = match serde_json::from_slice(&bytes) {
        Ok(b) => b,
        Err(e) => {
            let e = CniError::decode(format!("request body is not a valid request object: {e}"));
            warn!(error = %e, "rejected CNI request");
            return error_response(&e, v1);
        }
    };
    let version = body
        .config
        .as_ref()
        .and_then(|c| NetConf::parse_version(c).ok())
        .unwrap_or(v1);
    let (cmd, cid) = (body.command.clone(), body.container_id.clone());
    let validated = match Request::from_body(body, received, ctx.opts.request_timeout) {
        Ok(r) => match r.command {
            Command::Add | Command::Check => match &r.netns {
                Some(ns) => check_netns(ns).await.map(|()| r),
                None => Ok(r),
            },
            _ => Ok(r),
        },
        Err(e) => Err(e),
    };
    match validated {
        Ok(r) => dispatch(ctx, r, received).await,
        Err(e) => {
            warn!(
                command = cmd.as_deref().unwrap_or("unknown"),
                container_id = cid.as_deref().unwrap_or(""),
                code = e.code,
                "rejected CNI request: {}",
                e.msg
            );
            let r = error_response(&e, version);
            observe_request(cmd.as_deref().unwrap_or("unknown"), received.elapsed(), &r);
            r
        }
    }
}

/// Where a dispatched request is; decides what the client is told at the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Queued behind another request for the same container.
    Waiting,
    /// The handler is running (it will run to completion).
    Started,
    /// The client was answered (deadline or disconnect) before the handler started: it must
    /// not start.
    Abandoned,
}

/// Marks a still-waiting request abandoned when the response side gives up or is dropped.
pub(super) struct AbandonOnDrop(Arc<Mutex<Phase>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        let mut p = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if *p == Phase::Waiting {
            *p = Phase::Abandoned;
        }
    }
}

pub(super) enum Outcome {
    Done(Result<Option<AddResult>, CniError>),
    NotStarted,
}

pub(super) async fn dispatch<H: Handler>(
    ctx: Arc<Ctx<H>>,
    req: Request,
    received: Instant,
) -> Response {
    let version = req.version();
    let command = req.command;
    let deadline = req.deadline;
    let budget = deadline.saturating_duration_since(received);
    let container_id = req.container_id.clone();
    let span = info_span!(
        "cni",
        command = %command,
        container_id = %req.container_id,
        ifname = %req.ifname,
        netns = tracing::field::Empty,
        k8s_namespace = tracing::field::Empty,
        k8s_pod = tracing::field::Empty,
    );
    // Plain values, and only those the request has (a query for k8s_pod="x" finds them).
    if let Some(n) = &req.netns {
        span.record("netns", tracing::field::display(n.display()));
    }
    if let Some(ns) = req.args.pod_namespace() {
        span.record("k8s_namespace", ns);
    }
    if let Some(pod) = req.args.pod_name() {
        span.record("k8s_pod", pod);
    }
    let phase = Arc::new(Mutex::new(Phase::Waiting));
    let abandon = AbandonOnDrop(phase.clone());
    let key = command
        .is_per_attachment()
        .then(|| req.container_id.clone());
    let task_phase = phase.clone();
    let handler = ctx.handler.clone();
    let locks = ctx.locks.clone();
    let inflight = ctx.inflight.enter();
    let task = tokio::spawn(
        async move {
            let _inflight = inflight;
            let guard = match key {
                Some(k) => match timeout_at(deadline, locks.lock(k)).await {
                    Ok(g) => Some(g),
                    Err(_) => return Outcome::NotStarted,
                },
                None => None,
            };
            {
                let mut p = task_phase.lock().unwrap_or_else(PoisonError::into_inner);
                if *p == Phase::Abandoned {
                    return Outcome::NotStarted;
                }
                *p = Phase::Started;
            }
            let start = Instant::now();
            let result = match command {
                Command::Add => handler.add(req).await.map(Some),
                Command::Del => handler.del(req).await.map(|()| None),
                Command::Check => handler.check(req).await.map(|()| None),
                Command::Gc => handler.gc(req).await.map(|()| None),
                Command::Status => handler.status(req).await.map(|()| None),
                // Refused by `Request::from_body`: the shim answers VERSION alone.
                Command::Version => Err(CniError::invalid_env(
                    "CNI_COMMAND VERSION is answered by the sdn-cni shim",
                )),
            };
            drop(guard);
            observe_handler(command, start.elapsed(), &result);
            let elapsed_ms = start.elapsed().as_millis() as u64;
            let total_ms = received.elapsed().as_millis() as u64;
            let late = Instant::now() > deadline;
            match &result {
                Ok(_) => info!(elapsed_ms, total_ms, late, "CNI request succeeded"),
                Err(e) => warn!(
                    elapsed_ms,
                    total_ms,
                    late,
                    code = e.code,
                    details = %e.details,
                    "CNI request failed: {}",
                    e.msg
                ),
            }
            Outcome::Done(result)
        }
        .instrument(span.clone()),
    );
    let outcome = timeout_at(deadline, task).await;
    drop(abandon);
    let _enter = span.enter();
    let response = answer(outcome, &phase, &container_id, command, version, budget);
    observe_request(command.as_str(), received.elapsed(), &response);
    response
}

/// Records the handler's own time and failure (openshift-sdn's `setup`/`teardown` series).
pub(super) fn observe_handler<T>(command: Command, took: Duration, result: &Result<T, CniError>) {
    let m = crate::telemetry::metrics::metrics();
    let op = match command {
        Command::Add => "setup",
        Command::Del => "teardown",
        _ => return,
    };
    m.pod_operations_latency.observe(op, took);
    if result.is_err() {
        m.pod_operations_errors.with_label_values(&[op]).inc();
    }
}

/// Records a whole request as its client saw it, from receipt to answer (the CNI histograms,
/// openshift-sdn's `e2esetup`/`e2eteardown`).
pub(super) fn observe_request(name: &str, took: Duration, response: &Response) {
    let m = crate::telemetry::metrics::metrics();
    // Label values come from a closed set: a misspelt command counts as "unknown".
    let name = match name.parse::<Command>() {
        Ok(c) => c.as_str(),
        Err(_) => "unknown",
    };
    let ok = response.status() == StatusCode::OK;
    m.cni_request_duration
        .with_label_values(&[name, if ok { "success" } else { "error" }])
        .observe(took.as_secs_f64());
    if !ok {
        let code = response
            .extensions()
            .get::<ErrorCode>()
            .map_or(0, |c| c.0)
            .to_string();
        m.cni_request_errors
            .with_label_values(&[name, code.as_str()])
            .inc();
    }
    match name {
        "ADD" => m.pod_operations_latency.observe("e2esetup", took),
        "DEL" => m.pod_operations_latency.observe("e2eteardown", took),
        _ => {}
    }
}

/// The CNI error code of an error response, kept for the metrics.
#[derive(Clone, Copy, Debug)]
pub(super) struct ErrorCode(u32);

/// The client's answer: the handler's result, or "try again later" at the deadline.
pub(super) fn answer(
    outcome: Result<Result<Outcome, tokio::task::JoinError>, tokio::time::error::Elapsed>,
    phase: &Mutex<Phase>,
    container_id: &str,
    command: Command,
    version: CniVersion,
    budget: Duration,
) -> Response {
    let secs = fmt_secs(budget);
    let not_started = || {
        CniError::try_again_later(format!(
            "timed out after {secs} waiting for an earlier request for container {container_id} to finish; this request was not started"
        ))
    };
    match outcome {
        Ok(Ok(Outcome::Done(Ok(Some(result))))) => {
            response(StatusCode::OK, result.to_json(version))
        }
        Ok(Ok(Outcome::Done(Ok(None)))) => response(StatusCode::OK, String::new()),
        Ok(Ok(Outcome::Done(Err(e)))) => error_response(&e, version),
        Ok(Ok(Outcome::NotStarted)) => {
            let e = not_started();
            warn!("{}", e.msg);
            error_response(&e, version)
        }
        Ok(Err(join)) => {
            let e = CniError::internal(format!("the {command} handler failed unexpectedly"))
                .with_details(format!("handler task: {join}"));
            warn!("{e}");
            error_response(&e, version)
        }
        Err(_) => {
            let started = *phase.lock().unwrap_or_else(PoisonError::into_inner) == Phase::Started;
            let e = if started {
                CniError::try_again_later(format!(
                    "timed out after {secs}; the agent is still completing or rolling back this request"
                ))
            } else {
                not_started()
            };
            warn!("{}", e.msg);
            error_response(&e, version)
        }
    }
}

/// `1s`, `119s`, `0.9s`, `4.5s`: seconds with a decimal only when needed.
pub(super) fn fmt_secs(d: Duration) -> String {
    let tenths = (d.as_millis() + 50) / 100;
    let (whole, frac) = (tenths / 10, tenths % 10);
    if frac == 0 {
        format!("{whole}s")
    } else {
        format!("{whole}.{frac}s")
    }
}

/// Counts handler tasks (queued or running) so shutdown can wait for them.
#[derive(Debug, Default)]
pub(super) struct Inflight {
    pub(crate) count: AtomicUsize,
    pub(crate) idle: Notify,
}

pub(super) struct InflightGuard(Arc<Inflight>);

impl Inflight {
    pub(crate) fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self.clone())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
