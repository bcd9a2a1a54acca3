//! Tenant administration, decided purely: what `sdnctl create/join/isolate/make-global/delete`
//! does to a namespace's VNID, given the cluster's [`Tenancy`] and what is known about the
//! node's pods. The agent's `tenants` module only reads the state directory into a `Tenancy`
//! (with [`Tenancy::hold`] for VNIDs pods still use and [`Tenancy::resume_after`] for the walk),
//! calls [`decide`], and writes the NetNamespace the decision names.

use crate::{Change, Error, Tenancy, Vnid};

/// A tenant command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Create a namespace: a fresh VNID, VNID 0 with `global`, or the tenant VNID `vnid` (one
    /// another network agent gave it, e.g. openshift-sdn's random VNIDs), refused while a
    /// namespace holds it.
    Create {
        /// The namespace.
        name: String,
        /// VNID 0 instead of a fresh one.
        global: bool,
        /// This tenant VNID instead of a fresh one.
        vnid: Option<Vnid>,
    },
    /// `name` takes `other`'s VNID.
    Join {
        /// The namespace that changes.
        name: String,
        /// The namespace whose VNID it takes.
        other: String,
    },
    /// A fresh VNID of its own (unless it is already alone on one).
    Isolate {
        /// The namespace.
        name: String,
    },
    /// VNID 0.
    MakeGlobal {
        /// The namespace.
        name: String,
    },
    /// Delete the NetNamespace; refused while local pods use it unless `force`.
    Delete {
        /// The namespace.
        name: String,
        /// Delete even with local pods (or when they cannot be counted).
        force: bool,
    },
}

impl Command {
    /// The namespace the command changes.
    pub fn name(&self) -> &str {
        match self {
            Command::Create { name, .. }
            | Command::Join { name, .. }
            | Command::Isolate { name }
            | Command::MakeGlobal { name }
            | Command::Delete { name, .. } => name,
        }
    }

    /// Whether the command needs local pod information: to keep VNIDs held by pods out of
    /// allocation (create, isolate) or to refuse a delete while pods remain.
    pub fn needs_pods(&self) -> bool {
        matches!(
            self,
            Command::Create { global: false, .. }
                | Command::Isolate { .. }
                | Command::Delete { .. }
        )
    }
}

/// What the command does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The VNID before (`None`: created).
    pub from: Option<Vnid>,
    /// The VNID after (`None`: deleted).
    pub to: Option<Vnid>,
    /// What happened, e.g. `joined tenant-a`, `isolated`, `already global`.
    pub reason: String,
    /// Whether anything changes.
    pub changed: bool,
    /// A VNID freshly allocated (create of a tenant, isolate).
    pub allocated: Option<Vnid>,
}

/// Why a command is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `create` of a namespace that exists.
    Exists(Vnid),
    /// `create --vnid` of a VNID other namespaces hold (named), or one that is not a tenant
    /// VNID (none named).
    VnidTaken {
        /// The VNID asked for.
        vnid: u32,
        /// The namespaces holding it.
        holders: Vec<String>,
    },
    /// A namespace the command needs has no VNID.
    Unknown(String),
    /// `isolate` of `default`.
    CannotIsolateDefault,
    /// `delete` of `default`.
    CannotDeleteDefault,
    /// `join` of a namespace with itself.
    JoinSelf,
    /// `delete` while local pods use the namespace.
    HasPods {
        /// How many.
        pods: usize,
        /// Its VNID.
        vnid: Vnid,
    },
    /// `delete` when the local pods cannot be counted, without `force`.
    PodsUnknown(String),
    /// No tenant VNID is free.
    Exhausted(String),
}

/// Local pods of the namespace a command changes: counted, or unknown and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodsOfNamespace<'a> {
    /// How many pods of the namespace run on this node.
    Known(usize),
    /// Why they could not be counted.
    Unknown(&'a str),
}

