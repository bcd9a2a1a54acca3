//! One kind's objects as a watch delivers them ([`Reflected`]), and the handling of a watch's
//! errors ([`watch_event`]): shared by the agent's Kubernetes source and the controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};

/// One kind's objects, kept by a kube-rs reflector store (the controller's view of each kind
/// it watches too): the reflector's writer applies every watch event, including the re-list
/// buffer it swaps in at `InitDone`, and the store is read back whole.
#[allow(missing_debug_implementations)] // the reflector's writer has no Debug
pub struct Reflected<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: reflector::store::Writer<K>,
    store: reflector::Store<K>,
    /// Whether the first list is complete.
    pub ready: bool,
}

impl<K> Default for Reflected<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Reflected<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// An empty store for a kind with a static type.
    pub fn new() -> Self {
        Self::with_type(K::DynamicType::default())
    }
}

impl<K> Reflected<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// An empty store for a kind whose type is known at run time (`DynamicObject`).
    pub fn with_type(dt: K::DynamicType) -> Self {
        let writer = reflector::store::Writer::new(dt);
        let store = writer.as_reader();
        Reflected {
            writer,
            store,
            ready: false,
        }
    }

    /// Applies one watch event; returns whether the objects may have changed.
    pub fn apply(&mut self, ev: &Event<K>) -> bool {
        self.writer.apply_watcher_event(ev);
        match ev {
            Event::Init | Event::InitApply(_) => false,
            Event::InitDone => {
                self.ready = true;
                true
            }
            Event::Apply(_) | Event::Delete(_) => true,
        }
    }

    /// Every object.
    pub fn objects(&self) -> Vec<Arc<K>> {
        self.store.state()
    }
}

/// The event of a watch result; an error is logged and kept in `errors` (by kind) until the
/// kind's watch works again.
pub fn watch_event<K>(
    kind: &'static str,
    r: watcher::Result<Event<K>>,
    errors: &mut BTreeMap<&'static str, String>,
) -> Option<Event<K>> {
    match r {
        Ok(e) => {
            errors.remove(kind);
            Some(e)
        }
        Err(e) => {
            tracing::warn!(kind, error = %e, "watch failed; backing off and resuming");
            errors.insert(kind, e.to_string());
            None
        }
    }
}
