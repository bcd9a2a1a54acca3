//! The lease store's batch and hand-over operations: many addresses leased under one lock and
//! one listing of the directory (the warm pool's top-ups, one family or both), and leases handed
//! from one owner to another in place (a warm port's to its pod, a deleted pod's to its port).
//! Apart from [`super`] because they serve the pool, not host-local's own operations.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use cluster::files::{Durability, Tail};

use super::*;

impl Store {
    /// Leases one address to each of `ids` (container ids, all with `ifname`) under one lock and
    /// one listing of the directory (the warm pool takes a batch of addresses at once). Stops
    /// early when the range has no more: fewer leases than ids is not an error, none is
    /// [`IpamError::Exhausted`].
    pub fn allocate_many<A: Family>(
        &self,
        range: &Range<A>,
        ids: &[String],
        ifname: &str,
    ) -> Result<Vec<Lease<A>>, IpamError> {
        self.allocate_many_with(range, ids, ifname, false)
    }

    /// [`Self::allocate_many`] on a node of an IPv6-only cluster: no two leases share their
    /// last 32 bits (the pods' MACs, see [`Self::allocate_ipv6_only`]).
    pub fn allocate_many_ipv6_only(
        &self,
        range: &Range<std::net::Ipv6Addr>,
        ids: &[String],
        ifname: &str,
    ) -> Result<Vec<Lease<std::net::Ipv6Addr>>, IpamError> {
        self.allocate_many_with(range, ids, ifname, true)
    }

    fn allocate_many_with<A: Family>(
        &self,
        range: &Range<A>,
        ids: &[String],
        ifname: &str,
        unique_low32: bool,
    ) -> Result<Vec<Lease<A>>, IpamError> {
        for id in ids {
            validate_id(id)?;
        }
        validate_ifname(ifname)?;
        range.validate()?;
        let _lock = self.lock()?;
        let mut taken: HashSet<A> = self.leased()?.into_iter().filter_map(A::of).collect();
        let mut low32: HashSet<u32> = taken.iter().map(|ip| ip.bits() as u32).collect();
        let low32 = unique_low32.then_some(&mut low32);
        let mut out = Vec::new();
        match self.allocate_many_locked(range, ids, ifname, (&mut taken, low32), &mut out) {
            Ok(()) => Ok(out),
            Err(e) => {
                // Nothing half-done: what this call leased goes again.
                let _ = self.remove_all(out.iter().map(|l| l.ip));
                Err(e)
            }
        }
    }

    /// [`Self::allocate_many`] of both families for dual-stack attachments, under one lock and
    /// one listing: each of `ids` gets an IPv4 and an IPv6 address, as far as both ranges go
    /// (an IPv4 lease left without an IPv6 partner is released again).
    #[allow(clippy::type_complexity)]
    pub fn allocate_many_dual(
        &self,
        (r4, r6): (&Range, &Range<std::net::Ipv6Addr>),
        ids: &[String],
        ifname: &str,
    ) -> Result<Vec<(Lease, Lease<std::net::Ipv6Addr>)>, IpamError> {
        for id in ids {
            validate_id(id)?;
        }
        validate_ifname(ifname)?;
        r4.validate()?;
        r6.validate()?;
        let _lock = self.lock()?;
        let leased = self.leased()?;
        let mut taken4: HashSet<Ipv4Addr> =
            leased.iter().copied().filter_map(Ipv4Addr::of).collect();
        let mut taken6: HashSet<std::net::Ipv6Addr> = leased
            .into_iter()
            .filter_map(std::net::Ipv6Addr::of)
            .collect();
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let made = self
            .allocate_many_locked(r4, ids, ifname, (&mut taken4, None), &mut v4)
            .and_then(|()| {
                let owners: Vec<String> = v4.iter().map(|l| l.container_id.clone()).collect();
                self.allocate_many_locked(r6, &owners, ifname, (&mut taken6, None), &mut v6)
            });
        if let Err(e) = made {
            // Nothing half-done: every lease of this call goes again, the first error stays.
            let _ = self.remove_all(v4.iter().map(|l| l.ip));
            let _ = self.remove_all(v6.iter().map(|l| l.ip));
            return Err(e);
        }
        // `v6` leases a prefix of `owners`, in order.
        self.remove_all(v4.iter().skip(v6.len()).map(|l| l.ip))?;
        Ok(v4.into_iter().zip(v6).collect())
    }

    /// The allocation walk of [`Self::allocate_many`], the lock held and `taken` listed; the
    /// leases made go to `out` (also those made before an error, for the caller to undo).
    fn allocate_many_locked<A: Family>(
        &self,
        range: &Range<A>,
        ids: &[String],
        ifname: &str,
        (taken, mut low32): (&mut HashSet<A>, Option<&mut HashSet<u32>>),
        out: &mut Vec<Lease<A>>,
    ) -> Result<(), IpamError> {
        let mut candidates = range.candidates(self.last_reserved::<A>());
        'ids: for id in ids {
            for ip in candidates.by_ref() {
                let low = ip.bits() as u32;
                if range.reserved_kind(ip).is_some()
                    || taken.contains(&ip)
                    || low32.as_ref().is_some_and(|l| l.contains(&low))
                {
                    continue;
                }
                if self.reserve(ip, id, ifname)? {
                    taken.insert(ip);
                    if let Some(l) = low32.as_mut() {
                        l.insert(low);
                    }
                    out.push(Lease {
                        ip,
                        container_id: id.clone(),
                        ifname: ifname.to_string(),
                    });
                    continue 'ids;
                }
            }
            break;
        }
        if out.is_empty() && !ids.is_empty() {
            return Err(IpamError::Exhausted {
                range: range.to_string(),
                subnet: A::any_net(&range.subnet),
                leasable: range.leasable(),
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Hands the lease of `ip` from `from` (container id, ifname) to `to`, in place: the address
    /// is never free in between (the agent's warm pool ports hold an address under their own
    /// name until a pod takes the port, and a deleted pod's address is held under its port's
    /// name until its flows are gone). Fails with [`IpamError::InUse`] when `from` does not
    /// hold `ip` (naming whoever does), and leaves the lease untouched then. One file read and
    /// one rename, no scan of the directory.
    pub fn transfer<A: Addr>(
        &self,
        ip: A,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<Lease<A>, IpamError> {
        self.transfer_all(&[ip.ip()], from, to)?;
        Ok(Lease {
            ip,
            container_id: to.0.to_string(),
            ifname: to.1.to_string(),
        })
    }

    /// [`Self::transfer`] of several addresses (a dual-stack attachment's two) under one lock:
    /// all are checked to be `from`'s before any is rewritten.
    pub fn transfer_all(
        &self,
        ips: &[IpAddr],
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<(), IpamError> {
        validate_id(to.0)?;
        validate_ifname(to.1)?;
        let _lock = self.lock()?;
        for ip in ips {
            let holder = self.read_lease(*ip)?;
            if !holder
                .as_ref()
                .is_some_and(|l| l.is_exactly(from.0, from.1))
            {
                return Err(self.in_use(*ip, holder.as_ref()));
            }
        }
        let content = format!("{}{LINE_BREAK}{}", to.0, to.1);
        for ip in ips {
            let path = self.lease_path(*ip);
            write(&path, content.as_bytes(), Durability::Process, Tail::Spaces)
                .map_err(io_err("rewrite lease file", &path))?;
        }
        Ok(())
    }
}
