//! The agent's local API as its clients see it: the requests and answers of the root-only
//! Unix socket (`apiSocket`) and a client for it. `sdnctl` links this crate and the `cluster`
//! crate, not the agent: an operator's command line carries no datapath code.
//!
//! - [`wire`]: the answers of `/v1/status`, `/v1/pods`, `/v1/namespaces`, `/v1/flows`,
//!   `/v1/egress-firewall`, `/v1/egress-ips`, `/v1/network-policies`.
//! - [`trace`]: `POST /v1/trace`'s request and answer.
//! - [`client`]: [`Client`], one request per call, errors that say what to do.
//!
//! The endpoints themselves are the agent's (`agent::operator::api`).

pub mod client;
pub mod trace;
pub mod wire;

pub use client::{Client, ClientError};
pub use trace::{
    LiveEvent, LiveHop, LiveRemote, LiveTrace, Outcome, Step, TraceRequest, TraceResult, VxlanHop,
};
pub use wire::{
    BandwidthEntry, Check, EgressAction, EgressEntry, EgressFamily, EgressIpEntry, EgressIpState,
    EgressIpUse, EgressIpsView, EgressKind, EgressRuleEntry, FeatureLine, FlowEntry,
    IsolationEntry, NamespaceEntry, NetworkPoliciesView, NodeReach, PodEntry, ReconcileRecord,
    Status,
};
