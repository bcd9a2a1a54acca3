//! Multicast per tenant: the VNIDs whose every namespace carries the NetNamespace annotation
//! `netnamespace.network.openshift.io/multicast-enabled: "true"` get their rows in tables 110
//! (multicast out, per VNID) and 120 (to the VNID's local pods); table 111 (to every remote
//! VTEP) belongs to the remote nodes.
//!
//! The rows themselves depend on the local pods' ports as much as on the enabled set, so the
//! flow store keeps them ([`FlowStore::set_multicast`] rewrites a VNID's rows as its pods come
//! and go); this feature only feeds it the enabled set, computed purely from the cluster state
//! (`ClusterState::multicast_vnids`). The smallest feature, and the model of one: a file, and
//! one line in [`super::register`].

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use cluster::ClusterState;
use flows::{Table, Vnid};

use super::contract::{FeatureError, NodeFeature, Phase, Reason};
use super::Context;
use crate::bridge::flowstore::FlowStore;
use crate::bridge::seams::FlowSwitch;

/// The tables multicast writes.
pub(crate) const MULTICAST_TABLES: &[Table] = &[Table::MulticastOut, Table::MulticastLocal];

/// The multicast-enabled tenants (see the module docs).
#[derive(Debug)]
pub(crate) struct Multicast<S> {
    store: Arc<FlowStore<S>>,
    state: watch::Receiver<Arc<ClusterState>>,
}

impl<S: FlowSwitch + 'static> Multicast<S> {
    /// The feature, where namespaces have VNIDs (not in subnet mode).
    pub(crate) fn feature(ctx: &Context<S>) -> Option<Arc<Self>> {
        ctx.node.mode.has_vnids().then(|| {
            Arc::new(Multicast {
                store: ctx.store.clone(),
                state: ctx.state.clone(),
            })
        })
    }

    fn wanted(&self) -> BTreeSet<Vnid> {
        self.state.borrow().multicast_vnids()
    }
}

impl<S: FlowSwitch + 'static> NodeFeature for Multicast<S> {
    fn name(&self) -> &'static str {
        "multicast"
    }

    fn tables(&self) -> &'static [Table] {
        MULTICAST_TABLES
    }

    fn stage(&self) -> BoxFuture<'_, Result<usize, FeatureError>> {
        Box::pin(async move {
            let want = self.wanted();
            let n = want.len();
            self.store.stage_multicast(want).await;
            Ok(n)
        })
    }

    fn sync(&self, phase: Phase, _: Reason) -> BoxFuture<'_, Result<(), FeatureError>> {
        Box::pin(async move {
            // The store keeps the rows in step with the pods: only the enabled set changes.
            if phase != Phase::Apply {
                return Ok(());
            }
            let want = self.wanted();
            let had = self.store.multicast().await;
            if want == had {
                return Ok(());
            }
            self.store.set_multicast(want.clone()).await?;
            let state = self.state.borrow().clone();
            for v in want.symmetric_difference(&had) {
                let enabled = want.contains(v);
                tracing::info!(
                    vnid = v.id(),
                    namespaces = %state.namespaces_of(v.id()).join(","),
                    enabled,
                    "multicast {}", if enabled { "enabled" } else { "disabled" }
                );
            }
            Ok(())
        })
    }

    fn observe(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            crate::telemetry::metrics::metrics()
                .multicast_tenants
                .set(self.wanted().len() as i64);
        })
    }

    fn status(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let on = self.store.multicast().await;
            let ids: Vec<String> = on.iter().map(|v| v.id().to_string()).collect();
            match on.len() {
                0 => "no tenant has multicast enabled".to_string(),
                n => format!("{n} tenant(s) with multicast: VNID {}", ids.join(", ")),
            }
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
