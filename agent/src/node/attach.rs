//! From a CNI request to the pod logic and back: [`attachment`] turns a validated [`Request`]
//! into the [`Attachment`] the pod module works on (who the pod is, where its netns is, what it
//! asked for), and [`add_result`] renders what ADD wired as the CNI result. The pod module never
//! sees CNI versions, `CNI_ARGS` or network config keys; this module is the only place that
//! knows where each piece comes from.
//!
//! Where a pod's identity comes from: the namespace from `K8S_POD_NAMESPACE`, else the network
//! config's `namespace` (one podman network per tenant), else `default`; the name from
//! `K8S_POD_NAME`, else the first 12 characters of the container id.

use flows::AttachmentId;
use ovs::flow::MacAddr;

use crate::cni::request::DEFAULT_NAMESPACE;
use crate::cni::{AddResult, Interface, IpConfig, Request, Route};
use crate::pod::{Attachment, PodNetwork, Wired};

/// The attachment `req` asks for.
pub(super) fn attachment(req: &Request) -> Attachment {
    Attachment {
        id: AttachmentId::new(req.container_id.clone(), req.ifname.clone()),
        netns: req.netns.clone(),
        namespace: req
            .args
            .pod_namespace()
            .map(str::to_string)
            .or_else(|| req.config.namespace.clone())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
        pod: req
            .args
            .pod_name()
            .map(str::to_string)
            .unwrap_or_else(|| req.container_id.chars().take(12).collect()),
        requested_ip: req.args.ip().map(|r| (r.addr, r.prefix_len)),
        requested_ip6: req.args.ip6().map(|r| (r.addr, r.prefix_len)),
        runtime_config: req.config.runtime_config.clone(),
        prev_result: req.config.prev_result.clone(),
        deadline: req.deadline,
        plain_veth_for: None,
    }
}

/// The CNI result of a wired pod: the previous result (chained plugins) plus the host veth, the
/// pod interface, its address and the pod's routes.
pub(super) fn add_result(req: &Request, net: &PodNetwork, wired: &Wired) -> AddResult {
    let pod = &wired.pod;
    let mut r = req.config.prev_result.clone().unwrap_or_default();
    let host_index = r.interfaces.len();
    r.interfaces.push(Interface {
        name: pod.host_veth.clone(),
        mac: Some(MacAddr(wired.host_mac).to_string()),
        sandbox: None,
        mtu: Some(net.mtu),
    });
    r.interfaces.push(Interface {
        name: pod.attachment.ifname.clone(),
        mac: MacAddr::from_pod_addrs(pod.ip, pod.ip6).map(|m| m.to_string()),
        sandbox: Some(pod.netns.clone()),
        mtu: Some(net.mtu),
    });
    if let Some(v4) = pod.ip.and_then(|ip| net.ipv4_spec(ip)) {
        r.ips.push(IpConfig {
            address: v4.address.into(),
            gateway: Some(v4.gateway.into()),
            interface: Some(host_index + 1),
        });
    }
    let v6 = pod.ip6.and_then(|ip6| net.ipv6_spec(ip6));
    if let Some(v6) = &v6 {
        r.ips.push(IpConfig {
            address: v6.address.into(),
            gateway: Some(v6.gateway.into()),
            interface: Some(host_index + 1),
        });
    }
    for route in net.routes() {
        r.routes.push(Route {
            dst: route.dst.into(),
            gw: route.via.map(Into::into),
        });
    }
    if let Some(v6) = &v6 {
        r.routes.push(Route {
            dst: "::/0".parse().expect("constant"),
            gw: Some(v6.gateway.into()),
        });
        for route in &v6.routes {
            r.routes.push(Route {
                dst: route.dst.into(),
                gw: route.via.map(Into::into),
            });
        }
    }
    r
}
