//! A minimal HTTP/1.1 client side: write one request, read one response.
//!
//! Hand-written on `Read`/`Write` so the shim needs no HTTP crate and no async runtime: the
//! exchange is a single `POST` with `Connection: close`. The response reader handles what a
//! server such as hyper may send: interim 1xx responses (skipped), `Content-Length`, `chunked`
//! transfer coding, or a body delimited by the end of the connection. It never trusts the peer:
//! lines, header counts and bodies are bounded, and a short or malformed response is an error,
//! never a panic.
//!
//! Limits: no keep-alive, no pipelining, no compression, no trailers kept (they are read and
//! dropped); header values must be UTF-8 only for the headers it uses.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};

/// The largest response body accepted.
pub(crate) const MAX_BODY: usize = 16 << 20;
/// The longest status, header or chunk-size line accepted.
const MAX_LINE: usize = 16 << 10;
/// The most header lines accepted in one response.
const MAX_HEADERS: usize = 128;

/// A response: its status code and its (de-chunked) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// The status code, e.g. 200.
    pub status: u16,
    /// The body bytes.
    pub body: Vec<u8>,
}

/// Why reading a response failed.
#[derive(Debug)]
pub(crate) enum HttpError {
    /// The transport failed (including read timeouts: `WouldBlock`/`TimedOut`).
    Io(io::Error),
    /// The peer closed the connection before the response was complete.
    Closed(String),
    /// The response is not valid HTTP/1.x.
    Malformed(String),
}

impl HttpError {
    /// Whether this is a read or write timeout.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, HttpError::Io(e) if is_timeout(e))
    }
}

/// Whether an I/O error is a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report `EAGAIN`).
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Io(e) => write!(f, "i/o error: {e}"),
            HttpError::Closed(what) => write!(f, "connection closed {what}"),
            HttpError::Malformed(what) => write!(f, "malformed http response: {what}"),
        }
    }
}

impl From<io::Error> for HttpError {
    fn from(e: io::Error) -> HttpError {
        HttpError::Io(e)
    }
}

/// Writes `POST <path>` with a JSON `body` and `Connection: close`, then flushes.
pub(crate) fn write_request(w: &mut impl Write, path: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: sdn-agent\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // One buffer, one write in the common case: the agent sees the request at once.
    let mut buf = Vec::with_capacity(head.len() + body.len());
    buf.extend_from_slice(head.as_bytes());
    buf.extend_from_slice(body.as_bytes());
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one final response from `r`, skipping interim 1xx responses.
pub(crate) fn read_response(r: &mut impl Read) -> Result<Response, HttpError> {
    let mut rd = Reader::new(r);
    loop {
        let (status, framing) = read_head(&mut rd)?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let body = match framing {
            _ if status == 204 || status == 304 => Vec::new(),
            Framing::Chunked => read_chunked(&mut rd)?,
            Framing::Length(n) => rd.exact(n)?,
            Framing::ToEof => rd.until_eof()?,
        };
        return Ok(Response { status, body });
    }
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Chunked,
    Length(usize),
    ToEof,
}

/// Reads the status line and headers.
fn read_head<R: Read>(rd: &mut Reader<'_, R>) -> Result<(u16, Framing), HttpError> {
    let line = rd.line("before the status line")?;
    let status = parse_status_line(&line)?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for count in 0.. {
        let line = rd.line("in the headers")?;
        if line.is_empty() {
            break;
        }
        if count >= MAX_HEADERS {
            return Err(HttpError::Malformed(format!(
                "more than {MAX_HEADERS} headers"
            )));
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(HttpError::Malformed(format!(
                "header line without ':': {}",
                String::from_utf8_lossy(&line)
            )));
        };
        let name = &line[..colon];
        let value = String::from_utf8_lossy(&line[colon + 1..]);
        let value = value.trim();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(value)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::Malformed(
                    "conflicting Content-Length headers".into(),
                ));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Per RFC 9112 the body is chunked when chunked is the final coding.
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                return Err(HttpError::Malformed(format!(
                    "unsupported Transfer-Encoding {value:?}"
                )));
            }
        }
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::ToEof,
    };
    Ok((status, framing))
}