/// Decides `cmd` against `tenancy`, updating it as the command would.
pub fn decide(
    tenancy: &mut Tenancy,
    cmd: &Command,
    pods: PodsOfNamespace<'_>,
) -> Result<Decision, Refusal> {
    let name = cmd.name();
    let current = tenancy.vnid(name);
    match cmd {
        Command::Create {
            vnid: Some(asked), ..
        } => create_with(tenancy, name, current, *asked),
        Command::Create { global, .. } => {
            if let Some(v) = current {
                return Err(Refusal::Exists(v));
            }
            let v = tenancy.add(name).map_err(refusal)?;
            Ok(Decision {
                from: None,
                to: Some(v),
                reason: if v.is_global() {
                    "global".into()
                } else {
                    "a tenant of its own".into()
                },
                changed: true,
                allocated: (!global).then_some(v),
            })
        }
        Command::Delete { force, .. } => delete(tenancy, name, current, *force, pods),
        Command::Join { other, .. } => join(tenancy, name, current, other),
        Command::Isolate { .. } | Command::MakeGlobal { .. } => isolate_or_make_global(
            tenancy,
            name,
            current,
            matches!(cmd, Command::Isolate { .. }),
        ),
    }
}

/// A tenancy error as the refusal an operator reads.
fn refusal(e: Error) -> Refusal {
    match e {
        Error::UnknownNamespace(n) => Refusal::Unknown(n),
        Error::CannotIsolateDefault => Refusal::CannotIsolateDefault,
        Error::JoinSelf(_) => Refusal::JoinSelf,
        other => Refusal::Exhausted(other.to_string()),
    }
}

/// `create --vnid`: a new namespace with the VNID asked for, when no namespace holds it.
fn create_with(
    tenancy: &mut Tenancy,
    name: &str,
    current: Option<Vnid>,
    asked: Vnid,
) -> Result<Decision, Refusal> {
    if let Some(v) = current {
        return Err(Refusal::Exists(v));
    }
    let holders: Vec<String> = if asked.is_tenant() {
        tenancy
            .members(asked)
            .into_iter()
            .map(str::to_string)
            .collect()
    } else {
        Vec::new()
    };
    if !holders.is_empty() || !asked.is_tenant() {
        return Err(Refusal::VnidTaken {
            vnid: asked.id(),
            holders,
        });
    }
    let held = tenancy.in_use().contains(&asked);
    tenancy.assign(name, asked);
    Ok(Decision {
        from: None,
        to: Some(asked),
        reason: if held {
            "the VNID asked for, which local pods of no namespace have: they share its network \
             now, but keep this VNID if the namespace's changes later"
                .into()
        } else {
            "the VNID asked for".into()
        },
        changed: true,
        allocated: None,
    })
}

/// `delete`: refused for `default`, and while local pods run in it unless forced.
fn delete(
    tenancy: &mut Tenancy,
    name: &str,
    current: Option<Vnid>,
    force: bool,
    pods: PodsOfNamespace<'_>,
) -> Result<Decision, Refusal> {
    if name == "default" {
        return Err(Refusal::CannotDeleteDefault);
    }
    let vnid = current.ok_or_else(|| Refusal::Unknown(name.to_string()))?;
    let reason = match pods {
        PodsOfNamespace::Known(0) => "no local pods".to_string(),
        PodsOfNamespace::Known(n) if !force => return Err(Refusal::HasPods { pods: n, vnid }),
        PodsOfNamespace::Known(n) => {
            format!("forced: its {n} local pod(s) keep VNID {vnid} until deleted")
        }
        PodsOfNamespace::Unknown(why) if !force => {
            return Err(Refusal::PodsUnknown(why.to_string()))
        }
        PodsOfNamespace::Unknown(_) => {
            format!("forced: any local pods keep VNID {vnid} until deleted")
        }
    };
    tenancy.remove(name);
    Ok(Decision {
        from: Some(vnid),
        to: None,
        reason,
        changed: true,
        allocated: None,
    })
}

