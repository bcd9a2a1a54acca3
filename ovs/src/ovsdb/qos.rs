//! Rate limits on ports: `Interface` ingress policing and `QoS`/`Queue` rows on a `Port`.
//!
//! `QoS` and `Queue` are root tables in the Open_vSwitch schema: a row nobody references is
//! *not* garbage collected. So a QoS row is created and attached to its port in one
//! transaction, and removed together with its queues (clearing every `Port.qos` that points at
//! it) in one transaction. Rows carry `external_ids` chosen by the caller (the agent tags them
//! with the pod's sandbox) so they can be found again after a restart, even when the port is
//! gone ([`Client::find_qos_by_external_id`]).
//!
//! Like the other helpers, changes bump `next_cfg` and wait (bounded) for ovs-vswitchd to apply
//! them. Limits: the types and keys are passed through unchecked (OVS ignores what the port's
//! netdev does not support, logging it); a port's previous QoS is replaced, and a QoS row
//! shared with another port makes the replacement fail (referential integrity).

use std::collections::BTreeMap;

use super::helpers::root_uuid;
use super::ops::{row, Atom, Condition, Datum, Function, Mutation, Operation};
use super::{Client, Error};

/// A QoS row to create by [`Client::set_port_qos`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosSpec {
    /// `QoS.type`, e.g. `linux-htb`, `egress-policer`.
    pub qos_type: String,
    /// `QoS.other_config`, e.g. `max-rate`.
    pub other_config: BTreeMap<String, String>,
    /// Queues by number, each a `Queue.other_config`.
    pub queues: BTreeMap<u32, BTreeMap<String, String>>,
    /// `external_ids` of the QoS row and of its queues.
    pub external_ids: BTreeMap<String, String>,
}

/// A QoS row found by [`Client::find_qos_by_external_id`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosInfo {
    /// Row uuid.
    pub uuid: String,
    /// `QoS.type`.
    pub qos_type: String,
    /// `QoS.other_config`.
    pub other_config: BTreeMap<String, String>,
    /// `QoS.external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// Uuids of its queues.
    pub queues: Vec<String>,
    /// Names of the ports that reference it.
    pub ports: Vec<String>,
}

fn not_found_guard(e: &Error) -> bool {
    matches!(e, Error::Transaction { index: Some(0), error, .. } if error == "timed out")
}

impl Client {
    /// Sets `ingress_policing_rate` (kbit/s) and `ingress_policing_burst` (kbit) of Interface
    /// `name`; `0, 0` turns policing off. [`Error::InterfaceNotFound`] when there is none.
    pub async fn set_interface_policing(
        &self,
        name: &str,
        rate_kbps: u64,
        burst_kb: u64,
    ) -> Result<(), Error> {
        let root = self.with_cache(root_uuid)?;
        let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let ops = vec![Operation::update(
            "Interface",
            vec![Condition::eq("name", name)],
            row([
                ("ingress_policing_rate", big(rate_kbps)),
                ("ingress_policing_burst", big(burst_kb)),
            ]),
        )];
        let (results, next_cfg) = self.transact_bumped(&root, ops).await?;
        if results.first().and_then(|r| r.count) == Some(0) {
            return Err(Error::InterfaceNotFound(name.to_string()));
        }
        self.wait_applied(&format!("policing on interface {name}"), next_cfg)
            .await
    }

