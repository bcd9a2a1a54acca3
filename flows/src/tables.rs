//! The table registry: every table of the pipeline with its number, name and purpose.

/// A table of the `br0` pipeline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Table {
    /// 0: conntrack untracked IP, then sort by in_port.
    Classifier,
    /// 10: accept VXLAN only from known node VTEPs.
    VxlanIngress,
    /// 20: per-pod anti-spoofing; loads the source VNID.
    PodEgressSpoofguard,
    /// 25: service traffic hairpinned back via tun0: reload the source VNID.
    ServiceReturn,
    /// 27: networkpolicy egress rules.
    PodEgressPolicy,
    /// 30: networkpolicy conntrack commit.
    ConntrackCommit,
    /// 31: routing by destination.
    Routing,
    /// 40: ARP for local pods.
    LocalArp,
    /// 50: ARP for remote node subnets, over VXLAN.
    RemoteArp,
    /// 60: services, to tun0.
    Service,
    /// 70: IP to local pods: destination VNID and output port.
    LocalIp,
    /// 80: the tenancy decision.
    IngressIsolation,
    /// 90: IP to remote node subnets, over VXLAN.
    RemoteIp,
    /// 99: DNS to the node, then egress.
    EgressPrelude,
    /// 100: EgressNetworkPolicy per VNID.
    EgressFirewall,
    /// 101: egress IPs and default egress to tun0.
    EgressRouting,
    /// 110: multicast out, per VNID.
    MulticastOut,
    /// 111: multicast to remote VTEPs.
    MulticastRemote,
    /// 120: multicast to local pods.
    MulticastLocal,
    /// 253: the version marker of the base flow set.
    Version,
}

impl Table {
    /// Every table, in pipeline order.
    pub const ALL: [Table; 20] = [
        Table::Classifier,
        Table::VxlanIngress,
        Table::PodEgressSpoofguard,
        Table::ServiceReturn,
        Table::PodEgressPolicy,
        Table::ConntrackCommit,
        Table::Routing,
        Table::LocalArp,
        Table::RemoteArp,
        Table::Service,
        Table::LocalIp,
        Table::IngressIsolation,
        Table::RemoteIp,
        Table::EgressPrelude,
        Table::EgressFirewall,
        Table::EgressRouting,
        Table::MulticastOut,
        Table::MulticastRemote,
        Table::MulticastLocal,
        Table::Version,
    ];

    /// The OpenFlow table number.
    pub const fn id(self) -> u8 {
        match self {
            Table::Classifier => 0,
            Table::VxlanIngress => 10,
            Table::PodEgressSpoofguard => 20,
            Table::ServiceReturn => 25,
            Table::PodEgressPolicy => 27,
            Table::ConntrackCommit => 30,
            Table::Routing => 31,
            Table::LocalArp => 40,
            Table::RemoteArp => 50,
            Table::Service => 60,
            Table::LocalIp => 70,
            Table::IngressIsolation => 80,
            Table::RemoteIp => 90,
            Table::EgressPrelude => 99,
            Table::EgressFirewall => 100,
            Table::EgressRouting => 101,
            Table::MulticastOut => 110,
            Table::MulticastRemote => 111,
            Table::MulticastLocal => 120,
            Table::Version => 253,
        }
    }

    /// The name registered in OVSDB `Flow_Table` and printed by `ovs-ofctl --names`.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Classifier => "classifier",
            Table::VxlanIngress => "vxlan_ingress",
            Table::PodEgressSpoofguard => "pod_egress_spoofguard",
            Table::ServiceReturn => "service_return",
            Table::PodEgressPolicy => "pod_egress_policy",
            Table::ConntrackCommit => "conntrack_commit",
            Table::Routing => "routing",
            Table::LocalArp => "local_arp",
            Table::RemoteArp => "remote_arp",
            Table::Service => "service",
            Table::LocalIp => "local_ip",
            Table::IngressIsolation => "ingress_isolation",
            Table::RemoteIp => "remote_ip",
            Table::EgressPrelude => "egress_prelude",
            Table::EgressFirewall => "egress_firewall",
            Table::EgressRouting => "egress_routing",
            Table::MulticastOut => "multicast_out",
            Table::MulticastRemote => "multicast_remote",
            Table::MulticastLocal => "multicast_local",
            Table::Version => "version",
        }
    }

    /// The table with number `id`.
    pub fn from_id(id: u8) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.id() == id)
    }

    /// `(number, name)` for every table, for name maps.
    pub fn names() -> impl Iterator<Item = (u8, &'static str)> {
        Table::ALL.into_iter().map(|t| (t.id(), t.name()))
    }
}

impl From<Table> for u8 {
    fn from(t: Table) -> u8 {
        t.id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_are_unique_and_ordered() {
        let ids: Vec<u8> = Table::ALL.iter().map(|t| t.id()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "tables out of order: {ids:?}"
        );
        let mut names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Table::ALL.len());
        for t in Table::ALL {
            assert_eq!(Table::from_id(t.id()), Some(t));
        }
    }
}
