//! NetNamespace / VNID semantics of the multitenant network, pure (no I/O).
//!
//! A namespace's VNID (NetNamespace `netid`) is its tenant. VNID 0 is global: its pods reach and
//! are reached by everyone. The operations (join, isolate, make-global) and VNID allocation arrive
//! with the multitenant issue; this crate starts with the VNID type they are built on.

/// A virtual network id: 24 bits, carried as the VXLAN VNI.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Vnid(u32);

impl Vnid {
    /// The global VNID.
    pub const GLOBAL: Vnid = Vnid(0);
    /// The largest VNID (2^24 - 1).
    pub const MAX: u32 = (1 << 24) - 1;

    /// A VNID, if it fits 24 bits.
    pub fn new(id: u32) -> Option<Vnid> {
        (id <= Self::MAX).then_some(Vnid(id))
    }

    /// The numeric id.
    pub fn id(self) -> u32 {
        self.0
    }

    /// Whether this is the global VNID 0.
    pub fn is_global(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnids_are_24_bits() {
        assert!(Vnid::new(Vnid::MAX).is_some());
        assert!(Vnid::new(Vnid::MAX + 1).is_none());
        assert!(Vnid::GLOBAL.is_global());
    }
}
