//! The agent's logging: `tracing` to stderr as text or as one JSON object per line
//! (`logFormat`), a level filter that can be changed while the agent runs (`sdnctl log-level`
//! through the local API), and the last lines kept in memory for `sdnctl bundle`.
//!
//! Why a reloadable filter: the detail an operator needs at 3 a.m. (`debug` for the pod logic,
//! `ovs=trace` for the wire) is the detail nobody wants all day, and restarting the agent to
//! get it would change what is being debugged. Why the memory copy: in a container the log
//! belongs to the runtime, and a bundle taken on the node should not need `kubectl logs`.
//! `RUST_LOG`, when set, wins over `logLevel` at start (the usual tracing convention).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

use crate::lock;
pub use cluster::config::{parse_filter, LogFormat};

/// How many log lines the memory copy keeps.
pub const KEPT_LINES: usize = 5000;

/// The running logger's controls.
#[derive(Debug)]
pub struct Logging {
    filter: reload::Handle<EnvFilter, Registry>,
    current: Mutex<String>,
    kept: Arc<Mutex<VecDeque<String>>>,
    /// The same lines as JSON objects (for `sdnctl log --json`).
    kept_json: Arc<Mutex<VecDeque<String>>>,
}

static LOGGING: OnceLock<Logging> = OnceLock::new();

/// The logger installed by [`init`], if any (tests that embed the agent have their own).
pub fn logging() -> Option<&'static Logging> {
    LOGGING.get()
}

/// Installs the process's logger: `format` to stderr (ANSI colours only on a terminal), level
/// `level` unless `RUST_LOG` is set. Errors when a logger is installed already.
pub fn init(format: LogFormat, level: &str) -> Result<&'static Logging, String> {
    let start = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => level.to_string(),
    };
    let (filter, handle) = reload::Layer::new(parse_filter(&start)?);
    let kept: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // Its own field formatter type: layers with the same one share a span's formatted fields,
    // and each would append a field recorded later (the CNI span's netns and pod), so text
    // lines printed them twice.
    let memory = tracing_subscriber::fmt::layer()
        .fmt_fields(KeptFields::default())
        .with_ansi(false)
        .with_writer(KeptWriter(kept.clone()));
    let kept_json: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let memory_json = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(false)
        .with_span_list(true)
        .with_writer(KeptWriter(kept_json.clone()));
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(memory)
        .with(memory_json)
        .try_init()
        .map_err(|e| format!("installing the logger: {e}"))?;
    let l = Logging {
        filter: handle,
        current: Mutex::new(start),
        kept,
        kept_json,
    };
    LOGGING
        .set(l)
        .map_err(|_| "the logger is installed already".to_string())?;
    Ok(LOGGING.get().expect("just set"))
}

impl Logging {
    /// The filter in force.
    pub fn level(&self) -> String {
        lock(&self.current).clone()
    }

    /// Changes the filter at once, for every module; returns the previous one.
    pub fn set_level(&self, filter: &str) -> Result<String, String> {
        let parsed = parse_filter(filter)?;
        self.filter
            .reload(parsed)
            .map_err(|e| format!("changing the log level: {e}"))?;
        let previous = std::mem::replace(&mut *lock(&self.current), filter.trim().to_string());
        tracing::warn!(from = %previous, to = %filter.trim(), "log level changed");
        Ok(previous)
    }

    /// The last [`KEPT_LINES`] lines, oldest first (text format, whatever `logFormat` says).
    pub fn recent(&self) -> String {
        lock(&self.kept).iter().map(String::as_str).collect()
    }

    /// The same lines as one JSON array of the JSON log format's objects (`timestamp`,
    /// `level`, `fields`, `target`, `spans`), oldest first.
    pub fn recent_json(&self) -> String {
        let kept = lock(&self.kept_json);
        let mut out = String::from("[");
        for (i, line) in kept.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(line.trim_end());
        }
        out.push(']');
        out
    }
}

/// The text field formatter of the memory copy: the default one under a type of its own (see
/// [`init`]).
#[derive(Debug, Default)]
struct KeptFields(tracing_subscriber::fmt::format::DefaultFields);

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for KeptFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        self.0.format_fields(writer, fields)
    }
}

/// Writes each formatted line into the memory copy.
#[derive(Clone)]
struct KeptWriter(Arc<Mutex<VecDeque<String>>>);

impl Write for KeptWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept = lock(&self.0);
        if kept.len() >= KEPT_LINES {
            kept.pop_front();
        }
        kept.push_back(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for KeptWriter {
    type Writer = KeptWriter;
    fn make_writer(&'a self) -> KeptWriter {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_with_a_hint() {
        for ok in ["info", "debug", "agent=debug,ovs=info", " warn "] {
            assert!(parse_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["", "verbose=", "loud", "info,[", "agent=loud"] {
            let e = parse_filter(bad).unwrap_err();
            assert!(e.contains("error, warn, info, debug, trace"), "{bad}: {e}");
        }
    }

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert!("yaml".parse::<LogFormat>().is_err());
    }
}
