//! Cookie layout: every flow's cookie names the object that owns it, so that teardown and
//! updates select exactly that object's flows with a cookie mask.
//!
//! ```text
//!  63..60   59..0
//!  feature  object id (pod ofport, HostSubnet hash, VNID...)
//! ```
//! The base pipeline uses feature 0, object 1 (`0x1`).

/// Which part of the agent owns a flow.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Feature {
    /// The base pipeline.
    Base = 0,
    /// A local pod.
    Pod = 1,
    /// A remote node (HostSubnet).
    Node = 2,
    /// A VNID's table-80 row.
    Vnid = 3,
    /// A VNID's egress firewall rows (table 100).
    EgressFirewall = 4,
    /// A VNID's multicast rows (tables 110 and 120).
    Multicast = 5,
    /// A VNID's egress IP row (table 101) and group.
    EgressIp = 6,
    /// A local pod's NetworkPolicy rows (its targets and isolation in tables 27 and 80).
    PolicyTarget = 7,
    /// The shared NetworkPolicy rows (peers, ports, `conj_id` rows).
    Policy = 8,
    /// A VNID's audit rows in table 80 (multitenant mode).
    Audit = 9,
    /// A live trace's temporary rows (`flows::live_trace`): never desired, so the reconcile
    /// leaves them alone; they remove themselves (hard timeout) and the agent sweeps them at
    /// start-up.
    LiveTrace = 10,
}

/// Bits of the object id.
pub const OBJECT_BITS: u32 = 60;
/// Mask selecting a feature's flows.
pub const FEATURE_MASK: u64 = 0xf << OBJECT_BITS;
/// Mask selecting one object's flows.
pub const OBJECT_MASK: u64 = u64::MAX;

/// The cookie of `feature`'s object `id` (truncated to 60 bits).
pub const fn cookie(feature: Feature, id: u64) -> u64 {
    ((feature as u64) << OBJECT_BITS) | (id & !FEATURE_MASK)
}

/// The cookie of the base pipeline.
pub const BASE: u64 = cookie(Feature::Base, 1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_name_feature_and_object() {
        assert_eq!(BASE, 0x1);
        assert_eq!(cookie(Feature::Pod, 3), 0x1000_0000_0000_0003);
        assert_eq!(
            cookie(Feature::Node, 3) & FEATURE_MASK,
            (Feature::Node as u64) << 60
        );
        assert_eq!(cookie(Feature::Vnid, u64::MAX) >> 60, Feature::Vnid as u64);
    }
}
