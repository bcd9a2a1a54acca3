//! Where audit lines go: a size-capped file rotated in place (`audit.log`, `audit.log.1`
//! newest, up to `auditLogMaxFiles`), in JSON lines or RFC 5424 text, and optionally a syslog
//! socket (Unix datagram or UDP, RFC 5424) fed by a thread of its own.
//!
//! Why rotation here and not by logrotate: the cap is part of the agent's promise (a flood of
//! denied packets must not fill the node's disk between two logrotate runs), and a file the
//! agent rotates itself is never written half to an unlinked inode. A write error (disk full,
//! the directory removed) is counted and logged once per minute; lines are then lost, never
//! traffic.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cluster::config::{AuditFormat, SyslogTarget};

use super::line::Line;

/// The file and socket lines are written to.
pub(crate) struct Sink {
    path: PathBuf,
    format: AuditFormat,
    max_bytes: u64,
    max_files: u32,
    file: Option<BufWriter<File>>,
    size: u64,
    syslog: Option<Syslog>,
    last_error: Option<Instant>,
    /// Lines written to the file.
    pub written: u64,
    /// Lines lost to write errors.
    pub failed: u64,
}

/// The syslog socket's writer: a thread with a bounded queue, so a daemon that reads slowly
/// (a Unix datagram socket queues only `net.unix.max_dgram_qlen` datagrams, 10 by default)
/// gets every line it can keep within [`SYSLOG_QUEUE`] of, and one that is gone costs lines,
/// never the agent's time.
struct Syslog {
    tx: std::sync::mpsc::SyncSender<String>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Lines queued for the syslog socket.
const SYSLOG_QUEUE: usize = 10_000;

impl Syslog {
    fn start(target: &SyslogTarget) -> std::io::Result<Syslog> {
        enum Sock {
            Unix(std::os::unix::net::UnixDatagram, PathBuf),
            Udp(std::net::UdpSocket, std::net::SocketAddr),
        }
        let sock = match target {
            SyslogTarget::Unix(p) => {
                let s = std::os::unix::net::UnixDatagram::unbound()?;
                s.set_write_timeout(Some(Duration::from_secs(1)))?;
                Sock::Unix(s, p.clone())
            }
            SyslogTarget::Udp(a) => {
                let bind: std::net::SocketAddr = if a.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let s = std::net::UdpSocket::bind(bind)?;
                s.set_write_timeout(Some(Duration::from_secs(1)))?;
                Sock::Udp(s, *a)
            }
        };
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(SYSLOG_QUEUE);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lost = dropped.clone();
        let name = target.to_string();
        std::thread::Builder::new()
            .name("audit-syslog".into())
            .spawn(move || {
                let mut warned: Option<Instant> = None;
                for msg in rx {
                    let sent = match &sock {
                        Sock::Unix(s, p) => s.send_to(msg.as_bytes(), p),
                        Sock::Udp(s, a) => s.send_to(msg.as_bytes(), a),
                    };
                    if let Err(e) = sent {
                        lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                            warned = Some(Instant::now());
                            tracing::warn!(target_socket = %name, error = %e, "cannot send audit lines to syslog; they are in the audit log file");
                        }
                    }
                }
            })?;
        Ok(Syslog { tx, dropped })
    }

