//! Which namespaces want their isolation decisions logged, and at what severity: the
//! `k8s.ovn.org/acl-logging` annotation, read exactly as OVN-Kubernetes reads it, so a cluster
//! moving between the two keeps its settings.
//!
//! The annotation is JSON: `{"deny": "alert", "allow": "notice"}` (a `"pass"` key is read too,
//! for cluster-wide policies that hand a decision on). Each value is a syslog severity
//! (`alert`, `warning`, `notice`, `info`, `debug`); an empty or missing value turns that
//! verdict's lines off. What OVN-Kubernetes does with bad input, this does too, and says so:
//! a value that is not JSON turns logging off for the namespace; a value that is not a
//! severity turns that verdict off. Either way isolation itself is untouched, and the problem
//! is kept with the setting so the agent logs it and `sdnctl` shows it.
//!
//! Where the annotation lives: on the Namespace in Kubernetes mode (as OVN-Kubernetes has it),
//! on the NetNamespace in standalone mode (the one object a standalone namespace has; `sdnctl
//! audit-logging` writes it). A ClusterNetworkPolicy carries its own, as OVN-Kubernetes reads
//! it on an AdminNetworkPolicy (`deny`, `allow`, `pass`): its rules' decisions are logged by
//! what the policy says, whatever the namespaces say.

use std::collections::BTreeMap;
use std::fmt;

/// The annotation, on a Namespace (Kubernetes mode) or a NetNamespace (standalone mode).
pub const ACL_LOGGING_ANNOTATION: &str = "k8s.ovn.org/acl-logging";

/// A syslog severity (RFC 5424), as the annotation names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// `alert` (1).
    Alert,
    /// `warning` (4).
    Warning,
    /// `notice` (5).
    Notice,
    /// `info` (6).
    Info,
    /// `debug` (7).
    Debug,
}

impl Severity {
    /// Every severity the annotation accepts, most severe first.
    pub const ALL: [Severity; 5] = [
        Severity::Alert,
        Severity::Warning,
        Severity::Notice,
        Severity::Info,
        Severity::Debug,
    ];

    /// The name in the annotation and in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Alert => "alert",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
            Severity::Info => "info",
            Severity::Debug => "debug",
        }
    }

    /// The RFC 5424 severity number.
    pub fn code(self) -> u8 {
        match self {
            Severity::Alert => 1,
            Severity::Warning => 4,
            Severity::Notice => 5,
            Severity::Info => 6,
            Severity::Debug => 7,
        }
    }

    /// The severity a name gives (`None` for anything else).
    pub fn parse(s: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|v| v.name() == s)
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One namespace's logging: the severity of each verdict's lines, `None` where that verdict
/// is not logged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AclLogging {
    /// Denied connections.
    pub deny: Option<Severity>,
    /// Allowed connections.
    pub allow: Option<Severity>,
    /// Connections a cluster-wide policy passed on to the next tier.
    pub pass: Option<Severity>,
}

impl AclLogging {
    /// Whether anything is logged.
    pub fn any(&self) -> bool {
        self.deny.is_some() || self.allow.is_some() || self.pass.is_some()
    }

    /// The annotation value that gives this setting (`{}` for none).
    pub fn to_annotation(&self) -> String {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("deny", self.deny),
            ("allow", self.allow),
            ("pass", self.pass),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.name().into());
            }
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// A namespace's annotation as read: what it turns on, and what was wrong with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditSetting {
    /// What is logged.
    pub logging: AclLogging,
    /// What was wrong with the annotation (that part is off), for the log and `sdnctl`.
    pub problem: Option<String>,
}

/// Reads an annotation value as OVN-Kubernetes does (see the module docs).
pub fn parse_acl_logging(value: &str) -> AuditSetting {
    let off = |why: String| AuditSetting {
        logging: AclLogging::default(),
        problem: Some(why),
    };
    let json: serde_json::Value = match serde_json::from_str(value) {
        Ok(v) => v,
        Err(e) => {
            return off(format!(
                "{ACL_LOGGING_ANNOTATION} is not JSON ({e}): logging is off for it; \
                 write it as {{\"deny\": \"alert\", \"allow\": \"notice\"}}"
            ))
        }
    };
    let Some(obj) = json.as_object() else {
        return off(format!(
            "{ACL_LOGGING_ANNOTATION} must be a JSON object such as {{\"deny\": \"alert\"}}, \
             not {json}: logging is off for it"
        ));
    };
    let mut logging = AclLogging::default();
    let mut problems = Vec::new();
    for (key, v) in obj {
        let slot = match key.as_str() {
            "deny" => &mut logging.deny,
            "allow" => &mut logging.allow,
            "pass" => &mut logging.pass,
            other => {
                problems.push(format!(
                    "unknown verdict {other:?} (deny, allow or pass) ignored"
                ));
                continue;
            }
        };
        match v.as_str() {
            Some("") => {}
            Some(s) => match Severity::parse(s) {
                Some(sev) => *slot = Some(sev),
                None => problems.push(format!(
                    "{key}: {s:?} is not a severity (alert, warning, notice, info or debug): \
                     {key} lines are off"
                )),
            },
            None => problems.push(format!(
                "{key}: {v} is not a severity string: {key} lines are off"
            )),
        }
    }
    AuditSetting {
        logging,
        problem: (!problems.is_empty())
            .then(|| format!("{ACL_LOGGING_ANNOTATION}: {}", problems.join("; "))),
    }
}

