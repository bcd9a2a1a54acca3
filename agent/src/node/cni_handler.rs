//! The CNI handler: the CNI server's requests into pod operations (ADD, DEL, CHECK, GC,
//! STATUS), answered "try again later" while OVS is known down.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::error::Result;

use crate::cni::{self, AddResult, CniError, Request};
use crate::operator::observe::NodeView;
use crate::pod::Pods;

use super::*;

/// The CNI handler: requests to pod operations.
#[derive(Debug)]
pub(super) struct AgentHandler {
    pub(super) pods: Arc<Pods>,
    pub(super) view: Arc<NodeView>,
}

impl AgentHandler {
    /// Code 11 at once while Open vSwitch is known to be down: the request would only wait for
    /// it (up to the request deadline) and fail; the runtime retries later.
    async fn ovs_up(&self) -> Result<(), CniError> {
        match self.view.ovs_known_down().await {
            None => Ok(()),
            Some(why) => Err(CniError::new(
                crate::cni::codes::TRY_AGAIN_LATER,
                format!("Open vSwitch is down, try again later: {why}"),
                "the agent answers this as soon as OVSDB and br0 are reachable again (sdnctl status, /readyz)",
            )),
        }
    }
}

impl cni::Handler for AgentHandler {
    async fn add(&self, req: Request) -> Result<AddResult, CniError> {
        self.ovs_up().await?;
        let mut at = attach::attachment(&req);
        let interface = cni::chain::interface_for(&self.view.config.cni_conf_dir, &req.config.name);
        if let cni::chain::Interface::PlainVeth(why) = interface {
            tracing::debug!(network = %req.config.name, %why, "no pool port for this pod: a plain veth");
            at.plain_veth_for = Some(why);
        }
        let wired = self.pods.add(&at).await?;
        Ok(attach::add_result(&req, self.pods.network(), &wired))
    }

    async fn del(&self, req: Request) -> Result<(), CniError> {
        self.ovs_up().await?;
        let at = attach::attachment(&req);
        Ok(self.pods.del(&at.id).await?)
    }

    async fn check(&self, req: Request) -> Result<(), CniError> {
        self.ovs_up().await?;
        Ok(self.pods.check(&attach::attachment(&req)).await?)
    }

    async fn gc(&self, req: Request) -> Result<(), CniError> {
        let Some(list) = req.config.valid_attachments.as_ref() else {
            return Err(CniError::new(
                crate::cni::codes::INVALID_CONFIG,
                "GC without cni.dev/valid-attachments: refusing to remove every attachment",
                "the runtime must list the attachments to keep (an empty list removes all)",
            ));
        };
        let valid: BTreeSet<flows::AttachmentId> = list
            .iter()
            .map(|a| flows::AttachmentId::new(a.container_id.clone(), a.ifname.clone()))
            .collect();
        let removed = self.pods.gc(&valid).await?;
        tracing::info!(removed, valid = valid.len(), "GC done");
        Ok(())
    }

    /// Ready as `/readyz` is ready (one definition, see `observe`): the first failing check
    /// is the error, with every check in the details.
    async fn status(&self, _req: Request) -> Result<(), CniError> {
        let checks = self.view.readiness(false).await;
        match checks.iter().find(|c| !c.ok) {
            None => Ok(()),
            Some(bad) => Err(CniError::new(
                crate::cni::codes::PLUGIN_NOT_AVAILABLE,
                format!("not ready: {}: {}", bad.name, bad.detail),
                checks
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}: {}",
                            c.name,
                            if c.ok { "ok" } else { "failed" },
                            c.detail
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }
}
