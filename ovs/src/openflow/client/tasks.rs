//! The connection's three tasks: the reader (replies to their requests, flow monitor updates,
//! the switch's echo requests), the writer (one write per batch) and the keepalive (echo when
//! idle, close when unanswered).

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tracing::{debug, trace, warn};

use crate::openflow::wire::FrameBuffer;

use super::*;

/// Waits until the connection is marked closed.
pub(crate) async fn closed(rx: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means closed.
    let _ = rx.wait_for(|c| *c).await;
}

pub(crate) async fn reader_task(
    shared: Arc<Shared>,
    mut rd: BoxRead,
    mut frames: FrameBuffer,
    mut closed_rx: watch::Receiver<bool>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        loop {
            match frames.next_msg() {
                Ok(Some(msg)) => shared.incoming(msg),
                Ok(None) => break,
                Err(e) => {
                    shared.close(format!("framing error: {e}"));
                    return;
                }
            }
        }
        let read = tokio::select! {
            _ = closed(&mut closed_rx) => return,
            r = rd.read(&mut chunk) => r,
        };
        match read {
            Ok(0) => {
                shared.close("the switch closed the connection".into());
                return;
            }
            Ok(n) => {
                shared.touch();
                frames.extend(&chunk[..n]);
            }
            Err(e) => {
                shared.close(format!("read failed: {e}"));
                return;
            }
        }
    }
}

pub(crate) async fn writer_task(
    shared: Arc<Shared>,
    mut wr: BoxWrite,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    mut closed_rx: watch::Receiver<bool>,
) {
    loop {
        let mut buf = tokio::select! {
            _ = closed(&mut closed_rx) => break,
            m = rx.recv() => match m {
                Some(m) => m,
                None => break,
            },
        };
        while buf.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(m) => buf.extend_from_slice(&m),
                Err(_) => break,
            }
        }
        let res = tokio::select! {
            _ = closed(&mut closed_rx) => break,
            r = async {
                wr.write_all(&buf).await?;
                wr.flush().await
            } => r,
        };
        if let Err(e) = res {
            shared.close(format!("write failed: {e}"));
            break;
        }
    }
}

pub(crate) async fn keepalive_task(
    shared: Arc<Shared>,
    interval: Duration,
    timeout: Duration,
    mut closed_rx: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = closed(&mut closed_rx) => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if shared.idle_for() < interval {
            continue;
        }
        let probe = tokio::time::timeout(timeout, shared.echo());
        let res = tokio::select! {
            _ = closed(&mut closed_rx) => return,
            r = probe => r,
        };
        match res {
            Ok(Ok(rtt)) => trace!(peer = %shared.peer, ?rtt, "echo reply"),
            Err(_) | Ok(Err(OfError::Timeout { .. })) => {
                warn!(peer = %shared.peer, ?timeout, "no echo reply: closing the connection");
                shared.close(format!(
                    "no echo reply within {timeout:?}: connection presumed dead"
                ));
                return;
            }
            Ok(Err(e)) => {
                debug!(peer = %shared.peer, error = %e, "keepalive stopping");
                return;
            }
        }
    }
}
