//! The resolver of egress firewalls' `dnsName` rules ([`EgressDns`]) and how the firewalls
//! follow its answers: every name resolved once at start (at most 2 s, so a restart keeps the
//! rules' rows), then again when its answer's TTL ends ([`EgressFirewalls::follow_dns`]),
//! bounded as openshift-sdn bounded it ([`normalize_ttl`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::EgressFirewalls;
use crate::bridge::seams::FlowSwitch;

/// How long an answer counts, as openshift-sdn bounded it: a TTL under 30 s as given (at least
/// 1 s), up to 30 minutes → 30 s, longer → 30 minutes.
pub(crate) fn normalize_ttl(ttl: Duration) -> Duration {
    if ttl < Duration::from_secs(30) {
        ttl.max(Duration::from_secs(1))
    } else if ttl >= Duration::from_secs(30 * 60) {
        Duration::from_secs(30 * 60)
    } else {
        Duration::from_secs(30)
    }
}

/// How soon a failed lookup is tried again (openshift-sdn's default TTL).
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The resolver of `dnsName` rules (see the module docs).
#[derive(Debug)]
pub(crate) struct EgressDns {
    resolver: hickory_resolver::TokioResolver,
    source: String,
    /// Ask for AAAA records too (a dual-stack node: IPv6 rows of the rule).
    ipv6: bool,
}

/// Why the `dnsName` rules' resolver cannot be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DnsConfigError(String);

impl EgressDns {
    /// A resolver asking `servers` (`IP` or `IP:PORT`, UDP then TCP), or the node's
    /// `/etc/resolv.conf` when empty; for AAAA records as well as A records when `ipv6` (a
    /// dual-stack node). Answers are not cached: each lookup asks.
    pub(crate) fn new(servers: &[String], ipv6: bool) -> Result<EgressDns, DnsConfigError> {
        use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
        use hickory_resolver::name_server::TokioConnectionProvider;
        let (config, mut opts, source) = if servers.is_empty() {
            let (c, o) = hickory_resolver::system_conf::read_system_conf().map_err(|e| {
                DnsConfigError(format!(
                    "reading /etc/resolv.conf for dnsName egress rules: {e}"
                ))
            })?;
            (c, o, "/etc/resolv.conf".to_string())
        } else {
            let mut addrs = Vec::new();
            for s in servers {
                let a: std::net::SocketAddr = s
                    .parse()
                    .or_else(|_| s.parse::<std::net::IpAddr>().map(|ip| (ip, 53).into()))
                    .map_err(|_| {
                        DnsConfigError(format!("egressDNSServers {s:?}: expected IP or IP:PORT"))
                    })?;
                addrs.push(a);
            }
            let mut group = NameServerConfigGroup::new();
            for a in &addrs {
                group.merge(NameServerConfigGroup::from_ips_clear(
                    &[a.ip()],
                    a.port(),
                    true,
                ));
            }
            (
                ResolverConfig::from_parts(None, Vec::new(), group),
                ResolverOpts::default(),
                servers.join(", "),
            )
        };
        opts.cache_size = 0;
        opts.timeout = Duration::from_secs(2);
        opts.attempts = 2;
        let resolver = hickory_resolver::Resolver::builder_with_config(
            config,
            TokioConnectionProvider::default(),
        )
        .with_options(opts)
        .build();
        Ok(EgressDns {
            resolver,
            source,
            ipv6,
        })
    }

