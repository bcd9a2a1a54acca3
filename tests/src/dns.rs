//! A tiny authoritative DNS server for tests: A records from a map the test changes while it
//! runs, each answer with the TTL the test chose, on UDP in a network namespace. Enough for the
//! agent's resolver (hickory) asking `A` questions; anything else gets an empty answer (NOERROR),
//! an unknown name NXDOMAIN.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::harness::in_netns;

/// Answers: name (lowercase, no final dot) → (addresses, TTL in seconds).
type Zone = BTreeMap<String, (Vec<Ipv4Addr>, u32)>;

/// A running server; stops on drop.
#[derive(Debug)]
pub struct DnsServer {
    zone: Arc<Mutex<Zone>>,
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DnsServer {
    /// Serves on UDP `0.0.0.0:port` in namespace `netns`.
    pub fn start(netns: &str, port: u16) -> DnsServer {
        let ns = netns.to_string();
        let socket = in_netns(netns, move || {
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))
                .unwrap_or_else(|e| panic!("netns {ns}: DNS server on udp/{port}: {e}"));
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("read timeout");
            s
        });
        let zone: Arc<Mutex<Zone>> = Arc::default();
        let queries = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (z, q, st) = (zone.clone(), queries.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                q.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = answer(&buf[..n], &z.lock().unwrap_or_else(|e| e.into_inner()))
                {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        DnsServer {
            zone,
            queries,
            stop,
            thread: Some(thread),
        }
    }

    /// Sets what `name` resolves to, with `ttl` seconds.
    pub fn set(&self, name: &str, addrs: &[Ipv4Addr], ttl: u32) {
        self.zone.lock().unwrap_or_else(|e| e.into_inner()).insert(
            name.trim_end_matches('.').to_ascii_lowercase(),
            (addrs.to_vec(), ttl),
        );
    }

    /// Questions received so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reply to one query, or `None` when it is not one.
fn answer(q: &[u8], zone: &Zone) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 {
        return None;
    }
    // One question: QNAME labels, QTYPE, QCLASS.
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = *q.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let question_end = i + 4;
    let question = q.get(12..question_end)?;
    let name = labels.join(".");
    let (rcode, records) = match zone.get(&name) {
        None => (3u8, Vec::new()),
        Some((addrs, ttl)) if qtype == 1 => (0, addrs.iter().map(|a| (*a, *ttl)).collect()),
        Some(_) => (0, Vec::new()),
    };
    let mut r = Vec::with_capacity(64);
    r.extend_from_slice(&q[0..2]); // id
    r.push(0x84 | (q[2] & 0x01)); // QR, AA, RD copied
    r.push(rcode);
    r.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    r.extend_from_slice(&(records.len() as u16).to_be_bytes()); // ANCOUNT
    r.extend_from_slice(&[0, 0, 0, 0]); // NSCOUNT, ARCOUNT
    r.extend_from_slice(question);
    for (addr, ttl) in records {
        r.extend_from_slice(&[0xc0, 12]); // pointer to the question's name
        r.extend_from_slice(&1u16.to_be_bytes()); // A
        r.extend_from_slice(&1u16.to_be_bytes()); // IN
        r.extend_from_slice(&ttl.to_be_bytes());
        r.extend_from_slice(&4u16.to_be_bytes());
        r.extend_from_slice(&addr.octets());
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_a_questions_from_the_zone() {
        let mut zone = Zone::new();
        zone.insert(
            "db.example.com".into(),
            (vec![Ipv4Addr::new(198, 51, 100, 7)], 5),
        );
        // id 0x1234, RD, one question db.example.com A IN.
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in ["db", "example", "com"] {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        let r = answer(&q, &zone).unwrap();
        assert_eq!(&r[0..2], &[0x12, 0x34]);
        assert_eq!(r[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 1, "one answer");
        assert_eq!(&r[r.len() - 4..], &[198, 51, 100, 7]);
        zone.clear();
        let r = answer(&q, &zone).unwrap();
        assert_eq!(r[3] & 0x0f, 3, "NXDOMAIN");
    }
}
