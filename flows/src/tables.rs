//! The table registry: every table of the pipeline with its number, name and purpose, declared
//! once in one list (the `tables!` invocation below).

/// Declares every table once: variant, number, name (registered in OVSDB `Flow_Table` and
/// printed by `ovs-ofctl --names`) and purpose. [`Table::ALL`], [`Table::id`], [`Table::name`]
/// and [`Table::purpose`] are generated from this one list.
macro_rules! tables {
    ($($(#[$doc:meta])* $variant:ident = $id:literal, $name:literal, $purpose:literal;)*) => {
        /// A table of the `br0` pipeline.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
        pub enum Table {
            $($(#[$doc])* $variant,)*
        }

        impl Table {
            /// Every table, in pipeline order.
            pub const ALL: [Table; [$($id),*].len()] = [$(Table::$variant),*];

            /// The OpenFlow table number.
            pub const fn id(self) -> u8 {
                match self {
                    $(Table::$variant => $id,)*
                }
            }

            /// The name registered in OVSDB `Flow_Table` and printed by `ovs-ofctl --names`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Table::$variant => $name,)*
                }
            }

            /// What the table does (docs/pipeline.md, "Tables").
            pub const fn purpose(self) -> &'static str {
                match self {
                    $(Table::$variant => $purpose,)*
                }
            }
        }
    };
}

tables! {
    /// 0: conntrack untracked IP, then sort by in_port.
    Classifier = 0, "classifier", "conntrack untracked IP, then sort by in_port";
    /// 10: accept VXLAN only from known node VTEPs.
    VxlanIngress = 10, "vxlan_ingress", "accept VXLAN only from known node VTEPs";
    /// 20: per-pod anti-spoofing; loads the sending pod's port into `reg3`.
    PodEgressSpoofguard = 20, "pod_egress_spoofguard", "per pod: right port, IP and MAC; note the sending pod's port";
    /// 25: service traffic hairpinned back via tun0: find the sending pod's port again.
    ServiceReturn = 25, "service_return", "traffic back from tun0 (services): find the sending pod's port by its address";
    /// 26: per pod: the sending pod's VNID, by its port.
    SourceVnid = 26, "source_vnid", "per pod: load the sending pod's VNID, by its port";
    /// 27: networkpolicy egress rules.
    PodEgressPolicy = 27, "pod_egress_policy", "networkpolicy egress rules; other modes pass";
    /// 28: the Baseline tier of cluster policies, egress (networkpolicy mode: pods no
    /// NetworkPolicy isolates for egress).
    PodEgressBaseline = 28, "pod_egress_baseline", "cluster policies' Baseline tier, egress; then 30";
    /// 30: networkpolicy conntrack commit.
    ConntrackCommit = 30, "conntrack_commit", "networkpolicy conntrack commit; other modes pass";
    /// 31: routing by destination.
    Routing = 31, "routing", "routing by destination";
    /// 40: ARP (and IPv6 neighbour solicitations) for local pods.
    LocalArp = 40, "local_arp", "ARP and IPv6 neighbour solicitations for local pods: the destination port";
    /// 50: ARP for remote node subnets, over VXLAN.
    RemoteArp = 50, "remote_arp", "ARP for remote node subnets, over VXLAN";
    /// 60: services, to tun0.
    Service = 60, "service", "services: to tun0";
    /// 70: IP to local pods: the output port.
    LocalIp = 70, "local_ip", "IP to local pods: the destination port";
    /// 75: per pod: the receiving pod's VNID, by its port.
    DestinationVnid = 75, "destination_vnid", "per pod: load the receiving pod's VNID, by its port";
    /// 80: the tenancy decision.
    IngressIsolation = 80, "ingress_isolation", "the tenancy decision, then output";
    /// 81: the Baseline tier of cluster policies, ingress (networkpolicy mode: pods no
    /// NetworkPolicy isolates for ingress); then output.
    IngressBaseline = 81, "ingress_baseline", "cluster policies' Baseline tier, ingress; then output";
    /// 90: IP to remote node subnets, over VXLAN.
    RemoteIp = 90, "remote_ip", "IP to remote node subnets, over VXLAN";
    /// 99: DNS to the node, then egress.
    EgressPrelude = 99, "egress_prelude", "DNS to the node, then egress";
    /// 100: EgressNetworkPolicy per VNID.
    EgressFirewall = 100, "egress_firewall", "EgressNetworkPolicy per VNID";
    /// 101: egress IPs and default egress to tun0.
    EgressRouting = 101, "egress_routing", "egress IPs per VNID; default to tun0";
    /// 110: multicast out, per VNID.
    MulticastOut = 110, "multicast_out", "multicast out, per VNID";
    /// 111: multicast to remote VTEPs.
    MulticastRemote = 111, "multicast_remote", "multicast to every remote VTEP";
    /// 120: multicast to local pods.
    MulticastLocal = 120, "multicast_local", "multicast to local pods, per VNID";
    /// 130: copies of logged decisions to the agent, rate-limited.
    Audit = 130, "audit", "copies of logged decisions to the agent, one meter per source VNID bucket";
    /// 253: the version marker of the base flow set.
    Version = 253, "version", "the version marker of the base flow set";
}

impl Table {
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
            assert!(!t.purpose().is_empty());
        }
    }
}
