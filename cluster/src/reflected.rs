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
    dyntype: K::DynamicType,
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
        let writer = reflector::store::Writer::new(dt.clone());
        let store = writer.as_reader();
        Reflected {
            writer,
            store,
            dyntype: dt,
            ready: false,
        }
    }

    /// Applies one watch event; returns whether the objects may have changed. An `Apply` of
    /// the very version the store holds changes nothing: the watch echoing a write whose result
    /// was already recorded (the controller records what the server returned, then the watch
    /// reports it again). At 5,000 nodes a controller that took every echo for a change
    /// replanned the whole cluster per handful of its own 10,000 writes, and fell a minute
    /// behind the events that mattered.
    pub fn apply(&mut self, ev: &Event<K>) -> bool {
        let echo = match ev {
            Event::Apply(o) => o.meta().resource_version.as_ref().is_some_and(|rv| {
                self.store
                    .get(&reflector::ObjectRef::from_obj_with(
                        o,
                        self.dyntype.clone(),
                    ))
                    .is_some_and(|held| held.meta().resource_version.as_ref() == Some(rv))
            }),
            _ => false,
        };
        self.writer.apply_watcher_event(ev);
        match ev {
            Event::Init | Event::InitApply(_) => false,
            Event::InitDone => {
                self.ready = true;
                true
            }
            Event::Apply(_) => !echo,
            Event::Delete(_) => true,
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::ObjectMeta;

    fn ns(name: &str, rv: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    /// The echo of an object already held at that version is no change; a new version, a new
    /// object and a deletion are.
    #[test]
    fn an_echo_of_the_held_version_is_no_change() {
        let mut r = Reflected::<Namespace>::new();
        assert!(!r.apply(&Event::Init));
        assert!(!r.apply(&Event::InitApply(ns("a", "1"))));
        assert!(r.apply(&Event::InitDone));
        assert!(r.ready);
        assert!(
            !r.apply(&Event::Apply(ns("a", "1"))),
            "echo of the listed version"
        );
        assert!(r.apply(&Event::Apply(ns("a", "2"))), "a new version");
        assert!(!r.apply(&Event::Apply(ns("a", "2"))), "its echo");
        assert!(
            r.apply(&Event::Apply(ns("b", "2"))),
            "another object at that version"
        );
        let mut unversioned = ns("a", "");
        unversioned.metadata.resource_version = None;
        assert!(r.apply(&Event::Apply(unversioned)), "no version: a change");
        assert!(r.apply(&Event::Delete(ns("a", "3"))));
        assert_eq!(r.objects().len(), 1);
    }
}