/// `HTTP/1.x NNN reason` -> NNN.
fn parse_status_line(line: &[u8]) -> Result<u16, HttpError> {
    let text = String::from_utf8_lossy(line);
    let bad = || HttpError::Malformed(format!("bad status line {text:?}"));
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(bad());
    }
    let code = parts.next().unwrap_or_default();
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    code.parse::<u16>()
        .ok()
        .filter(|c| *c >= 100)
        .ok_or_else(bad)
}

/// A Content-Length value, bounded by [`MAX_BODY`].
fn parse_length(value: &str) -> Result<usize, HttpError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::Malformed(format!(
            "bad Content-Length {value:?}"
        )));
    }
    match value.parse::<usize>() {
        Ok(n) if n <= MAX_BODY => Ok(n),
        _ => Err(HttpError::Malformed(format!(
            "Content-Length {value} exceeds the {MAX_BODY}-byte limit"
        ))),
    }
}

/// A chunked body: `size[;ext]` CRLF data CRLF ... `0` CRLF trailers CRLF.
fn read_chunked<R: Read>(rd: &mut Reader<'_, R>) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    loop {
        let line = rd.line("in a chunk size")?;
        let text = String::from_utf8_lossy(&line);
        let size_text = text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed(format!("bad chunk size {text:?}")))?;
        if size == 0 {
            // Trailers, then the final empty line.
            while !rd.line("in the trailers")?.is_empty() {}
            return Ok(body);
        }
        if size > MAX_BODY - body.len() {
            return Err(HttpError::Malformed(format!(
                "chunked body exceeds the {MAX_BODY}-byte limit"
            )));
        }
        body.extend_from_slice(&rd.exact(size)?);
        if !rd.line("after a chunk")?.is_empty() {
            return Err(HttpError::Malformed(
                "chunk data not followed by CRLF".into(),
            ));
        }
    }
}

/// A small buffered reader that retries `Interrupted` and bounds what it buffers.
struct Reader<'a, R: Read> {
    inner: &'a mut R,
    buf: Vec<u8>,
    pos: usize,
}

impl<'a, R: Read> Reader<'a, R> {
    fn new(inner: &'a mut R) -> Self {
        Reader {
            inner,
            buf: Vec::with_capacity(4096),
            pos: 0,
        }
    }

