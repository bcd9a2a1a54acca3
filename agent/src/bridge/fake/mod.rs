//! Stateful fakes of every I/O seam ([`crate::bridge::seams`]), for component tests without root.
//!
//! Each fake keeps the state the real thing would and refuses what the real thing refuses, so a
//! test that passes on them says something about the real node:
//! - [`FakeSwitch`]: a flow table and a meter table. Bundles are atomic; an invalid flow (`nw_dst`
//!   without `ip`, a `goto_table` backwards...) fails the whole bundle as the encoder does; a flow
//!   using a meter that does not exist fails at commit as OVS does; adding a meter twice is
//!   `OFPMMFC_METER_EXISTS`. Deletes by cookie and mask, strict deletes and adds (replacing the
//!   same table, priority and match) are modelled; what the agent never sends is refused.
//! - [`FakeDb`]: ports, interfaces and QoS rows. A system port whose device does not exist gets
//!   ovs-vswitchd's "could not open network device" error (the fake checks [`FakeLinks`]); a
//!   name already on another bridge is refused; QoS rows are root rows that outlive their port.
//! - [`FakeLinks`]: network namespaces and veth pairs. Creating needs the netns and free names
//!   (kernel-valid ones); deleting a netns takes its veths with it, as the kernel does.
//! - [`FakeNat`]: iptables tables fed by `iptables-restore --noflush` input, applied atomically;
//!   a rule for a missing chain, deleting a missing rule or a referenced chain is refused with
//!   the line, as iptables-restore does.
//!
//! Every fake can be told to fail its next call of an operation ([`Faults`]), for rollback tests.

mod db;
mod links;
mod nat;
mod switch;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use crate::bridge::seams::NodeIo;

pub(crate) use db::FakeDb;
pub(crate) use links::FakeLinks;
pub(crate) use nat::FakeNat;
pub(crate) use switch::FakeSwitch;

pub(crate) use crate::lock;

/// Operations to fail once, by name (`"bundle"`, `"add_port"`, `"create_pod_link"`...).
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<BTreeSet<&'static str>>);

impl Faults {
    /// Makes the next call of `op` fail.
    pub(crate) fn fail_next(&self, op: &'static str) {
        lock(&self.0).insert(op);
    }

    /// Whether this call of `op` must fail (and clears it).
    pub(crate) fn hit(&self, op: &'static str) -> bool {
        lock(&self.0).remove(op)
    }
}

/// The fakes as a [`NodeIo`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FakeIo;

impl NodeIo for FakeIo {
    type Db = Arc<FakeDb>;
    type Switch = FakeSwitch;
    type Links = FakeLinks;
    type Nat = Arc<FakeNat>;
}

/// Unused-address helper for tests: the n-th address of 10.128.0.0/23.
pub(crate) fn pod_ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 128, 0, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::seams::{FlowSwitch, NatRules, PortDb};
    use ovs::flow::{Action, Flow, Match};
    use ovs::openflow::wire::SwitchError;
    use ovs::openflow::{BundleMsg, Meter, MeterModCommand};
    use ovs::ovsdb::{self, PortSpec, QosSpec};

    #[tokio::test]
    async fn the_fake_switch_refuses_what_ovs_refuses() {
        let sw = FakeSwitch::new();
        let bad = Flow::new(70, 1).matching(Match::any().nw_dst(pod_ip(2)));
        let e = sw.bundle(&[BundleMsg::add(bad)]).await.unwrap_err();
        assert!(e.to_string().contains("nw_dst"), "{e}");
        let metered = Flow::new(20, 1)
            .matching(Match::any().ip())
            .action(Action::Meter(7))
            .action(Action::Output(2));
        let ok = Flow::new(0, 1).action(Action::Output(1));
        let e = sw
            .bundle(&[BundleMsg::add(ok.clone()), BundleMsg::add(metered.clone())])
            .await
            .unwrap_err();
        assert_eq!(
            e.switch_error().and_then(SwitchError::code_name),
            Some("OFPMMFC_UNKNOWN_METER")
        );
        assert!(
            sw.flows().is_empty(),
            "atomic: the good flow did not land either"
        );
        let m = Meter::new(7, 1000, 100).unwrap();
        sw.meter_mod(MeterModCommand::Add, &m).await.unwrap();
        let e = sw.meter_mod(MeterModCommand::Add, &m).await.unwrap_err();
        assert_eq!(
            e.switch_error().and_then(SwitchError::code_name),
            Some("OFPMMFC_METER_EXISTS")
        );
        sw.bundle(&[BundleMsg::add(metered)]).await.unwrap();
        assert_eq!(sw.flows().len(), 1);
    }

    #[tokio::test]
    async fn the_fake_db_needs_the_device_and_keeps_qos_rows_past_their_port() {
        let links = FakeLinks::new();
        let db = FakeDb::new(links.clone());
        let e = db
            .add_port("br0", &PortSpec::new("vethx", ""))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("No such device"), "{e}");
        let e = db
            .add_port("br9", &PortSpec::new("x", "internal"))
            .await
            .unwrap_err();
        assert!(matches!(e, ovsdb::Error::BridgeNotFound(_)), "{e}");
        let p = db
            .add_port("br0", &PortSpec::new("tun0", "internal"))
            .await
            .unwrap();
        assert_eq!(
            db.add_port("br0", &PortSpec::new("tun0", "internal"))
                .await
                .unwrap(),
            p
        );
        let q = db.set_port_qos("tun0", &QosSpec::default()).await.unwrap();
        db.delete_port("br0", "tun0").await.unwrap();
        assert!(db.qos().contains_key(&q), "QoS is a root table");
    }

    #[tokio::test]
    async fn the_fake_nat_is_atomic_and_names_the_bad_line() {
        let nat = FakeNat::new();
        nat.restore("*nat\n:SDN-X - [0:0]\n-A SDN-X -j RETURN\n-I PREROUTING 1 -j SDN-X\nCOMMIT\n")
            .await
            .unwrap();
        assert_eq!(nat.rules("SDN-X").unwrap(), vec!["-j RETURN"]);
        let e = nat
            .restore("*nat\n:SDN-Y - [0:0]\n-A SDN-NOPE -j RETURN\nCOMMIT\n")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
        assert!(
            nat.rules("SDN-Y").is_none(),
            "nothing of a refused input applies"
        );
        let e = nat.restore("*nat\n-X SDN-X\nCOMMIT\n").await.unwrap_err();
        assert!(e.to_string().contains("Directory not empty"), "{e}");
        let lines = nat.list("nat").await.unwrap();
        assert!(lines.contains(&"-N SDN-X".to_string()), "{lines:?}");
        assert!(
            lines.contains(&"-A PREROUTING -j SDN-X".to_string()),
            "{lines:?}"
        );
    }
}