    /// Creates a QoS row (and its queues) from `spec` and makes it Port `port`'s `qos`, in one
    /// transaction that also deletes the port's previous QoS row and queues. Returns the new
    /// row's uuid. [`Error::PortNotFound`] when there is no such port (nothing is created).
    pub async fn set_port_qos(&self, port: &str, spec: &QosSpec) -> Result<String, Error> {
        let (root, old) = self.with_cache(|c| -> Result<_, Error> {
            let old = c
                .port(port)
                .and_then(|p| p.uuid_ref("qos"))
                .and_then(|q| c.row("QoS", q).map(|r| (q.to_string(), queue_uuids(r))));
            Ok((root_uuid(c)?, old))
        })?;
        let mut ops = vec![Operation::assert_rows(
            "Port",
            vec![Condition::eq("name", port)],
            vec![row([("name", port)])],
        )];
        let mut queues = Vec::new();
        for (n, cfg) in &spec.queues {
            let name = format!("queue{n}");
            ops.push(Operation::insert_named(
                "Queue",
                &name,
                row([
                    ("other_config", Datum::from(cfg)),
                    ("external_ids", Datum::from(&spec.external_ids)),
                ]),
            ));
            queues.push((Atom::Integer(i64::from(*n)), Atom::NamedUuid(name)));
        }
        let qos_index = ops.len();
        ops.push(Operation::insert_named(
            "QoS",
            "qos",
            row([
                ("type", Datum::from(spec.qos_type.as_str())),
                ("other_config", Datum::from(&spec.other_config)),
                ("external_ids", Datum::from(&spec.external_ids)),
                ("queues", Datum::Map(queues)),
            ]),
        ));
        ops.push(Operation::update(
            "Port",
            vec![Condition::eq("name", port)],
            row([("qos", Datum::named_uuid("qos"))]),
        ));
        if let Some((q, qs)) = &old {
            ops.push(Operation::delete("QoS", vec![Condition::uuid(q)]));
            for u in qs {
                ops.push(Operation::delete("Queue", vec![Condition::uuid(u)]));
            }
        }
        let (results, next_cfg) = match self.transact_bumped(&root, ops).await {
            Ok(r) => r,
            Err(e) if not_found_guard(&e) => return Err(Error::PortNotFound(port.to_string())),
            Err(e) => return Err(e),
        };
        let uuid = results
            .get(qos_index)
            .and_then(|r| r.uuid.clone())
            .ok_or_else(|| Error::BadValue {
                table: "QoS".into(),
                column: "_uuid".into(),
                reason: "insert returned no uuid".into(),
            })?;
        self.wait_applied(&format!("QoS on port {port}"), next_cfg)
            .await?;
        Ok(uuid)
    }

    /// Deletes QoS row `uuid` and its queues, clearing `qos` of every port that references it,
    /// in one transaction. Deleting a row that is already gone is not an error.
    pub async fn delete_qos(&self, uuid: &str) -> Result<(), Error> {
        let (root, queues) = self.with_cache(|c| -> Result<_, Error> {
            let queues = c.row("QoS", uuid).map(queue_uuids).unwrap_or_default();
            Ok((root_uuid(c)?, queues))
        })?;
        let mut ops = vec![
            Operation::update(
                "Port",
                vec![Condition::new("qos", Function::Includes, Datum::uuid(uuid))],
                row([("qos", Datum::empty())]),
            ),
            Operation::delete("QoS", vec![Condition::uuid(uuid)]),
        ];
        for q in &queues {
            ops.push(Operation::delete("Queue", vec![Condition::uuid(q)]));
        }
        let (_, next_cfg) = self.transact_bumped(&root, ops).await?;
        self.wait_applied(&format!("deleting QoS {uuid}"), next_cfg)
            .await
    }

    /// Sets `external_ids` keys of QoS row `uuid` (other keys stay), in one transaction that
    /// ovs-vswitchd does not act on. A row that is gone is not an error.
    pub async fn set_qos_external_ids(
        &self,
        uuid: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let ops = [Operation::mutate(
            "QoS",
            vec![Condition::uuid(uuid)],
            vec![
                Mutation::delete("external_ids", Datum::set(ids.keys())),
                Mutation::insert("external_ids", Datum::from(ids)),
            ],
        )];
        self.transact(super::DB, &ops).await.map(drop)
    }

    /// QoS rows whose `external_ids:key` is `value`, from the cache, with the ports that use
    /// them.
    pub fn find_qos_by_external_id(&self, key: &str, value: &str) -> Vec<QosInfo> {
        self.with_cache(|c| {
            c.table("QoS")
                .filter_map(|q| {
                    let ids = q.string_map("external_ids");
                    if ids.get(key).map(String::as_str) != Some(value) {
                        return None;
                    }
                    let ports = c
                        .table("Port")
                        .filter(|p| p.uuid_ref("qos") == Some(q.uuid()))
                        .map(|p| p.name().to_string())
                        .collect();
                    Some(QosInfo {
                        uuid: q.uuid().to_string(),
                        qos_type: q.string("type").unwrap_or_default().to_string(),
                        other_config: q.string_map("other_config"),
                        external_ids: ids,
                        queues: q
                            .get("queues")
                            .map(|d| {
                                d.as_map()
                                    .iter()
                                    .filter_map(|(_, v)| v.as_uuid().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        ports,
                    })
                })
                .collect()
        })
    }
}

/// The Queue rows a QoS row references.
fn queue_uuids(qos: &super::cache::Row) -> Vec<String> {
    qos.get("queues")
        .map(|d| {
            d.as_map()
                .iter()
                .filter_map(|(_, v)| v.as_uuid().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
