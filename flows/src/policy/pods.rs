//! [`PodsByNamespace`]: every pod with an address that policies may name as a peer, by
//! namespace then name, shared in pieces.
//!
//! Why pieces: a cluster source publishes a new value after every pod event, and a node of a
//! 5,000-namespace cluster must not copy or compare 5,000 entries for each of them. Namespaces
//! hash into [`SHARDS`] shards, each shard and each namespace's pods behind an `Arc`: a pod
//! event copies one shard (a few dozen namespace entries) and one namespace's map, cloning the
//! whole is [`SHARDS`] pointer copies, and two values compare shard by shard, unchanged shards
//! by pointer.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::PodView;

/// Shards of a [`PodsByNamespace`].
pub(super) const SHARDS: usize = 64;

/// One namespace's pods, by name.
pub type NamespacePods = BTreeMap<String, PodView>;

type Shard = BTreeMap<String, Arc<NamespacePods>>;

/// Every pod with an address, by namespace then name (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodsByNamespace {
    shards: Vec<Arc<Shard>>,
}

impl Default for PodsByNamespace {
    fn default() -> Self {
        PodsByNamespace {
            shards: (0..SHARDS).map(|_| Arc::default()).collect(),
        }
    }
}

/// The shard of namespace `ns` (FNV-1a of its name).
fn shard_of(ns: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in ns.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as usize % SHARDS
}

impl PodsByNamespace {
    /// The pods of namespace `ns`.
    pub fn get(&self, ns: &str) -> Option<&NamespacePods> {
        self.shards[shard_of(ns)].get(ns).map(|m| &**m)
    }

    /// Every namespace that has a pod (in no particular order).
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.shards
            .iter()
            .flat_map(|s| s.keys().map(String::as_str))
    }

    /// Every namespace with its pods (in no particular order).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &NamespacePods)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter().map(|(k, v)| (k.as_str(), &**v)))
    }

    /// The number of namespaces that have a pod.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    /// Whether no namespace has a pod.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.is_empty())
    }

    /// The number of pods.
    pub fn pod_count(&self) -> usize {
        self.shards
            .iter()
            .flat_map(|s| s.values())
            .map(|m| m.len())
            .sum()
    }

    /// Sets pod `ns/name` (`None` removes it); returns whether anything changed. Copies the
    /// namespace's shard and map only when another value still shares them.
    pub fn set(&mut self, ns: &str, name: &str, view: Option<PodView>) -> bool {
        let shard = &mut self.shards[shard_of(ns)];
        let had = shard.get(ns).and_then(|m| m.get(name));
        if had == view.as_ref() {
            return false;
        }
        let shard = Arc::make_mut(shard);
        match view {
            Some(v) => {
                let m = shard.entry(ns.to_string()).or_default();
                Arc::make_mut(m).insert(name.to_string(), v);
            }
            None => {
                if let Some(m) = shard.get_mut(ns) {
                    Arc::make_mut(m).remove(name);
                    if m.is_empty() {
                        shard.remove(ns);
                    }
                }
            }
        }
        true
    }

    /// A value holding `maps`, sharing with `keep` every namespace whose pods are the same (a
    /// re-list that changed little leaves consumers little to compare).
    pub fn from_maps(maps: BTreeMap<String, NamespacePods>, keep: &PodsByNamespace) -> Self {
        let mut shards: Vec<Shard> = (0..SHARDS).map(|_| Shard::new()).collect();
        for (ns, m) in maps {
            let i = shard_of(&ns);
            let kept = keep.shards[i].get(&ns).filter(|o| ***o == m).cloned();
            shards[i].insert(ns, kept.unwrap_or_else(|| Arc::new(m)));
        }
        // Shards equal to `keep`'s stay its objects.
        PodsByNamespace {
            shards: shards
                .into_iter()
                .zip(&keep.shards)
                .map(|(s, k)| if **k == s { k.clone() } else { Arc::new(s) })
                .collect(),
        }
    }

    /// The namespaces whose pods differ between `self` and `other` (present in one only, or
    /// with different pods). Unchanged shards cost a pointer comparison.
    pub fn changed_namespaces<'a>(&'a self, other: &'a PodsByNamespace) -> Vec<&'a str> {
        let mut out = Vec::new();
        for (a, b) in self.shards.iter().zip(&other.shards) {
            if Arc::ptr_eq(a, b) {
                continue;
            }
            for (ns, m) in a.iter() {
                match b.get(ns) {
                    Some(o) if Arc::ptr_eq(m, o) || m == o => {}
                    _ => out.push(ns.as_str()),
                }
            }
            for ns in b.keys() {
                if !a.contains_key(ns) {
                    out.push(ns.as_str());
                }
            }
        }
        out
    }

    /// Whether namespace `ns`'s pods are the same object in both (cheap; `false` may still
    /// hold equal pods).
    pub fn shares(&self, other: &PodsByNamespace, ns: &str) -> bool {
        let i = shard_of(ns);
        match (self.shards[i].get(ns), other.shards[i].get(ns)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// Groups `pods` by namespace and name.
pub fn pods_by_namespace(pods: impl IntoIterator<Item = PodView>) -> PodsByNamespace {
    let mut out = PodsByNamespace::default();
    for p in pods {
        let (ns, name) = (p.namespace.clone(), p.name.clone());
        out.set(&ns, &name, Some(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn pod(ns: &str, name: &str, last: u8) -> PodView {
        PodView {
            namespace: ns.into(),
            name: name.into(),
            labels: Arc::default(),
            ip: Some(Ipv4Addr::new(10, 0, 0, last)),
            ip6: None,
            ports: Arc::from([]),
        }
    }

    #[test]
    fn a_change_copies_one_shard_and_is_seen_by_namespace() {
        let mut a = PodsByNamespace::default();
        for i in 0..500u32 {
            let ns = format!("ns-{i}");
            a.set(&ns, "p", Some(pod(&ns, "p", 1)));
        }
        assert_eq!((a.len(), a.pod_count()), (500, 500));
        let before = a.clone();
        assert!(
            !a.set("ns-7", "p", Some(pod("ns-7", "p", 1))),
            "same pod: no change"
        );
        assert!(a.set("ns-7", "q", Some(pod("ns-7", "q", 2))));
        assert_eq!(a.changed_namespaces(&before), vec!["ns-7"]);
        let shared = (0..SHARDS)
            .filter(|i| Arc::ptr_eq(&a.shards[*i], &before.shards[*i]))
            .count();
        assert_eq!(shared, SHARDS - 1, "only ns-7's shard was copied");
        assert!(a.shares(&before, "ns-8") && !a.shares(&before, "ns-7"));
        // Removing the last pod of a namespace removes the namespace.
        assert!(a.set("ns-9", "p", None));
        assert!(a.get("ns-9").is_none());
        let mut changed = a.changed_namespaces(&before);
        changed.sort();
        assert_eq!(changed, vec!["ns-7", "ns-9"]);
        // A re-list with the same pods keeps every shard.
        let maps: BTreeMap<String, NamespacePods> = a
            .iter()
            .map(|(ns, m)| (ns.to_string(), m.clone()))
            .collect();
        let again = PodsByNamespace::from_maps(maps, &a);
        assert!((0..SHARDS).all(|i| Arc::ptr_eq(&again.shards[i], &a.shards[i])));
        assert_eq!(again, a);
    }
}
