//! What a node's agent watches in Kubernetes mode: one stream per kind, merged by the source
//! (see the module docs of [`super`]).

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::Client;

use super::policies::PolicyRead;
use super::{api_resource, Ev};
use crate::cnp;
use crate::pods::SlimPod;

/// The watches of a node's agent (see the module docs): the cluster's network objects, the
/// namespaces, this node's pods, and in networkpolicy mode the NetworkPolicies (every pod of
/// the cluster is watched later, once the rest is listed).
pub(super) fn watches(client: &Client, node: &str, policies: bool) -> Vec<BoxStream<'static, Ev>> {
    let cfg = watcher::Config::default();
    let dyn_stream = |kind: &str, plural: &str, cfg: watcher::Config| {
        let ar = api_resource(kind, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        watcher::watcher(api, cfg).default_backoff()
    };
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        dyn_stream(
            "ClusterNetwork",
            "clusternetworks",
            cfg.clone().fields("metadata.name=default"),
        )
        .map(Ev::ClusterNetwork)
        .boxed(),
        dyn_stream("HostSubnet", "hostsubnets", cfg.clone())
            .map(Ev::HostSubnet)
            .boxed(),
        dyn_stream("NetNamespace", "netnamespaces", cfg.clone())
            .map(Ev::NetNamespace)
            .boxed(),
        dyn_stream("EgressNetworkPolicy", "egressnetworkpolicies", cfg.clone())
            .map(Ev::EgressNetworkPolicy)
            .boxed(),
        watcher::watcher(Api::<Namespace>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Namespace)
            .boxed(),
        watcher::watcher(
            Api::<SlimPod>::all(client.clone()),
            cfg.clone().fields(&format!("spec.nodeName={node}")),
        )
        .default_backoff()
        .map(Ev::Pod)
        .boxed(),
    ];
    let mut streams = streams;
    let cnp = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(cnp::GROUP, cnp::VERSION, cnp::KIND),
        cnp::PLURAL,
    );
    streams.push(
        watcher::watcher(
            Api::<DynamicObject>::all_with(client.clone(), &cnp),
            cfg.clone(),
        )
        .default_backoff()
        .map(Ev::ClusterNetworkPolicy)
        .boxed(),
    );
    if policies {
        streams.push(
            watcher::watcher(Api::<NetworkPolicy>::all(client.clone()), cfg)
                .default_backoff()
                .map(Ev::NetworkPolicy)
                .boxed(),
        );
    }
    streams
}

/// Whether a ClusterNetworkPolicy in effect (read, or the fail-closed form of one refused) has a
/// `nodes` peer: the Node watch starts then, and runs from then on.
pub(super) fn node_peers(
    policies: &std::collections::BTreeMap<
        String,
        PolicyRead<multitenant::cluster_policy::ClusterPolicy>,
    >,
) -> bool {
    policies.values().any(|r| match r {
        PolicyRead::Applied(p) | PolicyRead::Refused(Some(p), ..) => p.has_node_peers(),
        PolicyRead::Refused(None, ..) => false,
    })
}

/// The watch of every object of a kind the source starts late (every Pod, every Node: reduced
/// types, `crate::pods`, `crate::nodes`), its events as `ev`.
pub(super) fn every<K>(
    client: &Client,
    ev: fn(watcher::Result<watcher::Event<K>>) -> Ev,
) -> BoxStream<'static, Ev>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    watcher::watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .map(ev)
        .boxed()
}
