//! OpenFlow groups (`all`, `select`, ...) as the agent writes and reads them: a group is an id,
//! a type and buckets of [`Action`]s. Their own module beside the actions they hold.

use super::actions::Action;

/// The select/all/indirect/fast-failover type of a group.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum GroupType {
    /// Every bucket.
    All,
    /// One bucket, chosen by hash (`select`).
    Select,
    /// The single bucket.
    Indirect,
    /// The first live bucket.
    FastFailover,
}

impl GroupType {
    /// The OpenFlow `ofp_group_type` code.
    pub fn code(self) -> u8 {
        match self {
            GroupType::All => 0,
            GroupType::Select => 1,
            GroupType::Indirect => 2,
            GroupType::FastFailover => 3,
        }
    }

    /// From the OpenFlow code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => GroupType::All,
            1 => GroupType::Select,
            2 => GroupType::Indirect,
            3 => GroupType::FastFailover,
            _ => return None,
        })
    }

    /// The name `ovs-ofctl` uses.
    pub fn name(self) -> &'static str {
        match self {
            GroupType::All => "all",
            GroupType::Select => "select",
            GroupType::Indirect => "indirect",
            GroupType::FastFailover => "ff",
        }
    }
}

/// One bucket of a group.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Bucket {
    /// Relative weight (select groups).
    pub weight: u16,
    /// Actions of the bucket.
    pub actions: Vec<Action>,
}

/// A group table entry.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Group {
    /// Group id.
    pub id: u32,
    /// Group type.
    pub kind: GroupType,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

impl Group {
    /// A `select` group: one bucket per action list, equal weights.
    pub fn select(id: u32, buckets: Vec<Vec<Action>>) -> Self {
        Group {
            id,
            kind: GroupType::Select,
            buckets: buckets
                .into_iter()
                .map(|actions| Bucket {
                    weight: 100,
                    actions,
                })
                .collect(),
        }
    }
}