    fn send(&self, msg: String) {
        if self.tx.try_send(msg).is_err() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Sink {
    /// A sink writing `path` (its directory is created), rotated past `max_bytes`.
    pub(crate) fn new(
        path: &Path,
        format: AuditFormat,
        max_bytes: u64,
        max_files: u32,
        syslog: Option<&SyslogTarget>,
    ) -> Sink {
        let syslog = syslog.and_then(|t| {
            Syslog::start(t)
                .map_err(|e| tracing::warn!(target_socket = %t, error = %e, "cannot open a socket for audit syslog lines"))
                .ok()
        });
        Sink {
            path: path.to_path_buf(),
            format,
            max_bytes: max_bytes.max(4096),
            max_files: max_files.max(1),
            file: None,
            size: 0,
            syslog,
            last_error: None,
            written: 0,
            failed: 0,
        }
    }

    /// Lines the syslog socket did not get (its queue was full, or sending failed).
    pub(crate) fn syslog_dropped(&self) -> u64 {
        self.syslog
            .as_ref()
            .map_or(0, |s| s.dropped.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn open(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                fs::create_dir_all(dir)?;
            }
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.size = f.metadata()?.len();
            self.file = Some(BufWriter::with_capacity(64 * 1024, f));
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    /// `FILE.n` for n ≥ 1.
    fn rotated(&self, n: u32) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        p.into()
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        let _ = fs::remove_file(self.rotated(self.max_files));
        for n in (1..self.max_files).rev() {
            let from = self.rotated(n);
            if from.exists() {
                fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        if self.path.exists() {
            fs::rename(&self.path, self.rotated(1))?;
        }
        self.size = 0;
        Ok(())
    }

    fn write_file(&mut self, text: &str) -> std::io::Result<()> {
        self.open()?;
        let n = text.len() as u64 + 1;
        if self.size > 0 && self.size + n > self.max_bytes {
            self.rotate()?;
        }
        let f = self.open()?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        self.size += n;
        Ok(())
    }

    /// Writes one line to the file and the syslog socket.
    pub(crate) fn write(&mut self, line: &Line) {
        let text = match self.format {
            AuditFormat::Json => line.json(),
            AuditFormat::Syslog => line.rfc5424(),
        };
        match self.write_file(&text) {
            Ok(()) => self.written += 1,
            Err(e) => {
                self.failed += 1;
                crate::telemetry::metrics::metrics()
                    .audit_write_errors
                    .inc();
                self.file = None;
                if self
                    .last_error
                    .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
                {
                    self.last_error = Some(Instant::now());
                    tracing::error!(file = %self.path.display(), error = %e, lost = self.failed, "cannot write the audit log; lines are lost until it can be written (traffic is not affected)");
                }
            }
        }
        if let Some(s) = &self.syslog {
            let msg = if self.format == AuditFormat::Syslog {
                text
            } else {
                line.rfc5424()
            };
            s.send(msg);
        }
    }

    /// Flushes the file (after a batch of lines).
    pub(crate) fn flush(&mut self) {
        if let Some(f) = self.file.as_mut() {
            if let Err(e) = f.flush() {
                self.failed += 1;
                self.file = None;
                tracing::error!(file = %self.path.display(), error = %e, "cannot flush the audit log");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(i: usize) -> Line {
        Line::note("node-a", &format!("line {i:04} {}", "x".repeat(60)))
    }

    #[test]
    fn the_file_is_rotated_at_its_cap_and_keeps_max_files() {
        let dir = std::env::temp_dir().join(format!("sdn-audit-sink-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("sub/audit.log");
        let mut s = Sink::new(&path, AuditFormat::Json, 4096, 3, None);
        for i in 0..400 {
            s.write(&line(i));
        }
        s.flush();
        assert_eq!(s.written, 400);
        let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert!(size(&path) <= 4096, "current file {}", size(&path));
        for n in 1..=3 {
            let r = s.rotated(n);
            assert!(r.exists(), "{} missing", r.display());
            assert!(
                size(&r) <= 4096 && size(&r) > 3000,
                "{}: {}",
                r.display(),
                size(&r)
            );
        }
        assert!(!s.rotated(4).exists(), "more than 3 rotated files");
        // The newest lines are in the current file, the ones before in .1.
        let cur = fs::read_to_string(&path).unwrap();
        assert!(cur.contains("line 0399"), "{cur}");
        let one = fs::read_to_string(s.rotated(1)).unwrap();
        let last_of_one: &str = one.lines().last().unwrap();
        let first_of_cur: &str = cur.lines().next().unwrap();
        let n = |l: &str| {
            l.split("line ").nth(1).unwrap()[..4]
                .parse::<u32>()
                .unwrap()
        };
        assert_eq!(n(last_of_one) + 1, n(first_of_cur));
        // Every line is whole JSON.
        for l in cur.lines().chain(one.lines()) {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_file_counts_lost_lines_and_recovers() {
        let dir = std::env::temp_dir().join(format!("sdn-audit-sink2-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // A directory where the file should be.
        let path = dir.join("audit.log");
        fs::create_dir_all(&path).unwrap();
        let mut s = Sink::new(&path, AuditFormat::Syslog, 1 << 20, 2, None);
        s.write(&line(1));
        assert_eq!((s.written, s.failed), (0, 1));
        fs::remove_dir(&path).unwrap();
        s.write(&line(2));
        s.flush();
        assert_eq!((s.written, s.failed), (1, 1));
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("<"), "an RFC 5424 line: {text}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
