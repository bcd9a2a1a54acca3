//! One kind's objects as the Kubernetes source keeps them: what was read of each, by key
//! ([`Kept`]), applied from the kind's watch events. Its own module because it is the
//! source's memory model: what it holds of a 5,000-node cluster is what these maps hold.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::watcher::Event;

/// What was read of each object of one kind, by key (sorted), kept from the kind's watch
/// events: an object is read once, when its event arrives, and only what was read outlives the
/// event (not the object's JSON or typed form, which a reflector store would keep: a
/// 5,000-node cluster has 5,000 HostSubnets, 5,000 namespaces and may have 10,000
/// NetworkPolicies). The map is shared with the published states and copied only when an
/// event changes it while one still holds it. A re-list fills a fresh map and swaps it in at
/// `InitDone`, so objects deleted while the watch was down go.
pub(crate) struct Kept<T> {
    pub(crate) map: Arc<BTreeMap<String, T>>,
    relist: Option<BTreeMap<String, T>>,
    /// Whether the first list is complete.
    pub(crate) ready: bool,
}

impl<T: Clone + PartialEq> Kept<T> {
    pub(crate) fn new() -> Self {
        Kept {
            map: Arc::default(),
            relist: None,
            ready: false,
        }
    }

    /// Applies one watch event: `key` names an object, `read` gives what is kept of it
    /// (`None`: nothing, e.g. it does not parse; `read` says why). Returns whether the map
    /// may have changed.
    pub(crate) fn apply<K>(
        &mut self,
        ev: &Event<K>,
        key: impl Fn(&K) -> Option<String>,
        read: impl Fn(&K) -> Option<T>,
    ) -> bool {
        match ev {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(o) => {
                if let (Some(k), Some(v)) = (key(o), read(o)) {
                    self.relist.get_or_insert_with(BTreeMap::new).insert(k, v);
                }
                false
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                if *self.map != listed {
                    self.map = Arc::new(listed);
                }
                self.ready = true;
                true
            }
            Event::Apply(o) => {
                let Some(k) = key(o) else { return false };
                match read(o) {
                    Some(v) if self.map.get(&k) == Some(&v) => false,
                    Some(v) => {
                        Arc::make_mut(&mut self.map).insert(k, v);
                        true
                    }
                    None => self.remove(&k),
                }
            }
            Event::Delete(o) => key(o).is_some_and(|k| self.remove(&k)),
        }
    }

    fn remove(&mut self, k: &str) -> bool {
        self.map.contains_key(k) && Arc::make_mut(&mut self.map).remove(k).is_some()
    }
}
