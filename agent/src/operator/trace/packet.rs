//! The packet a trace follows, in `ofproto/trace`'s flow syntax: built from what the agent
//! knows of the two ends (a pod's port, MAC and address; tun0; a remote node's VTEP and the
//! VNI its packets arrive with), with the spoofing options applied; also the fields the live
//! trace turns into bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::operator::observe::pod_mac;
use local_api::TraceRequest;

use super::{End, Proto, TraceError};

/// The packet traced, and its ingress and source.
pub(super) struct Packet {
    /// In `ofproto/trace`'s flow syntax.
    pub(super) text: String,
    pub(super) in_port: u32,
    pub(super) dl_src: String,
    pub(super) dl_dst: String,
    pub(super) nw_src: IpAddr,
    pub(super) nw_dst: IpAddr,
}

/// The MAC a pod with address `ip` has: its IPv4 address's (`0a:58:` and the address); for an
/// IPv6 address, whose pod's IPv4 address the trace does not know (a remote pod), the low 32
/// bits (only table 20 checks a MAC, and only a local pod's).
pub(super) fn mac_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => pod_mac(ip),
        IpAddr::V6(ip) => {
            let o = ip.octets();
            pod_mac(Ipv4Addr::new(o[12], o[13], o[14], o[15]))
        }
    }
}

impl Packet {
    pub(super) fn build(
        req: &TraceRequest,
        src: &End,
        dst: &End,
        proto: Proto,
        node: &flows::NodeConfig,
        v6: bool,
    ) -> Result<Packet, TraceError> {
        let gw = match (v6, node.gateway6(), node.gateway()) {
            (true, Some(gw6), _) | (false, Some(gw6), None) => IpAddr::V6(gw6),
            (_, _, Some(gw)) => IpAddr::V4(gw),
            (_, None, None) => {
                return Err(TraceError::BadRequest(
                    "this node has no pod subnet of either family".into(),
                ))
            }
        };
        let tun0_mac = node.tun0_mac().to_string();
        let (in_port, mut dl_src, mut nw_src, tunnel) = match src {
            End::Pod {
                ip, ofport, mac, ..
            } => (*ofport, mac.clone(), *ip, String::new()),
            End::Node(_) | End::External(_) => (2, tun0_mac.clone(), src.ip(gw), String::new()),
            End::Remote { ip, vtep, .. } => {
                let Some(vtep) = vtep else {
                    return Err(TraceError::BadRequest(format!(
                        "source {ip}: no node's subnet holds it, so it cannot arrive over VXLAN"
                    )));
                };
                let vni = req.vni.ok_or_else(|| {
                    TraceError::BadRequest(format!(
                        "source {ip} is a pod of another node: give the VNI its packets arrive with (--vni, the VNID of its namespace; the source node's trace names it)"
                    ))
                })?;
                (
                    1,
                    mac_of(*ip),
                    *ip,
                    match vtep {
                        IpAddr::V4(_) => {
                            format!("tun_id={vni:#x},tun_src={vtep},tun_dst={},", node.node_ip)
                        }
                        IpAddr::V6(_) => format!(
                            "tun_id={vni:#x},tun_ipv6_src={vtep},tun_ipv6_dst={},",
                            node.node_ip
                        ),
                    },
                )
            }
            End::Unused(ip) => (0, mac_of(*ip), *ip, String::new()),
            End::Service(_) => unreachable!("refused by refuse_impossible"),
        };
        if let Some(ip) = req.spoof_ip {
            spoofing_needs_a_pod(src, "--spoof-ip")?;
            nw_src = ip;
        }
        if let Some(mac) = &req.spoof_mac {
            spoofing_needs_a_pod(src, "--spoof-mac")?;
            let ok = mac.split(':').count() == 6
                && mac
                    .split(':')
                    .all(|b| b.len() == 2 && u8::from_str_radix(b, 16).is_ok());
            if !ok {
                return Err(TraceError::BadRequest(format!(
                    "--spoof-mac {mac:?}: expected a MAC such as 0a:58:0a:80:00:09"
                )));
            }
            dl_src = mac.to_ascii_lowercase();
        }
        let dst_ip = dst.ip(gw);
        let dl_dst = match dst {
            End::Pod { mac, .. } => mac.clone(),
            End::Unused(ip) | End::Remote { ip, .. } => mac_of(*ip),
            _ => tun0_mac,
        };
        let text = match (nw_src, dst_ip) {
            (IpAddr::V6(src6), IpAddr::V6(dst6)) => {
                ipv6_packet(proto, &tunnel, in_port, (&dl_src, &dl_dst), (src6, dst6))
            }
            _ => match proto {
                Proto::Arp => format!(
                    "arp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_spa={nw_src},arp_tpa={dst_ip},arp_sha={dl_src}"
                ),
                Proto::Icmp | Proto::Nd => format!(
                    "icmp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,icmp_type=8,icmp_code=0"
                ),
                Proto::Tcp(p) => format!(
                    "tcp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,tp_src=40000,tp_dst={p},tcp_flags=0x002"
                ),
                Proto::Udp(p) => format!(
                    "udp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,udp_src=40000,udp_dst={p}"
                ),
            },
        };
        Ok(Packet {
            text,
            in_port,
            dl_src,
            dl_dst,
            nw_src,
            nw_dst: dst_ip,
        })
    }
}

/// An IPv6 packet in `ofproto/trace`'s syntax: an echo request, a neighbour solicitation for
/// `dst` (to its solicited-node group, the source's MAC as source link-layer address, hop limit
/// 255 as ND requires), or a TCP SYN or UDP datagram.
pub(super) fn ipv6_packet(
    proto: Proto,
    tunnel: &str,
    in_port: u32,
    (dl_src, dl_dst): (&str, &str),
    (src, dst): (Ipv6Addr, Ipv6Addr),
) -> String {
    let head = |kind: &str, dl_dst: &str, ipv6_dst: Ipv6Addr, ttl: u8| {
        format!(
            "{kind},{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},ipv6_src={src},ipv6_dst={ipv6_dst},nw_ttl={ttl}"
        )
    };
    match proto {
        Proto::Nd => {
            let o = dst.octets();
            let group = Ipv6Addr::new(
                0xff02,
                0,
                0,
                0,
                0,
                1,
                0xff00 | u16::from(o[13]),
                u16::from_be_bytes([o[14], o[15]]),
            );
            let group_mac = format!("33:33:ff:{:02x}:{:02x}:{:02x}", o[13], o[14], o[15]);
            format!(
                "{},icmpv6_type=135,icmpv6_code=0,nd_target={dst},nd_sll={dl_src}",
                head("icmp6", &group_mac, group, 255)
            )
        }
        Proto::Icmp | Proto::Arp => format!(
            "{},icmpv6_type=128,icmpv6_code=0",
            head("icmp6", dl_dst, dst, 64)
        ),
        Proto::Tcp(p) => format!(
            "{},tp_src=40000,tp_dst={p},tcp_flags=0x002",
            head("tcp6", dl_dst, dst, 64)
        ),
        Proto::Udp(p) => format!(
            "{},udp_src=40000,udp_dst={p}",
            head("udp6", dl_dst, dst, 64)
        ),
    }
}

fn spoofing_needs_a_pod(src: &End, flag: &str) -> Result<(), TraceError> {
    if matches!(src, End::Pod { .. }) {
        return Ok(());
    }
    Err(TraceError::BadRequest(format!(
        "{flag} needs a pod as the source (NAMESPACE/POD)"
    )))
}
