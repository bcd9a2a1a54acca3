//! Why the node's wiring failed: the step that failed, with its cause ([`NodeError::Step`]),
//! or a refusal that says what to do ([`NodeError::Refused`]). Start-up, the hand-back and the
//! takeover are sequences of steps over several clients (OVSDB, OpenFlow, netlink, iptables,
//! files, the cluster state); each client's error is typed, and this error names the step it
//! failed in, so `sdn-agent` prints `opening OpenFlow to /run/openvswitch/br0.mgmt: ...`.
//!
//! The cause stays the error's `source`: a binary printing the chain (`{:#}` through anyhow,
//! or [`chain`](crate::features::contract::chain)) shows every level once.

use std::fmt::Display;

/// A boxed cause.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the node's wiring failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A step failed.
    #[error("{step}")]
    Step {
        /// The step, and the object it worked on.
        step: String,
        /// The cause.
        #[source]
        source: Cause,
    },
    /// The node is not in a state the agent can work with, and what to do about it.
    #[error("{0}")]
    Refused(String),
}

/// The node's results.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;

/// Names the step a result belongs to.
pub trait Step<T> {
    /// On error, the step `what` failed with it.
    fn step(self, what: impl Display) -> Result<T>;
    /// On error, the step `what()` failed with it (computed only then).
    fn with_step<D: Display>(self, what: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: Into<Cause>> Step<T> for std::result::Result<T, E> {
    fn step(self, what: impl Display) -> Result<T> {
        self.map_err(|e| NodeError::Step {
            step: what.to_string(),
            source: e.into(),
        })
    }

    fn with_step<D: Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|e| NodeError::Step {
            step: what().to_string(),
            source: e.into(),
        })
    }
}

impl<T> Step<T> for Option<T> {
    fn step(self, what: impl Display) -> Result<T> {
        self.ok_or_else(|| NodeError::Refused(what.to_string()))
    }

    fn with_step<D: Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.ok_or_else(|| NodeError::Refused(what().to_string()))
    }
}

/// Returns a [`NodeError::Refused`] with a formatted message.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::node::error::NodeError::Refused(format!($($t)*)))
    };
}
pub(crate) use bail;
