//! NetNamespace / VNID semantics of the multitenant network, and the NetworkPolicy model of
//! networkpolicy mode ([`policy`]), pure (no I/O).
//!
//! A namespace's VNID (NetNamespace `netid`) is its tenant. VNID 0 is global: its pods reach and
//! are reached by everyone. Several namespaces may share a VNID (they were joined). [`Tenancy`]
//! holds the namespace → VNID map a controller owns: it allocates VNIDs (0 for `default` and the
//! configured global namespaces, otherwise fresh ones from 10 up to (not including) 2^24-1,
//! which is kept for pods of an unknown tenant, never one still in use) and applies the three operations of OpenShift's
//! `pod.network.openshift.io/multitenant.change-network` annotation ([`Change`]): `join:<other>`,
//! `isolate` and `global`.
//!
//! Allocation walks forward from the last VNID handed out (wrapping round) instead of taking the
//! lowest free one, so a VNID just released is not handed to a new tenant at once: flows or
//! packets of the old tenant that are still in flight on some node never meet the new one.

pub mod admin;
pub mod cluster_policy;
pub mod policy;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// The annotation that asks for a [`Change`] of a namespace's network.
pub const CHANGE_NETWORK_ANNOTATION: &str = "pod.network.openshift.io/multitenant.change-network";

/// The first VNID handed to a tenant (1..=9 are reserved, as in OpenShift).
pub const FIRST_TENANT_VNID: u32 = 10;

/// A virtual network id: 24 bits, carried as the VXLAN VNI.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Vnid(u32);

impl Vnid {
    /// The global VNID.
    pub const GLOBAL: Vnid = Vnid(0);
    /// The largest VNID (2^24 - 1).
    pub const MAX: u32 = (1 << 24) - 1;
    /// Never allocated: what an agent gives a pod whose tenant it cannot know (its pods reach only
    /// global pods, not even each other), so an unknown tenant never becomes global.
    pub const UNASSIGNED: Vnid = Vnid(Vnid::MAX);
    /// The largest VNID handed to a tenant.
    pub const LAST_TENANT: u32 = Vnid::MAX - 1;

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

    /// Whether this is a VNID a tenant may have here: [`FIRST_TENANT_VNID`] to
    /// [`Vnid::LAST_TENANT`]. openshift-sdn's allocator goes one further, to 2^24-1, which this
    /// agent keeps for pods whose tenant it cannot know ([`Vnid::UNASSIGNED`]).
    pub fn is_tenant(self) -> bool {
        (FIRST_TENANT_VNID..=Self::LAST_TENANT).contains(&self.0)
    }
}

impl fmt::Display for Vnid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Whether a pod of VNID `from` may reach a pod of VNID `to`: same VNID, or either is global.
pub fn reachable(from: Vnid, to: Vnid) -> bool {
    from == to || from.is_global() || to.is_global()
}

/// A change of a namespace's network, as the change-network annotation spells it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Change {
    /// `join:<other>`: take the other namespace's VNID.
    Join(String),
    /// `isolate`: a fresh VNID of its own.
    Isolate,
    /// `global`: VNID 0.
    Global,
}

impl FromStr for Change {
    type Err = Error;
    fn from_str(s: &str) -> Result<Change, Error> {
        match s {
            "isolate" => Ok(Change::Isolate),
            "global" => Ok(Change::Global),
            _ => match s.strip_prefix("join:") {
                Some(other) if !other.is_empty() => Ok(Change::Join(other.to_string())),
                _ => Err(Error::BadChange(s.to_string())),
            },
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Join(o) => write!(f, "join:{o}"),
            Change::Isolate => f.write_str("isolate"),
            Change::Global => f.write_str("global"),
        }
    }
}

