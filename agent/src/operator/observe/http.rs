//! The small HTTP/1.1 server both local endpoints use (the metrics address and the local API):
//! one answer per request, bodies bounded, and the health checks as an answer.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, StatusCode};
use local_api::Check;
use serde::Serialize;
use std::time::Duration;

/// `/livez` or `/readyz` as Kubernetes components answer them: 200 `ok` (or every check with
/// `?verbose`), else 503 with every check, `[+]` passed and `[-]` failed, and why.
pub(crate) fn checks_answer(what: &str, checks: &[Check], verbose: bool) -> HttpAnswer {
    let ok = checks.iter().all(|c| c.ok);
    let mut body = String::new();
    if verbose || !ok {
        for c in checks {
            body.push_str(&format!(
                "[{}]{} {}: {}\n",
                if c.ok { "+" } else { "-" },
                c.name,
                if c.ok { "ok" } else { "failed" },
                c.detail
            ));
        }
    }
    if ok {
        body.push_str(&format!("{what} check passed\n"));
        HttpAnswer::text(StatusCode::OK, body)
    } else {
        body.push_str(&format!("{what} check failed\n"));
        HttpAnswer::text(StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

/// One answer of the agent's small HTTP endpoints.
#[derive(Debug)]
pub(crate) struct HttpAnswer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl HttpAnswer {
    /// A plain-text answer.
    pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// A JSON answer.
    pub(crate) fn json(status: StatusCode, value: &impl Serialize) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "application/json",
            body: serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
        }
    }
}

/// The largest request body the endpoints read.
pub(crate) const MAX_BODY: usize = 64 << 10;

/// Serves one HTTP/1.1 connection with `answer(method, path, query, body)`: request headers
/// within 10 s, the body (at most 64 KiB) within 10 s, no keep-alive.
pub(crate) async fn serve_http<IO, F, Fut>(io: IO, answer: F)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Method, String, String, Bytes) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = HttpAnswer> + Send,
{
    use http_body_util::{BodyExt, Limited};
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let answer = answer.clone();
        async move {
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let head = method == Method::HEAD;
            let body = tokio::time::timeout(
                Duration::from_secs(10),
                Limited::new(req.into_body(), MAX_BODY).collect(),
            )
            .await;
            let a = match body {
                Ok(Ok(b)) => answer(method, path, query, b.to_bytes()).await,
                Ok(Err(e)) => HttpAnswer::text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("cannot read the request body (at most {MAX_BODY} bytes): {e}\n"),
                ),
                Err(_) => HttpAnswer::text(
                    StatusCode::REQUEST_TIMEOUT,
                    "request body not received within 10 s\n",
                ),
            };
            let body = if head { String::new() } else { a.body };
            let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = a.status;
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .keep_alive(false);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    if let Err(e) = tokio::time::timeout(Duration::from_secs(120), conn).await {
        tracing::debug!(error = %e, "HTTP connection closed after 120 s");
    }
}
