//! The network policies as a node feature: the start-up stage and settle (the reconcile waits
//! for the list of every pod of the cluster), repairs, the background task, the status line.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use cluster::state::ClusterState;
use multitenant::cluster_policy::ClusterPolicy;

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
    /// the policies), and of every node where a ClusterNetworkPolicy has a `nodes` peer, which
    /// complete in the background: rows staged before them allow less than the ones on the
    /// bridge, and the reconcile would cut the running pods' allowed traffic until the lists
    /// came in. At most [`PEER_POD_WAIT`]: past it the agent goes on failing closed (its rows
    /// allow only the peers it knows, and the policy task rebuilds them when the lists
    /// complete).
    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut rx = self.cluster.clone();
            // Multitenant mode lists the pods only once a ClusterNetworkPolicy exists.
            let listed = |st: &ClusterState| {
                (st.peer_pods_listed || self.multitenant && st.cluster_policies.is_empty())
                    && (st.nodes_listed
                        || !st
                            .cluster_policies
                            .values()
                            .any(ClusterPolicy::has_node_peers))
            };
            if listed(&rx.borrow_and_update()) {
                return;
            }
            tracing::info!("serving; the start-up reconcile waits for the list of every pod of the cluster (policy peers), and of the nodes where a ClusterNetworkPolicy has a nodes peer");
            let done = tokio::time::timeout(PEER_POD_WAIT, async {
                loop {
                    if rx.changed().await.is_err() {
                        return false;
                    }
                    if listed(&rx.borrow_and_update()) {
                        return true;
                    }
                }
            })
            .await;
            if !matches!(done, Ok(true)) {
                tracing::error!(
                    seconds = PEER_POD_WAIT.as_secs(),
                    "the pods or nodes of the cluster are not listed yet: reconciling br0 with the policy peers known so far (connections policies allow from unlisted pods or to unlisted nodes are dropped until the lists complete); check the API server's load and the Pod and Node watches' errors in sdnctl status"
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