    /// Where it asks.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The addresses of `name` (IPv4; and IPv6 on a dual-stack node) and how long they count
    /// (normalized, the shorter of the two answers'), or why not.
    pub(crate) async fn resolve(&self, name: &str) -> Result<(BTreeSet<IpAddr>, Duration), String> {
        let fqdn = if name.ends_with('.') {
            name.to_string()
        } else {
            format!("{name}.")
        };
        let mut found = match self.resolver.ipv4_lookup(fqdn.as_str()).await {
            Ok(l) => {
                let ttl = l.valid_until().saturating_duration_since(Instant::now());
                let addrs: BTreeSet<IpAddr> = l.iter().map(|a| IpAddr::V4(a.0)).collect();
                (addrs, normalize_ttl(ttl))
            }
            Err(e) if e.is_no_records_found() => (BTreeSet::new(), RETRY_AFTER),
            Err(e) => return Err(e.to_string()),
        };
        if self.ipv6 {
            match self.resolver.ipv6_lookup(fqdn.as_str()).await {
                Ok(l) => {
                    let ttl = l.valid_until().saturating_duration_since(Instant::now());
                    found.0.extend(l.iter().map(|a| IpAddr::V6(a.0)));
                    found.1 = found.1.min(normalize_ttl(ttl));
                }
                Err(e) if e.is_no_records_found() => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(found)
    }
}

impl<S: FlowSwitch> EgressFirewalls<S> {
    /// Resolves every name the policies use once, all at once, giving up after `within`: at
    /// start, before the first reconcile, so a restart does not take a dnsName rule's rows off
    /// the bridge while its name is looked up again. Returns how many names resolved.
    pub(crate) async fn seed_dns(&self, dns: &EgressDns, within: Duration) -> usize {
        let names: Vec<String> = self.dns_names().into_iter().collect();
        let lookups = futures::future::join_all(names.iter().map(|n| dns.resolve(n)));
        let Ok(answers) = tokio::time::timeout(within, lookups).await else {
            tracing::warn!(names = names.len(), "egress dnsName lookups at start took longer than {} s; their rules fill in as the answers come", within.as_secs());
            return 0;
        };
        let mut ok = 0;
        let lookups = &crate::telemetry::metrics::metrics().egress_dns_lookups;
        for (name, answer) in names.iter().zip(answers) {
            match answer {
                Ok((addrs, _)) => {
                    let new = self.set_resolved(name, &addrs);
                    lookups
                        .with_label_values(&[if new { "changed" } else { "unchanged" }])
                        .inc();
                    ok += 1;
                }
                Err(_) => lookups.with_label_values(&["failed"]).inc(),
            }
        }
        ok
    }

    /// Keeps the `dnsName` rules' addresses current until the task is dropped: resolves every
    /// name the policies use when it appears and again when its answer expires, and re-syncs
    /// the firewalls (without pruning, see [`Self::sync`]) when an address set changed.
    pub(crate) async fn follow_dns(self: Arc<Self>, dns: EgressDns) {
        let mut due: BTreeMap<String, Instant> = BTreeMap::new();
        let mut cluster = self.cluster.clone();
        loop {
            let names = self.dns_names();
            due.retain(|n, _| names.contains(n));
            self.retain_names(&names);
            let now = Instant::now();
            let mut changed = Vec::new();
            for name in &names {
                if due.get(name).is_some_and(|t| *t > now) {
                    continue;
                }
                let lookups = &crate::telemetry::metrics::metrics().egress_dns_lookups;
                let next = match dns.resolve(name).await {
                    Ok((addrs, ttl)) => {
                        let new = self.set_resolved(name, &addrs);
                        lookups
                            .with_label_values(&[if new { "changed" } else { "unchanged" }])
                            .inc();
                        if new {
                            tracing::info!(name = %name, addresses = %addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), ttl_s = ttl.as_secs(), "egress dnsName resolved to new addresses");
                            changed.push(name.clone());
                        }
                        ttl
                    }
                    Err(e) => {
                        lookups.with_label_values(&["failed"]).inc();
                        tracing::warn!(name = %name, server = %dns.source(), error = %e, "resolving an egress dnsName failed; keeping its last addresses, retrying in 30 s");
                        RETRY_AFTER
                    }
                };
                due.insert(name.clone(), Instant::now() + next);
            }
            if !changed.is_empty() {
                if let Err(e) = self.sync(false).await {
                    tracing::warn!(error = %e, names = %changed.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), "applying egress firewall rows for new DNS answers failed; retrying at the next change");
                }
            }
            let wake = due.values().min().map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            tokio::select! {
                () = tokio::time::sleep(wake) => {}
                r = cluster.changed() => if r.is_err() { return },
            }
        }
    }
}