/// `join`: the namespace takes `other`'s VNID.
fn join(
    tenancy: &mut Tenancy,
    name: &str,
    current: Option<Vnid>,
    other: &str,
) -> Result<Decision, Refusal> {
    let from = current.ok_or_else(|| Refusal::Unknown(name.to_string()))?;
    if other == name {
        return Err(Refusal::JoinSelf);
    }
    let to = tenancy
        .apply(name, &Change::Join(other.to_string()))
        .map_err(refusal)?;
    let global = if to.is_global() {
        ", which is global"
    } else {
        ""
    };
    Ok(Decision {
        from: Some(from),
        to: Some(to),
        reason: if from == to {
            format!("already shares {other}'s VNID{global}")
        } else {
            format!("joined {other}{global}")
        },
        changed: from != to,
        allocated: None,
    })
}

/// `isolate` (a fresh VNID of its own; refused for `default`) or `make-global` (VNID 0).
fn isolate_or_make_global(
    tenancy: &mut Tenancy,
    name: &str,
    current: Option<Vnid>,
    isolate: bool,
) -> Result<Decision, Refusal> {
    if isolate && name == "default" {
        return Err(Refusal::CannotIsolateDefault);
    }
    let from = current.ok_or_else(|| Refusal::Unknown(name.to_string()))?;
    let (op, done) = if isolate {
        (Change::Isolate, "isolated")
    } else {
        (Change::Global, "made global")
    };
    let to = tenancy.apply(name, &op).map_err(refusal)?;
    Ok(Decision {
        from: Some(from),
        to: Some(to),
        reason: match (from == to, isolate) {
            (true, true) => "already isolated".into(),
            (true, false) => "already global".into(),
            (false, _) => done.into(),
        },
        changed: from != to,
        // Only isolate hands out a fresh VNID (make-global takes 0).
        allocated: (isolate && from != to).then_some(to),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenancy() -> Tenancy {
        let mut t = Tenancy::new(Vec::<String>::new());
        t.load([("default", 0), ("a", 10), ("b", 11)]).unwrap();
        t
    }

    fn v(n: u32) -> Vnid {
        Vnid::new(n).unwrap()
    }

    #[test]
    fn every_command_decides_and_refuses_as_sdnctl_reports() {
        let mut t = tenancy();
        let d = decide(
            &mut t,
            &Command::Create {
                name: "c".into(),
                global: false,
                vnid: None,
            },
            PodsOfNamespace::Known(0),
        )
        .unwrap();
        assert_eq!(
            (d.from, d.to, d.allocated),
            (None, Some(v(12)), Some(v(12)))
        );
        let d = decide(
            &mut t,
            &Command::Join {
                name: "b".into(),
                other: "a".into(),
            },
            PodsOfNamespace::Known(0),
        )
        .unwrap();
        assert_eq!(
            (d.to, d.reason.as_str(), d.changed),
            (Some(v(10)), "joined a", true)
        );
        let d = decide(
            &mut t,
            &Command::MakeGlobal { name: "c".into() },
            PodsOfNamespace::Known(0),
        )
        .unwrap();
        assert_eq!((d.to, d.allocated), (Some(Vnid::GLOBAL), None));
        assert_eq!(
            decide(
                &mut t,
                &Command::Isolate {
                    name: "default".into()
                },
                PodsOfNamespace::Known(0)
            ),
            Err(Refusal::CannotIsolateDefault)
        );
        assert_eq!(
            decide(
                &mut t,
                &Command::Delete {
                    name: "a".into(),
                    force: false
                },
                PodsOfNamespace::Known(2)
            ),
            Err(Refusal::HasPods {
                pods: 2,
                vnid: v(10)
            })
        );
        assert_eq!(
            decide(
                &mut t,
                &Command::Delete {
                    name: "a".into(),
                    force: false
                },
                PodsOfNamespace::Unknown("no ovsdb")
            ),
            Err(Refusal::PodsUnknown("no ovsdb".into()))
        );
        let d = decide(
            &mut t,
            &Command::Delete {
                name: "a".into(),
                force: true,
            },
            PodsOfNamespace::Known(2),
        )
        .unwrap();
        assert!(d.reason.contains("keep VNID 10"), "{}", d.reason);
        assert_eq!(t.vnid("a"), None);
        assert_eq!(
            decide(
                &mut t,
                &Command::Isolate { name: "zz".into() },
                PodsOfNamespace::Known(0)
            ),
            Err(Refusal::Unknown("zz".into()))
        );
    }
}
