//! What the cluster state knows of IPv6 in a dual-stack cluster: the cluster's IPv6 network and
//! each node's IPv6 subnet, read from the annotations the `network.openshift.io` objects carry
//! for them ([`crate::types::annotations`]), and the allocator that hands out node subnets.
//!
//! Why apart from the IPv4 allocator in [`crate::state`]: IPv4 node subnets follow the order
//! openshift-sdn's master allocates in (several cluster networks, HostSubnets written by either
//! side in a mixed cluster), while an IPv6 network is ours alone, one per cluster, and its
//! arithmetic is 128 bits wide. The allocator is the same idea: used subnets sorted and merged
//! once, a cursor that only moves forward, so 5,000 new nodes cost one walk.

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;

use crate::config::Ipv6ClusterNetwork;
use crate::ClusterState;

impl ClusterState {
    /// The cluster's IPv6 network, when the ClusterNetwork carries a valid one.
    pub fn ipv6_cluster_network(&self) -> Option<Ipv6ClusterNetwork> {
        self.cluster_network.as_ref()?.ipv6_entry().ok().flatten()
    }

    /// The IPv6 pod subnet of `node`, when its HostSubnet carries a valid one.
    pub fn ipv6_subnet_of(&self, node: &str) -> Option<Ipv6Net> {
        self.host_subnet_of(node)?.ipv6_subnet().ok().flatten()
    }

    /// The node whose IPv6 subnet holds `ip`, and its underlay address (as
    /// [`ClusterState::node_holding`] for IPv4).
    pub fn node_holding6(&self, ip: Ipv6Addr) -> Option<(&str, std::net::IpAddr)> {
        self.host_subnets.values().find_map(|hs| {
            let held = hs.ipv6_subnet().ok().flatten()?.contains(&ip);
            held.then(|| Some((hs.host.as_str(), hs.host_ip_addr().ok()?)))
                .flatten()
        })
    }

    /// Every node's IPv6 subnet that is set and valid.
    pub fn ipv6_subnets(&self) -> Vec<Ipv6Net> {
        self.host_subnets
            .values()
            .filter_map(|h| h.ipv6_subnet().ok().flatten())
            .collect()
    }

    /// The first free IPv6 node subnet, `None` without an IPv6 network or when it is full.
    pub fn allocate_ipv6_subnet(&self) -> Option<Ipv6Net> {
        Subnet6Allocator::new(self.ipv6_cluster_network()?, &self.ipv6_subnets()).next()
    }
}

/// Hands out IPv6 node subnets of one cluster network in order: each [`Subnet6Allocator::next`]
/// is the lowest node subnet that overlaps neither a used subnet nor one handed out before.
#[derive(Debug, Clone)]
pub struct Subnet6Allocator {
    network: Ipv6ClusterNetwork,
    /// Used address ranges (first, last), sorted, overlapping ones merged.
    used: Vec<(u128, u128)>,
    /// The next candidate; `None` once the network is full.
    candidate: Option<u128>,
}

impl Subnet6Allocator {
    /// An allocator over `network` with `used` taken (subnets outside it are ignored).
    pub fn new(network: Ipv6ClusterNetwork, used: &[Ipv6Net]) -> Subnet6Allocator {
        let mut ranges: Vec<(u128, u128)> = used
            .iter()
            .map(|u| (u128::from(u.network()), u128::from(u.broadcast())))
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        Subnet6Allocator {
            network,
            used: merged,
            candidate: Some(u128::from(network.cidr.network())),
        }
    }

    /// The next free node subnet, or `None` when the network is full.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Ipv6Net> {
        let prefix = self.network.node_prefix();
        if prefix <= self.network.cidr.prefix_len() || prefix > 128 {
            return None;
        }
        // The last address of one node subnet, relative to its first (host bits all set).
        let span = u128::MAX >> prefix;
        let last_of_network = u128::from(self.network.cidr.broadcast());
        let mut candidate = self.candidate?;
        let mut i = self.used.partition_point(|r| r.1 < candidate);
        loop {
            let last = candidate
                .checked_add(span)
                .filter(|l| *l <= last_of_network);
            let Some(last) = last else {
                self.candidate = None;
                return None;
            };
            while i < self.used.len() && self.used[i].1 < candidate {
                i += 1;
            }
            match self.used.get(i) {
                Some(&(us, ue)) if us <= last => {
                    // Past the blocking range, rounded up to the next node subnet boundary.
                    let Some(next) = ue.checked_add(1) else {
                        self.candidate = None;
                        return None;
                    };
                    candidate = next.checked_add(span).map(|n| n & !span)?;
                }
                _ => {
                    self.candidate = last.checked_add(1);
                    return Ipv6Net::new(Ipv6Addr::from(candidate), prefix).ok();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Subnet6Allocator;
    use crate::config::Ipv6ClusterNetwork;
    use ipnet::Ipv6Net;

    fn net(s: &str, len: u8) -> Ipv6ClusterNetwork {
        Ipv6ClusterNetwork {
            cidr: s.parse().unwrap(),
            host_subnet_length: len,
        }
    }

    fn nets(s: &[&str]) -> Vec<Ipv6Net> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn hands_out_the_lowest_free_subnets_in_order() {
        let mut a = Subnet6Allocator::new(
            net("fd01::/48", 64),
            &nets(&["fd01::/64", "fd01:0:0:2::/64", "fd02::/64"]),
        );
        let got: Vec<String> = (0..3).map(|_| a.next().unwrap().to_string()).collect();
        assert_eq!(
            got,
            ["fd01:0:0:1::/64", "fd01:0:0:3::/64", "fd01:0:0:4::/64"]
        );
    }

    #[test]
    fn a_used_range_of_another_size_is_stepped_over_to_a_boundary() {
        // A /63 in use covers two /64s; a /80 blocks the whole /64 that holds it.
        let mut a = Subnet6Allocator::new(
            net("fd01::/48", 64),
            &nets(&["fd01::/63", "fd01:0:0:2:1::/80"]),
        );
        assert_eq!(a.next().unwrap().to_string(), "fd01:0:0:3::/64");
    }

    #[test]
    fn a_full_network_gives_none_and_stays_full() {
        let mut a = Subnet6Allocator::new(net("fd01::/64", 64), &[]);
        assert!(
            a.next().is_none(),
            "a node subnet as large as the network: no room"
        );
        let mut a = Subnet6Allocator::new(net("fd01::/124", 2), &nets(&["fd01::4/126"]));
        let got: Vec<String> = std::iter::from_fn(|| a.next())
            .map(|n| n.to_string())
            .collect();
        assert_eq!(got, ["fd01::/126", "fd01::8/126", "fd01::c/126"]);
        assert!(a.next().is_none());
        // The last subnet of the address space does not overflow.
        let mut a =
            Subnet6Allocator::new(net("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124", 2), &[]);
        assert_eq!(std::iter::from_fn(|| a.next()).count(), 4);
    }

    #[test]
    fn five_thousand_nodes_at_once() {
        let used: Vec<Ipv6Net> = (0..2500u128)
            .map(|i| Ipv6Net::new((0xfd01u128 << 112 | i << 64).into(), 64).unwrap())
            .collect();
        let mut a = Subnet6Allocator::new(net("fd01::/48", 64), &used);
        let fresh: Vec<Ipv6Net> = (0..5000).map(|_| a.next().unwrap()).collect();
        assert_eq!(fresh[0].to_string(), "fd01:0:0:9c4::/64");
        assert!(fresh.windows(2).all(|w| w[0] < w[1]));
        assert!(fresh.iter().all(|n| !used.contains(n)));
    }
}