    /// Reads more bytes into the buffer; `Ok(0)` at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 8192];
        loop {
            match self.inner.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// One line without its LF (and CR); EOF before the LF is [`HttpError::Closed`].
    fn line(&mut self, stage: &str) -> Result<Vec<u8>, HttpError> {
        let mut searched = 0;
        loop {
            let pending = &self.buf[self.pos..];
            if let Some(i) = pending[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + i;
                let mut line = pending[..end].to_vec();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.pos += end + 1;
                return Ok(line);
            }
            searched = pending.len();
            if searched > MAX_LINE {
                return Err(HttpError::Malformed(format!(
                    "line longer than {MAX_LINE} bytes {stage}"
                )));
            }
            if self.fill()? == 0 {
                return Err(HttpError::Closed(format!(
                    "{stage} ({searched} bytes of an unfinished line)"
                )));
            }
        }
    }

    /// Exactly `n` bytes; EOF before is [`HttpError::Closed`].
    fn exact(&mut self, n: usize) -> Result<Vec<u8>, HttpError> {
        while self.buf.len() - self.pos < n {
            if self.fill()? == 0 {
                return Err(HttpError::Closed(format!(
                    "in the body ({} of {n} bytes received)",
                    self.buf.len() - self.pos
                )));
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }

    /// Everything until EOF, bounded by [`MAX_BODY`].
    fn until_eof(&mut self) -> Result<Vec<u8>, HttpError> {
        loop {
            if self.buf.len() - self.pos > MAX_BODY {
                return Err(HttpError::Malformed(format!(
                    "body exceeds the {MAX_BODY}-byte limit"
                )));
            }
            if self.fill()? == 0 {
                return Ok(self.buf[self.pos..].to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields its data `step` bytes per read, then EOF (or an error, if set).
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        end: Option<ErrorKind>,
        interrupted: bool,
    }

    impl Trickle {
        fn new(data: &[u8], step: usize) -> Self {
            Trickle {
                data: data.to_vec(),
                at: 0,
                step,
                end: None,
                interrupted: false,
            }
        }
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                return match self.end {
                    Some(kind) => Err(io::Error::new(kind, "trickle end")),
                    None => Ok(0),
                };
            }
            // Every other read is interrupted (EINTR): the reader must retry transparently.
            self.interrupted = !self.interrupted;
            if self.interrupted {
                return Err(io::Error::from(ErrorKind::Interrupted));
            }
            let n = self.step.min(out.len()).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn parse(data: &[u8], step: usize) -> Result<Response, HttpError> {
        read_response(&mut Trickle::new(data, step))
    }

    #[test]
    fn content_length_body() {
        let r = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing",
            4096,
        )
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"{}");
    }

    #[test]
    fn split_over_many_reads_gives_same_response() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 18\r\n\
                   date: x\r\n\r\n{\"cniVersion\":\"1\"}";
        for step in [1, 2, 3, 7, 64] {
            let r = parse(ok, step).unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body, b"{\"cniVersion\":\"1\"}", "step {step}");
        }
    }

    #[test]
    fn missing_content_length_reads_to_eof() {
        for step in [1, 5, 4096] {
            let r = parse(
                b"HTTP/1.0 500 Internal Server Error\nX: y\n\n{\"code\":100}\n",
                step,
            )
            .unwrap();
            assert_eq!(r.status, 500);
            assert_eq!(r.body, b"{\"code\":100}\n");
        }
        let r = parse(b"HTTP/1.1 200 OK\r\n\r\n", 1).unwrap();
        assert!(r.body.is_empty());
    }

    #[test]
    fn non_json_4xx_body_is_returned_as_is() {
        let r = parse(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
            3,
        )
        .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.body, b"not found");
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                     4;ext=1\r\n{\"a\"\r\nA\r\n:123456789\r\n1\r\n}\r\n0\r\nX-T: 1\r\n\r\n";
        for step in [1, 4, 4096] {
            let r = parse(data, step).unwrap();
            assert_eq!(r.body, b"{\"a\":123456789}", "step {step}");
        }
    }

    #[test]
    fn interim_100_is_skipped() {
        let r = parse(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
            2,
        )
        .unwrap();
        assert_eq!(r.status, 201);
    }

    #[test]
    fn closed_early_is_closed() {
        for data in [
            &b""[..],
            b"HTTP/1.1 200",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        ] {
            let e = parse(data, 2).unwrap_err();
            assert!(matches!(e, HttpError::Closed(_)), "{data:?}: {e}");
        }
    }

    #[test]
    fn garbage_is_malformed() {
        for data in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 20x OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n",
        ] {
            let e = parse(data, 3).unwrap_err();
            assert!(matches!(e, HttpError::Malformed(_)), "{data:?}: {e}");
        }
        let long = vec![b'a'; MAX_LINE + 10];
        assert!(matches!(parse(&long, 4096), Err(HttpError::Malformed(_))));
    }

    #[test]
    fn read_timeout_is_reported_as_timeout() {
        let mut t = Trickle::new(b"HTTP/1.1 200 OK\r\n", 100);
        t.end = Some(ErrorKind::WouldBlock);
        let e = read_response(&mut t).unwrap_err();
        assert!(e.is_timeout(), "{e}");
    }

    #[test]
    fn request_is_well_formed() {
        let mut out = Vec::new();
        // 9 characters, 10 bytes: the length counts bytes.
        write_request(&mut out, "/cni", "{\"a\":\"é\"}").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "POST /cni HTTP/1.1\r\nHost: sdn-agent\r\nContent-Type: application/json\r\n\
             Content-Length: 10\r\nConnection: close\r\n\r\n{\"a\":\"é\"}"
        );
    }
}
