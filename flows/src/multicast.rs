//! Tables 110 (`multicast_out`) and 120 (`multicast_local`): multicast per tenant, as
//! openshift-sdn's `UpdateLocalMulticastFlows` wrote it.
//!
//! A VNID gets rows only while multicast is enabled for it (every namespace holding the VNID
//! carries `netnamespace.network.openshift.io/multicast-enabled: "true"`) **and** it has local
//! pods: table 110 `reg0=V → goto_table:111` lets the tenant's pods send (table 111 copies the
//! packet to every remote VTEP with VNI V, then table 120 delivers it here), and table 120
//! `reg0=V → output:P1,output:P2,...` delivers to every local pod port of the VNID (OVS never
//! outputs to the port a packet came in on, so a sender does not hear itself). Multicast from
//! VXLAN enters table 120 with `reg0` = the VNI, so a remote sender reaches exactly the same
//! pods. Without rows, the tables' base rows drop: multicast is off by default.
//!
//! The rows of a VNID carry the VNID's multicast cookie, so the flow store replaces them as one
//! owner, in the same bundle as the pod change (ADD, DEL, VNID change) that changes the port set.

use std::collections::BTreeSet;

use ovs::flow::Action;
use ovs::{Flow, Match};

use crate::cookie::{cookie, Feature};
use crate::registers::Reg;
use crate::tables::Table;
use crate::Vnid;

/// The annotation of a NetNamespace that enables multicast for it (value `"true"`).
pub const MULTICAST_ANNOTATION: &str = "netnamespace.network.openshift.io/multicast-enabled";

/// The cookie of VNID `vnid`'s multicast rows (tables 110 and 120).
pub fn multicast_cookie(vnid: Vnid) -> u64 {
    cookie(Feature::Multicast, u64::from(vnid.id()))
}

/// The table-110 and table-120 rows of a multicast-enabled `vnid` whose local pods have the
/// ports `ofports` (none without local pods).
pub fn multicast_tenant_flows(vnid: Vnid, ofports: &BTreeSet<u32>) -> Vec<Flow> {
    if ofports.is_empty() {
        return Vec::new();
    }
    let row = |table: Table| {
        Flow::new(table.id(), 100)
            .cookie(multicast_cookie(vnid))
            .matching(Reg::SrcVnid.matching(Match::any(), vnid.id()))
    };
    vec![
        row(Table::MulticastOut).goto(Table::MulticastRemote.id()),
        row(Table::MulticastLocal).actions(ofports.iter().map(|p| Action::Output(*p))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_an_enabled_tenant() {
        let v = Vnid::new(12).unwrap();
        let flows = multicast_tenant_flows(v, &BTreeSet::from([7, 3]));
        let text: Vec<String> = flows.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            text,
            [
                "cookie=0x500000000000000c, table=110, priority=100,reg0=0xc actions=goto_table:111",
                "cookie=0x500000000000000c, table=120, priority=100,reg0=0xc actions=output:3,output:7",
            ]
        );
        assert!(multicast_tenant_flows(v, &BTreeSet::new()).is_empty());
        assert_ne!(multicast_cookie(v), crate::egress_cookie(v));
    }
}
