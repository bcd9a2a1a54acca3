//! The network policies as a node feature: the start-up stage and settle (the reconcile waits
//! for the list of every pod of the cluster), repairs, the background task, the status line.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{NetworkPolicies, PodPolicy};
use crate::bridge::seams::FlowSwitch;
use crate::features::{FeatureError, NodeFeature, Phase, Reason};

/// How long the start-up reconcile waits for the list of every pod (networkpolicy mode).
const PEER_POD_WAIT: Duration = Duration::from_secs(120);

impl<S: FlowSwitch + 'static> NodeFeature for NetworkPolicies<S> {
    fn name(&self) -> &'static str {
        "network-policy"
    }

    fn tables(&self) -> &'static [flows::Table] {
        use flows::Table;
        &[
            Table::PodEgressPolicy,
            Table::PodEgressBaseline,
            Table::ConntrackCommit,
            Table::IngressIsolation,
            Table::IngressBaseline,
        ]
    }

    /// The policy rows of the pods found, staged for the first reconcile (a restart keeps
    /// them in place); every later ADD asks for its own ([`Self::pod_policy`]).
    fn stage(&self) -> BoxFuture<'_, Result<usize, FeatureError>> {
        Box::pin(async move {
            NetworkPolicies::stage(self).await;
            Ok(self.cluster.borrow().network_policies.len())
        })
    }

    /// The start-up reconcile waits for the list of every pod of the cluster (the peers of
    /// the policies), which completes in the background: rows staged before it allow less
    /// than the ones on the bridge, and the reconcile would cut the running pods' allowed
    /// traffic until the list came in. At most [`PEER_POD_WAIT`]: past it the agent goes on
    /// failing closed (its rows allow only the peers it knows, and the policy task rebuilds
    /// them when the list completes).
    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut rx = self.cluster.clone();
            {
                let st = rx.borrow_and_update();
                // Multitenant mode lists the pods only once a ClusterNetworkPolicy exists.
                if st.peer_pods_listed || self.multitenant && st.cluster_policies.is_empty() {
                    return;
                }
            }
            tracing::info!("serving; the start-up reconcile waits for the list of every pod of the cluster (NetworkPolicy peers)");
            let listed = tokio::time::timeout(PEER_POD_WAIT, async {
                loop {
                    if rx.changed().await.is_err() {
                        return false;
                    }
                    if rx.borrow_and_update().peer_pods_listed {
                        return true;
                    }
                }
            })
            .await;
            if !matches!(listed, Ok(true)) {
                tracing::error!(
                    seconds = PEER_POD_WAIT.as_secs(),
                    "the pods of the cluster are not listed yet: reconciling br0 with the NetworkPolicy peers known so far (connections policies allow from unlisted pods are dropped until the list completes); check the API server's load and the Pod watch's errors in sdnctl status"
                );
            }
            NetworkPolicies::stage(self).await;
        })
    }

    /// Its own task follows the cluster state ([`Self::run`]); a repair rebuilds what drifted,
    /// after the pods' VNID moves (whether or not they all moved).
    fn sync(&self, phase: Phase, reason: Reason) -> BoxFuture<'_, Result<(), FeatureError>> {
        Box::pin(async move {
            if phase != Phase::Apply && reason.is_repair() {
                NetworkPolicies::sync(self).await?;
            }
            Ok(())
        })
    }

    fn background(self: Arc<Self>) -> Vec<BoxFuture<'static, ()>> {
        vec![Box::pin(self.run())]
    }

    fn status(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let v = self.view();
            format!(
                "{} NetworkPolicy(ies), {} selecting pods here, {} isolated local pod(s)",
                v.policies,
                v.active.len(),
                v.isolated.len()
            )
        })
    }

    fn pod_policy(self: Arc<Self>) -> Option<Arc<dyn PodPolicy>> {
        Some(self)
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