/// What each namespace logs, as the flow builders take it, by name (only namespaces that
/// log something).
pub fn logged_by_namespace(state: &crate::ClusterState) -> BTreeMap<String, flows::audit::Logged> {
    state
        .audit_logging
        .iter()
        .map(|(ns, s)| {
            (
                ns.clone(),
                flows::audit::Logged {
                    deny: s.logging.deny.is_some(),
                    allow: s.logging.allow.is_some(),
                },
            )
        })
        .filter(|(_, l)| l.any())
        .collect()
}

/// What each VNID's namespaces log (a VNID logs a verdict when one of its namespaces does).
pub fn logged_by_vnid(
    state: &crate::ClusterState,
) -> BTreeMap<multitenant::Vnid, flows::audit::Logged> {
    let mut out: BTreeMap<multitenant::Vnid, flows::audit::Logged> = BTreeMap::new();
    for (ns, l) in logged_by_namespace(state) {
        let Some(v) = state.vnid(&ns) else { continue };
        let e = out.entry(v).or_default();
        e.deny |= l.deny;
        e.allow |= l.allow;
    }
    out
}

/// The annotation's value on an object, if it has one.
pub fn annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    meta.annotations
        .as_ref()?
        .get(ACL_LOGGING_ANNOTATION)
        .cloned()
}

/// Reads the annotations of `annotated` (namespace → value) into `into`, replacing it only
/// when the settings changed (consumers compare the map by pointer first).
pub fn read_into(
    into: &mut std::sync::Arc<BTreeMap<String, AuditSetting>>,
    annotated: &BTreeMap<String, String>,
) {
    let now = read_all(annotated.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if **into != now {
        *into = std::sync::Arc::new(now);
    }
}

/// The settings of every namespace whose objects carry the annotation, from `(namespace,
/// annotation value)` pairs.
pub fn read_all<'a>(
    annotated: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, AuditSetting> {
    annotated
        .into_iter()
        .map(|(ns, v)| (ns.to_string(), parse_acl_logging(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_reads_as_ovn_kubernetes_reads_it() {
        let s = parse_acl_logging(r#"{"deny": "alert", "allow": "notice"}"#);
        assert_eq!(
            s.logging,
            AclLogging {
                deny: Some(Severity::Alert),
                allow: Some(Severity::Notice),
                pass: None
            }
        );
        assert_eq!(s.problem, None);
        // Empty values and missing keys are off, without a problem.
        let s = parse_acl_logging(r#"{"deny": "", "allow": "info"}"#);
        assert_eq!(s.logging.deny, None);
        assert_eq!(s.logging.allow, Some(Severity::Info));
        assert_eq!(s.problem, None);
        assert_eq!(parse_acl_logging("{}").logging, AclLogging::default());
        // Every severity.
        for sev in Severity::ALL {
            let s = parse_acl_logging(&format!(r#"{{"deny":"{sev}"}}"#));
            assert_eq!(s.logging.deny, Some(sev));
        }
        assert_eq!(Severity::Warning.code(), 4);
    }

    #[test]
    fn bad_annotations_turn_off_what_they_spoil_and_say_so() {
        // Not JSON: everything off.
        let s = parse_acl_logging(r#"{"deny": "alert""#);
        assert_eq!(s.logging, AclLogging::default());
        assert!(s.problem.as_deref().unwrap().contains("not JSON"), "{s:?}");
        let s = parse_acl_logging(r#"["deny"]"#);
        assert_eq!(s.logging, AclLogging::default());
        assert!(s.problem.unwrap().contains("JSON object"));
        // A bad value: that verdict off, the other kept.
        let s = parse_acl_logging(r#"{"deny": "loud", "allow": "notice"}"#);
        assert_eq!(s.logging.deny, None);
        assert_eq!(s.logging.allow, Some(Severity::Notice));
        let p = s.problem.unwrap();
        assert!(p.contains("deny") && p.contains("\"loud\""), "{p}");
        let s = parse_acl_logging(r#"{"deny": 3}"#);
        assert_eq!(s.logging.deny, None);
        assert!(s.problem.unwrap().contains("not a severity string"));
        // An unknown key is named and ignored.
        let s = parse_acl_logging(r#"{"drop": "alert", "deny": "info"}"#);
        assert_eq!(s.logging.deny, Some(Severity::Info));
        assert!(s.problem.unwrap().contains("\"drop\""));
    }

    #[test]
    fn a_setting_writes_back_as_the_annotation_it_came_from() {
        let l = AclLogging {
            deny: Some(Severity::Alert),
            allow: None,
            pass: Some(Severity::Debug),
        };
        assert_eq!(parse_acl_logging(&l.to_annotation()).logging, l);
        assert_eq!(AclLogging::default().to_annotation(), "{}");
    }
}
