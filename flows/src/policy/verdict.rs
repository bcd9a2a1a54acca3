//! What a packet a policy rule's row matches gets ([`Verdict`]), as row actions: allow (with
//! the commit of the mode, and a NetworkPolicy namespace's logging twin), deny, or an Admin
//! Pass; and a logged ClusterNetworkPolicy rule's rows. Its own file because every part kind
//! (NetworkPolicy, ClusterNetworkPolicy, their plain and conjunction rows) ends here, and the
//! audit's split of a logged rule's row is decided in one place.

use multitenant::cluster_policy::{Action as CnpAction, LoggedActions};
use multitenant::policy::Direction;
use ovs::flow::Flow;

use super::{allow_rows, RuleCtx};
use crate::audit::{self, Decision};

/// What a packet a part matches gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Let through (a NetworkPolicy rule, an Accept, a Baseline Pass).
    Allow,
    /// Dropped.
    Deny,
    /// The rest of the Admin tier passed: the `reg4` bits set, the table looked up again.
    Pass(u32),
}

/// The actions of a row that gives `verdict` (its logging twin too, for an allow that logs).
pub(super) fn verdict_rows(
    flow: Flow,
    verdict: Verdict,
    ctx: &RuleCtx,
    rule: Option<u32>,
) -> Vec<Flow> {
    if let Some(log) = ctx.cluster_log {
        if let Some(rows) = cluster_logged_rows(&flow, verdict, log, ctx, rule) {
            return rows;
        }
    }
    match verdict {
        Verdict::Allow => allow_rows(flow, ctx, rule),
        Verdict::Deny => vec![flow],
        Verdict::Pass(bits) => {
            let table = flow.table;
            vec![flow.actions(crate::base::pass_actions(bits, table))]
        }
    }
}

/// A ClusterNetworkPolicy rule's row when its policy logs its action (`None` otherwise): a
/// Deny logs every packet it drops (metered; the agent folds a connection's copies into one
/// line); an Accept or Pass logs a connection's first packet only, by a row at the same
/// priority for `+new+trk` beside the row for `-new+trk` (the two cannot both match, and
/// every IP packet is tracked by table 0). The twin one priority above that NetworkPolicy
/// rows use would meet the rule ranked just above.
fn cluster_logged_rows(
    flow: &Flow,
    verdict: Verdict,
    log: LoggedActions,
    ctx: &RuleCtx,
    rule: Option<u32>,
) -> Option<Vec<Flow>> {
    let ingress = ctx.d == Direction::Ingress;
    let (logged, action) = match verdict {
        Verdict::Deny => (log.deny, CnpAction::Deny),
        Verdict::Allow => (log.allow, CnpAction::Accept),
        Verdict::Pass(_) => (log.pass, CnpAction::Pass),
    };
    if !logged {
        return None;
    }
    let logging = audit::log_actions(Decision::cluster(ingress, action), 0, rule);
    let unlogged = RuleCtx {
        cluster_log: None,
        ..*ctx
    };
    if verdict == Verdict::Deny {
        let mut f = flow.clone();
        f.actions = logging;
        return Some(vec![f]);
    }
    let split = |flags: ovs::flow::CtState| {
        let mut f = flow.clone();
        f.matches = f.matches.ct_state(flags);
        f
    };
    let mut first = split(audit::new_connection());
    first.actions = logging;
    let mut first = verdict_rows(first, verdict, &unlogged, rule);
    first.extend(verdict_rows(
        split(audit::later_packet()),
        verdict,
        &unlogged,
        rule,
    ));
    Some(first)
}