/// Why an operation was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Error {
    /// The namespace has no VNID.
    UnknownNamespace(String),
    /// `isolate` of `default` (it is the global namespace of the cluster).
    CannotIsolateDefault,
    /// A namespace cannot join itself.
    JoinSelf(String),
    /// Every tenant VNID is in use.
    Exhausted,
    /// The annotation value is none of `join:<ns>`, `isolate`, `global`.
    BadChange(String),
    /// A loaded assignment is out of range.
    BadVnid {
        /// The namespace.
        namespace: String,
        /// The value.
        vnid: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownNamespace(n) => write!(f, "namespace {n:?} has no NetNamespace (no VNID)"),
            Error::CannotIsolateDefault => {
                f.write_str("namespace \"default\" is global and cannot be isolated")
            }
            Error::JoinSelf(n) => write!(f, "namespace {n:?} cannot join itself"),
            Error::Exhausted => write!(
                f,
                "every tenant VNID ({FIRST_TENANT_VNID}..={}) is in use",
                Vnid::LAST_TENANT
            ),
            Error::BadChange(s) => write!(
                f,
                "{CHANGE_NETWORK_ANNOTATION} value {s:?}: expected join:<namespace>, isolate or global"
            ),
            Error::BadVnid { namespace, vnid } => write!(
                f,
                "namespace {namespace:?} has netid {vnid}, above the largest VNID {}",
                Vnid::MAX
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The namespace → VNID map of a cluster, with allocation and the change operations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenancy {
    vnids: BTreeMap<String, Vnid>,
    /// VNIDs in use without a namespace (pods of a deleted namespace keep theirs).
    held: BTreeSet<Vnid>,
    global: BTreeSet<String>,
    /// The last VNID allocated (the walk resumes after it).
    last: u32,
    /// The largest VNID allocated ([`Vnid::LAST_TENANT`]; smaller in tests, to wrap often).
    top: u32,
}

impl Tenancy {
    /// An empty map; `default` and `global_namespaces` get VNID 0 when added.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(global_namespaces: I) -> Tenancy {
        let mut global: BTreeSet<String> = global_namespaces.into_iter().map(Into::into).collect();
        global.insert("default".to_string());
        Tenancy {
            vnids: BTreeMap::new(),
            held: BTreeSet::new(),
            global,
            last: FIRST_TENANT_VNID - 1,
            top: Vnid::LAST_TENANT,
        }
    }

    /// Loads existing assignments (NetNamespaces read back after a restart).
    pub fn load<I, S>(&mut self, assignments: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = (S, u32)>,
        S: Into<String>,
    {
        for (ns, id) in assignments {
            let ns = ns.into();
            let vnid = Vnid::new(id).ok_or(Error::BadVnid {
                namespace: ns.clone(),
                vnid: id,
            })?;
            self.last = self.last.max(id);
            self.vnids.insert(ns, vnid);
        }
        if self.last > self.top {
            self.last = FIRST_TENANT_VNID - 1;
        }
        Ok(())
    }

    /// Marks `vnids` in use although no namespace has them (pods of a namespace deleted while
    /// they run keep its VNID), so allocation never hands them out. The walk moves past the
    /// largest, as if they had been allocated.
    pub fn hold(&mut self, vnids: impl IntoIterator<Item = Vnid>) {
        for v in vnids {
            self.held.insert(v);
            self.resume_after(v.id());
        }
    }

    /// Resumes the allocation walk after `vnid` (the last one handed out, remembered across
    /// runs), unless it already is further; a VNID past the top restarts the walk.
    pub fn resume_after(&mut self, vnid: u32) {
        self.last = self.last.max(vnid);
        if self.last > self.top {
            self.last = FIRST_TENANT_VNID - 1;
        }
    }

    /// The VNID of `namespace`.
    pub fn vnid(&self, namespace: &str) -> Option<Vnid> {
        self.vnids.get(namespace).copied()
    }

    /// Every namespace with its VNID.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, Vnid)> {
        self.vnids.iter().map(|(n, v)| (n.as_str(), *v))
    }

    /// The namespaces sharing `vnid`.
    pub fn members(&self, vnid: Vnid) -> Vec<&str> {
        self.namespaces()
            .filter(|(_, v)| *v == vnid)
            .map(|(n, _)| n)
            .collect()
    }

    /// The VNIDs in use: by namespaces, and held ([`Tenancy::hold`]).
    pub fn in_use(&self) -> BTreeSet<Vnid> {
        self.vnids.values().chain(&self.held).copied().collect()
    }

    /// Whether pods of namespace `from` may reach pods of `to` (false if either is unknown).
    pub fn can_reach(&self, from: &str, to: &str) -> bool {
        match (self.vnid(from), self.vnid(to)) {
            (Some(a), Some(b)) => reachable(a, b),
            _ => false,
        }
    }

    /// Adds `namespace`: VNID 0 if it is configured global, else a fresh VNID. Idempotent: an
    /// existing namespace keeps its VNID.
    pub fn add(&mut self, namespace: &str) -> Result<Vnid, Error> {
        if let Some(v) = self.vnid(namespace) {
            return Ok(v);
        }
        let v = if self.global.contains(namespace) {
            Vnid::GLOBAL
        } else {
            self.allocate()?
        };
        self.vnids.insert(namespace.to_string(), v);
        Ok(v)
    }

    /// Gives `namespace` the VNID `vnid` as it is (no allocation, no check: callers decide
    /// whether it may be taken, as [`crate::admin::decide`] does for `create --vnid`).
    pub fn assign(&mut self, namespace: &str, vnid: Vnid) {
        self.vnids.insert(namespace.to_string(), vnid);
    }

    /// Removes `namespace`; its VNID is free again once no other namespace uses it.
    pub fn remove(&mut self, namespace: &str) -> Option<Vnid> {
        self.vnids.remove(namespace)
    }

    /// Applies `change` to `namespace` and returns its new VNID.
    pub fn apply(&mut self, namespace: &str, change: &Change) -> Result<Vnid, Error> {
        if !self.vnids.contains_key(namespace) {
            return Err(Error::UnknownNamespace(namespace.to_string()));
        }
        let v = match change {
            Change::Join(other) if other == namespace => {
                return Err(Error::JoinSelf(namespace.to_string()))
            }
            Change::Join(other) => self
                .vnid(other)
                .ok_or_else(|| Error::UnknownNamespace(other.clone()))?,
            Change::Isolate if namespace == "default" => return Err(Error::CannotIsolateDefault),
            Change::Isolate => {
                let current = self.vnid(namespace).unwrap_or(Vnid::GLOBAL);
                // Already alone on a tenant VNID: nothing to do.
                if !current.is_global() && self.members(current).len() == 1 {
                    current
                } else {
                    self.allocate()?
                }
            }
            Change::Global => Vnid::GLOBAL,
        };
        self.vnids.insert(namespace.to_string(), v);
        Ok(v)
    }

    /// The next free tenant VNID after the last one handed out, wrapping round.
    fn allocate(&mut self) -> Result<Vnid, Error> {
        let used = self.in_use();
        let span = self.top - FIRST_TENANT_VNID + 1;
        let mut candidate = self.last;
        for _ in 0..span {
            candidate = if !(FIRST_TENANT_VNID..self.top).contains(&candidate) {
                FIRST_TENANT_VNID
            } else {
                candidate + 1
            };
            let v = Vnid(candidate);
            if !used.contains(&v) {
                self.last = candidate;
                return Ok(v);
            }
        }
        Err(Error::Exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_vnids_are_never_allocated_and_the_walk_resumes_where_told() {
        let mut t = Tenancy::new(Vec::<String>::new());
        t.load([("a", 10)]).unwrap();
        t.hold([Vnid(11), Vnid(12)]);
        assert_eq!(t.add("b").unwrap(), Vnid(13));
        assert!(
            t.members(Vnid(11)).is_empty(),
            "held VNIDs have no namespace"
        );
        let mut t = Tenancy::new(Vec::<String>::new());
        t.resume_after(40);
        assert_eq!(t.add("c").unwrap(), Vnid(41));
        t.resume_after(20);
        assert_eq!(t.add("d").unwrap(), Vnid(42), "never backwards");
        t.resume_after(Vnid::MAX);
        assert_eq!(
            t.add("e").unwrap(),
            Vnid(FIRST_TENANT_VNID),
            "past the top: from 10"
        );
    }

    #[test]
    fn vnids_are_24_bits() {
        assert!(Vnid::new(Vnid::MAX).is_some());
        assert!(Vnid::new(Vnid::MAX + 1).is_none());
        assert!(Vnid::GLOBAL.is_global());
    }

    #[test]
    fn allocation_and_operations() {
        let mut t = Tenancy::new(["openshift-infra"]);
        assert_eq!(t.add("default").unwrap(), Vnid::GLOBAL);
        assert_eq!(t.add("openshift-infra").unwrap(), Vnid::GLOBAL);
        assert_eq!(t.add("a").unwrap(), Vnid(10));
        assert_eq!(t.add("b").unwrap(), Vnid(11));
        assert_eq!(t.add("a").unwrap(), Vnid(10), "idempotent");
        assert!(!t.can_reach("a", "b"));
        assert!(t.can_reach("a", "default") && t.can_reach("default", "b"));
        assert_eq!(t.apply("b", &"join:a".parse().unwrap()).unwrap(), Vnid(10));
        assert!(t.can_reach("a", "b") && t.can_reach("b", "a"));
        assert_eq!(
            t.apply("b", &Change::Isolate).unwrap(),
            Vnid(12),
            "fresh, not 11"
        );
        assert_eq!(t.apply("a", &Change::Global).unwrap(), Vnid::GLOBAL);
        assert!(t.can_reach("a", "b"));
        assert_eq!(
            t.apply("default", &Change::Isolate),
            Err(Error::CannotIsolateDefault)
        );
        assert_eq!(
            t.apply("nope", &Change::Global),
            Err(Error::UnknownNamespace("nope".into()))
        );
        assert_eq!(
            t.apply("b", &"join:nope".parse().unwrap()),
            Err(Error::UnknownNamespace("nope".into()))
        );
        assert_eq!(
            t.apply("b", &"join:b".parse().unwrap()),
            Err(Error::JoinSelf("b".into()))
        );
        for bad in ["join:", "isolated", ""] {
            assert!(bad.parse::<Change>().is_err(), "{bad}");
        }
        assert_eq!("join:x".parse::<Change>().unwrap().to_string(), "join:x");
    }

    #[test]
    fn allocation_wraps_and_never_reuses_a_vnid_in_use() {
        let mut t = Tenancy::new(Vec::<String>::new());
        t.load([("x", Vnid::LAST_TENANT - 1), ("y", FIRST_TENANT_VNID)])
            .unwrap();
        assert_eq!(t.add("a").unwrap(), Vnid(Vnid::LAST_TENANT));
        assert_eq!(
            t.add("b").unwrap(),
            Vnid(FIRST_TENANT_VNID + 1),
            "wrapped past y's 10"
        );
        assert!(t.load([("z", Vnid::MAX + 1)]).is_err());
    }

    /// A tiny deterministic generator (xorshift64*) for the randomised property test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random operation sequences against a reference model of groups: namespaces are in the
    /// same group iff they were joined (directly or through others) and not isolated since;
    /// the global group is VNID 0. Invariants: two namespaces share a VNID iff they are in the
    /// same group (so no two isolated namespaces share one), reachability is symmetric and
    /// holds iff same group or either global, global reaches all, tenant VNIDs are in range.
    #[test]
    fn random_operations_keep_the_invariants() {
        let names = ["default", "g", "a", "b", "c", "d", "e", "f"];
        for seed in 1..=400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut t = Tenancy::new(["g"]);
            // Odd seeds: only 8 tenant VNIDs, so the allocation walk wraps round all the time
            // and must step over VNIDs still in use.
            if seed % 2 == 1 {
                t.top = FIRST_TENANT_VNID + 7;
            }
            // Model: namespace -> group id; group 0 is global.
            let mut group: BTreeMap<&str, u64> = BTreeMap::new();
            let mut next_group = 1u64;
            for _ in 0..60 {
                let ns = names[rng.below(names.len())];
                let op = rng.below(5);
                match op {
                    0 => {
                        let v = t.add(ns).unwrap();
                        group.entry(ns).or_insert_with(|| {
                            if v.is_global() {
                                0
                            } else {
                                next_group += 1;
                                next_group
                            }
                        });
                    }
                    1 => {
                        t.remove(ns);
                        group.remove(ns);
                    }
                    2 => {
                        let other = names[rng.below(names.len())];
                        let r = t.apply(ns, &Change::Join(other.to_string()));
                        match (group.get(ns), group.get(other)) {
                            (Some(_), Some(g)) if ns != other => {
                                r.unwrap();
                                let g = *g;
                                group.insert(ns, g);
                            }
                            _ => assert!(r.is_err(), "join {ns} -> {other} should fail"),
                        }
                    }
                    3 => {
                        let r = t.apply(ns, &Change::Isolate);
                        if !group.contains_key(ns) || ns == "default" {
                            assert!(r.is_err());
                        } else {
                            r.unwrap();
                            let g = group[ns];
                            let alone = g != 0 && group.values().filter(|x| **x == g).count() == 1;
                            if !alone {
                                next_group += 1;
                                group.insert(ns, next_group);
                            }
                        }
                    }
                    _ => {
                        let r = t.apply(ns, &Change::Global);
                        if group.contains_key(ns) {
                            r.unwrap();
                            group.insert(ns, 0);
                        } else {
                            assert!(r.is_err());
                        }
                    }
                }
                // Invariants.
                let known: Vec<&str> = group.keys().copied().collect();
                assert_eq!(
                    t.namespaces().map(|(n, _)| n).collect::<Vec<_>>(),
                    known,
                    "seed {seed}"
                );
                for a in &known {
                    let va = t.vnid(a).unwrap();
                    assert_eq!(va.is_global(), group[a] == 0, "seed {seed}: {a}");
                    if !va.is_global() {
                        assert!(va.id() >= FIRST_TENANT_VNID && va.id() <= Vnid::LAST_TENANT);
                    }
                    for b in &known {
                        let vb = t.vnid(b).unwrap();
                        let same = group[a] == group[b];
                        assert_eq!(va == vb, same, "seed {seed}: {a}={va} {b}={vb}");
                        let want = same || group[a] == 0 || group[b] == 0;
                        assert_eq!(t.can_reach(a, b), want, "seed {seed}: {a} -> {b}");
                        assert_eq!(t.can_reach(a, b), t.can_reach(b, a), "symmetric");
                    }
                }
            }
        }
    }
}
