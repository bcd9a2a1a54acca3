//! A HostSubnet as a cache of thousands of them holds it, and its wire form.
//!
//! A dual-stack node's HostSubnet carries its IPv6 subnet in an annotation
//! ([`annotations::IPV6_SUBNET`]); in k8s-openapi's `ObjectMeta` that is a `BTreeMap`, about
//! 600 bytes for one entry (a B-tree node has room for eleven): 3 MB of an agent's heap at
//! 5,000 nodes. [`HostSubnet::compact`] keeps the parsed subnet instead, and the hand-written
//! `Serialize` puts it back, so that what is written is what was read.

use serde::Serialize;

use super::{annotations, HostSubnet};

impl HostSubnet {
    /// The object as a cache of thousands of them should hold it: a valid IPv6 subnet
    /// annotation written canonically moves out of `metadata.annotations` into 17 bytes, and
    /// a map left empty goes (a one-entry map costs about 600 bytes: a B-tree node has room
    /// for eleven; the IPv6 subnet is the only annotation of a HostSubnet that hosts no IPv6
    /// egress IPs).
    /// [`HostSubnet::ipv6_subnet`], equality of two compacted objects and serialization answer
    /// as before; a bad or unusually written value stays where it is, so validation still
    /// names it as written.
    pub fn compact(mut self) -> HostSubnet {
        let Some(notes) = &mut self.metadata.annotations else {
            return self;
        };
        let Some(value) = notes.get(annotations::IPV6_SUBNET) else {
            return self;
        };
        if let Ok(net) = crate::validate::parse_cidr6(annotations::IPV6_SUBNET, value) {
            if net.to_string() == *value {
                self.ipv6_subnet_kept = Some(net);
                notes.remove(annotations::IPV6_SUBNET);
                if notes.is_empty() {
                    self.metadata.annotations = None;
                }
            }
        }
        self
    }
}

impl Serialize for HostSubnet {
    /// As the fields are declared (the empty egress lists left out), with an IPv6 subnet that
    /// [`HostSubnet::compact`] took out of the annotations put back: the same text as before.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let restored;
        let metadata = match self.ipv6_subnet_kept {
            None => &self.metadata,
            Some(net) => {
                let mut m = self.metadata.clone();
                // One set on the object since it was compacted wins (as in ipv6_subnet).
                m.annotations
                    .get_or_insert_with(Default::default)
                    .entry(annotations::IPV6_SUBNET.into())
                    .or_insert_with(|| net.to_string());
                restored = m;
                &restored
            }
        };
        let lists = [
            ("egressIPs", &self.egress_ips),
            ("egressCIDRs", &self.egress_cidrs),
        ];
        let fields = 6 + lists.iter().filter(|(_, l)| !l.is_empty()).count();
        let mut st = s.serialize_struct("HostSubnet", fields)?;
        st.serialize_field("apiVersion", &self.api_version)?;
        st.serialize_field("kind", &self.kind)?;
        st.serialize_field("metadata", metadata)?;
        st.serialize_field("host", &self.host)?;
        st.serialize_field("hostIP", &self.host_ip)?;
        st.serialize_field("subnet", &self.subnet)?;
        for (name, list) in lists {
            if list.is_empty() {
                st.skip_field(name)?;
            } else {
                st.serialize_field(name, list)?;
            }
        }
        st.end()
    }
}
