//! Checks of everything under `deploy/` that Kubernetes will read: the generated CRDs are what
//! `sdn-agent crds` prints today, every manifest is a well-formed Kubernetes object of a known
//! type without unknown or mistyped fields, and the manifests fit the agent: least-privilege RBAC,
//! the DaemonSet mounts every host path its configuration uses (at the same path), the agent
//! and the controller accept their command lines and shared configuration, the ClusterNetwork the
//! controller creates from it passes its CRD, and the Containerfile builds the binaries the
//! manifests run.
//!
//! How "no unknown fields" works: k8s-openapi's types ignore fields they do not know (the API
//! server would prune or reject them), so each document is deserialized into its type (with
//! `serde_path_to_error`, so a type error names its path), serialized again, and every field of
//! the original must survive with the same value. A typo such as `hostNetwok` is lost in the round
//! trip and reported with its path. Network objects go through the agent's own parser (which
//! rejects unknown fields) and validation, and through a small validator of the CRD's
//! openAPIV3Schema (types, required fields, unknown fields, ranges, enums; not `pattern`, which
//! the agent's validation covers).
//!
//! Limits: no API server here, so admission (pod security, quota) and the live behaviour of the
//! manifests are not tested; the container image is not built (no registry access); the
//! Containerfile is checked as text.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cluster::config::{ClusterStateSource, Config};
use cluster::crd::REGENERATE;
use cluster::types::{parse_objects, Format};
use cluster::{ClusterNetworkSpec, HostSubnet, NetNamespace};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use sdn_tests::harness::{unique_name, without_agent_env, workspace_bin};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The namespace the manifests install into.
const NAMESPACE: &str = "sdn";
/// The Lease the controllers elect a leader with.
const LEASE: &str = controller::LEASE_NAME;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

fn deploy() -> PathBuf {
    repo().join("deploy")
}

/// One YAML document of a file under `deploy/`.
#[derive(Debug, Clone)]
struct Doc {
    /// Path relative to the repository.
    file: String,
    /// 1-based document number in the file.
    index: usize,
    value: Value,
}

impl Doc {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
    fn what(&self) -> String {
        format!(
            "{} document {} ({} {:?})",
            self.file,
            self.index,
            self.kind(),
            self.name()
        )
    }
    fn typed<T: DeserializeOwned + Serialize>(&self) -> T {
        typed(&self.value).unwrap_or_else(|e| panic!("{}: {e}", self.what()))
    }
}

/// Every `*.yaml`/`*.yml` file under `dir`, sorted, recursively.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(yaml_files(&p));
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
    out
}

/// `kustomization.yaml` is kustomize's input, not a Kubernetes object.
fn is_kustomization(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == "kustomization.yaml")
}

/// The documents of one YAML text (empty documents skipped).
fn parse_docs(file: &str, text: &str) -> Result<Vec<Doc>, String> {
    let mut out = Vec::new();
    let docs: Vec<Value> =
        cluster::yaml::from_multiple(text).map_err(|e| format!("{file}: {e}"))?;
    for (i, value) in docs.into_iter().enumerate() {
        if !value.is_null() {
            out.push(Doc {
                file: file.to_string(),
                index: i + 1,
                value,
            });
        }
    }
    Ok(out)
}

/// Every object document under `deploy/`; panics naming the file that does not parse.
fn docs() -> Vec<Doc> {
    let mut out = Vec::new();
    for p in yaml_files(&deploy()) {
        if is_kustomization(&p) {
            continue;
        }
        let rel = p.strip_prefix(repo()).unwrap().display().to_string();
        let text = fs::read_to_string(&p).unwrap();
        out.extend(parse_docs(&rel, &text).unwrap_or_else(|e| panic!("{e}")));
    }
    assert!(
        out.len() >= 15,
        "expected the CRDs and the manifests under deploy/, found {} documents",
        out.len()
    );
    out
}

fn find<'a>(docs: &'a [Doc], kind: &str, name: &str) -> &'a Doc {
    docs.iter()
        .find(|d| d.kind() == kind && d.name() == name)
        .unwrap_or_else(|| panic!("no {kind} {name:?} under deploy/"))
}

/// Deserializes `v` into `T` (errors carry the field path), serializes it again and requires
/// every field of `v` to come back with the same value: what `T` does not know is reported.
fn typed<T: DeserializeOwned + Serialize>(v: &Value) -> Result<T, String> {
    let t: T = serde_path_to_error::deserialize(v.clone()).map_err(|e| {
        let path = e.path().to_string();
        format!("field {path}: {}", e.into_inner())
    })?;
    let back = serde_json::to_value(&t).map_err(|e| format!("cannot serialize again: {e}"))?;
    let mut lost = Vec::new();
    compare(v, &back, "", &mut lost);
    if lost.is_empty() {
        Ok(t)
    } else {
        Err(lost.join("; "))
    }
}

fn compare(orig: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    match (orig, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    None if v.is_null() => {}
                    None => out.push(format!("unknown field {p}")),
                    Some(w) => compare(v, w, &p, out),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                compare(v, w, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => out.push(format!("field {path}: {a} came back as {b}")),
    }
}

/// The typed check of one document, by apiVersion and kind.
fn check_typed(doc: &Doc) -> Result<(), String> {
    let v = &doc.value;
    let api = v["apiVersion"].as_str().unwrap_or_default();
    match (api, doc.kind()) {
        ("v1", "Namespace") => typed::<Namespace>(v).map(drop),
        ("v1", "ServiceAccount") => typed::<ServiceAccount>(v).map(drop),
        ("v1", "ConfigMap") => typed::<ConfigMap>(v).map(drop),
        ("apps/v1", "DaemonSet") => typed::<DaemonSet>(v).map(drop),
        ("apps/v1", "Deployment") => typed::<Deployment>(v).map(drop),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<ClusterRole>(v).map(drop),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<ClusterRoleBinding>(v).map(drop)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<Role>(v).map(drop),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<RoleBinding>(v).map(drop),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            typed::<CustomResourceDefinition>(v).map(drop)
        }
        ("network.openshift.io/v1", "ClusterNetwork" | "HostSubnet" | "NetNamespace") => {
            let objs = parse_objects(&v.to_string(), Format::Json).map_err(|e| e.to_string())?;
            objs.iter()
                .try_for_each(|o| o.validate().map_err(|e| e.to_string()))
        }
        (api, kind) => Err(format!(
            "no typed check for {api} {kind}: add its type to check_typed in tests/tests/deploy.rs"
        )),
    }
}

#[test]
fn crds_yaml_is_what_sdn_agent_crds_prints() {
    let out = without_agent_env(&mut Command::new(workspace_bin("sdn-agent")))
        .arg("crds")
        .output()
        .expect("run sdn-agent crds");
    assert!(
        out.status.success(),
        "sdn-agent crds failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let file = deploy().join("crds.yaml");
    let checked_in = fs::read_to_string(&file).unwrap_or_default();
    if printed != checked_in {
        let line = printed
            .lines()
            .zip(checked_in.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| printed.lines().count().min(checked_in.lines().count()));
        panic!(
            "deploy/crds.yaml is stale: it differs from what `sdn-agent crds` prints (first at \
             line {}: printed {:?}, file has {:?}). Regenerate it from the repository root \
             with:\n    {REGENERATE}\nand commit it.",
            line + 1,
            printed.lines().nth(line).unwrap_or("<end>"),
            checked_in.lines().nth(line).unwrap_or("<end>"),
        );
    }
    let crds: Vec<CustomResourceDefinition> = parse_docs("deploy/crds.yaml", &checked_in)
        .unwrap()
        .iter()
        .map(Doc::typed)
        .collect();
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ClusterNetwork",
            "HostSubnet",
            "NetNamespace",
            "EgressNetworkPolicy"
        ]
    );
    for c in &crds {
        let schema = crd_schema(c);
        assert_eq!(
            cluster::crd::structural_problems(schema),
            Vec::<String>::new(),
            "{}",
            c.spec.names.kind
        );
    }
}

#[test]
fn every_document_has_api_version_kind_and_name() {
    let docs = docs();
    let namespaced = [
        "ServiceAccount",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "Deployment",
    ];
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for d in &docs {
        let v = &d.value;
        for field in ["apiVersion", "kind"] {
            if v[field].as_str().is_none_or(str::is_empty) {
                problems.push(format!("{}: no {field} (a string)", d.what()));
            }
        }
        if d.name().is_empty() {
            problems.push(format!("{}: no metadata.name", d.what()));
        }
        let ns = v["metadata"]["namespace"].as_str();
        // deploy/migration/: what a cluster moving from openshift-sdn applies in its namespace.
        let want = if d.what().starts_with("deploy/migration/") {
            "openshift-sdn"
        } else {
            NAMESPACE
        };
        if namespaced.contains(&d.kind()) && ns != Some(want) {
            problems.push(format!("{}: metadata.namespace must be {want}", d.what()));
        }
        if !seen.insert((
            d.kind().to_string(),
            ns.map(String::from),
            d.name().to_string(),
        )) {
            problems.push(format!("{}: defined twice", d.what()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_object_matches_its_kubernetes_type_without_unknown_fields() {
    let problems: Vec<String> = docs()
        .iter()
        .filter_map(|d| check_typed(d).err().map(|e| format!("{}: {e}", d.what())))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_type_check_catches_typos_and_wrong_types() {
    let docs = docs();
    let mut ds = find(&docs, "DaemonSet", "sdn-agent").clone();
    let pod = &mut ds.value["spec"]["template"]["spec"];
    pod.as_object_mut()
        .unwrap()
        .insert("hostNetwok".into(), Value::Bool(true));
    let e = check_typed(&ds).unwrap_err();
    assert_eq!(e, "unknown field spec.template.spec.hostNetwok");

    let mut ds = find(&docs, "DaemonSet", "sdn-agent").clone();
    let c = &mut ds.value["spec"]["template"]["spec"]["containers"][0];
    let image = c.as_object_mut().unwrap().remove("image").unwrap();
    c.as_object_mut().unwrap().insert("imagee".into(), image);
    let e = check_typed(&ds).unwrap_err();
    assert_eq!(e, "unknown field spec.template.spec.containers[0].imagee");

    let mut dep = find(&docs, "Deployment", "sdn-controller").clone();
    dep.value["spec"]["replicas"] = Value::String("two".into());
    let e = check_typed(&dep).unwrap_err();
    assert!(
        e.starts_with("field spec.replicas: invalid type: string \"two\""),
        "{e}"
    );

    let mut crd = find(
        &docs,
        "CustomResourceDefinition",
        "hostsubnets.network.openshift.io",
    )
    .clone();
    let v = &mut crd.value["spec"]["versions"][0];
    let cols = v
        .as_object_mut()
        .unwrap()
        .remove("additionalPrinterColumns")
        .unwrap();
    v.as_object_mut()
        .unwrap()
        .insert("additionalPrinterColums".into(), cols);
    let e = check_typed(&crd).unwrap_err();
    assert_eq!(e, "unknown field spec.versions[0].additionalPrinterColums");

    // A network object (should one be added under deploy/) goes through the agent's parser.
    let mut hs = Doc {
        file: "synthetic".into(),
        index: 1,
        value: serde_json::to_value(HostSubnet::new("n1", "192.168.1.10", "10.128.0.0/23"))
            .unwrap(),
    };
    check_typed(&hs).unwrap();
    hs.value["hostIp"] = hs.value["hostIP"].clone();
    let e = check_typed(&hs).unwrap_err();
    assert!(e.contains("unknown field `hostIp`"), "{e}");

    let mut unknown = hs.clone();
    unknown.value["kind"] = Value::String("PodSecurityPolicy".into());
    unknown.value["apiVersion"] = Value::String("policy/v1beta1".into());
    assert!(check_typed(&unknown)
        .unwrap_err()
        .starts_with("no typed check for policy/v1beta1 PodSecurityPolicy"));
}

// ---- RBAC ----------------------------------------------------------------------------------

fn grants(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

/// Every (group, resource, verb) the rules grant, with resourceNames when restricted.
fn grant_set(rules: &[PolicyRule]) -> BTreeSet<(String, String, String, Vec<String>)> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((
                        g.clone(),
                        res.clone(),
                        v.clone(),
                        r.resource_names.clone().unwrap_or_default(),
                    ));
                }
            }
        }
    }
    out
}

fn pod_spec(d: &Doc) -> PodSpec {
    match d.kind() {
        "DaemonSet" => d.typed::<DaemonSet>().spec.template.spec.unwrap(),
        "Deployment" => d.typed::<Deployment>().spec.template.spec.unwrap(),
        k => panic!("{}: not a workload ({k})", d.what()),
    }
}

#[test]
fn rbac_is_least_privilege() {
    let docs = docs();
    // No wildcard anywhere.
    for d in docs
        .iter()
        .filter(|d| matches!(d.kind(), "ClusterRole" | "Role"))
    {
        let rules = d.value["rules"].as_array().cloned().unwrap_or_default();
        assert!(!rules.is_empty(), "{}: no rules", d.what());
        for r in &rules {
            for field in [
                "apiGroups",
                "resources",
                "verbs",
                "resourceNames",
                "nonResourceURLs",
            ] {
                for item in r[field].as_array().into_iter().flatten() {
                    let s = item.as_str().unwrap_or_default();
                    assert!(
                        !s.contains('*'),
                        "{}: wildcard {s:?} in {field}: list what is needed",
                        d.what()
                    );
                }
            }
        }
    }
    let net = "network.openshift.io";
    let kinds = [
        "clusternetworks",
        "hostsubnets",
        "netnamespaces",
        "egressnetworkpolicies",
    ];

    // The agent reads and never writes.
    let agent = find(&docs, "ClusterRole", "sdn-agent").typed::<ClusterRole>();
    let agent_rules = agent.rules.unwrap_or_default();
    let mut want = BTreeSet::new();
    for (g, res) in kinds.iter().map(|k| (net, *k)).chain([
        ("", "namespaces"),
        ("", "pods"),
        ("", "nodes"),
        ("networking.k8s.io", "networkpolicies"),
        ("policy.networking.k8s.io", "clusternetworkpolicies"),
    ]) {
        for v in ["get", "list", "watch"] {
            want.insert((g.to_string(), res.to_string(), v.to_string(), Vec::new()));
        }
    }
    assert_eq!(
        grant_set(&agent_rules),
        want,
        "the agent gets exactly read access to the network objects, namespaces, pods, nodes, \
         NetworkPolicies and ClusterNetworkPolicies"
    );
    for res in ["hostsubnets", "netnamespaces"] {
        for v in ["create", "update", "patch", "delete", "deletecollection"] {
            assert!(!grants(&agent_rules, net, res, v), "agent may {v} {res}");
        }
    }

    // Its one write: live-trace ConfigMaps, in its own namespace only.
    let lt = find(&docs, "Role", "sdn-agent-live-trace");
    assert_eq!(lt.value["metadata"]["namespace"], NAMESPACE);
    let lt_grants: BTreeSet<(String, String, String)> =
        grant_set(&lt.typed::<Role>().rules.unwrap_or_default())
            .into_iter()
            .map(|(g, r, v, _)| (g, r, v))
            .collect();
    let want_lt: BTreeSet<(String, String, String)> =
        ["get", "list", "watch", "create", "patch", "delete"]
            .into_iter()
            .map(|v| (String::new(), "configmaps".to_string(), v.to_string()))
            .collect();
    assert_eq!(lt_grants, want_lt, "the agent's live-trace ConfigMaps");

    // The controller (agent/src/controller) creates, replaces and deletes HostSubnets and
    // NetNamespaces, creates the ClusterNetwork once, watches nodes and namespaces, and writes
    // nothing else cluster-wide.
    let ctl = find(&docs, "ClusterRole", "sdn-controller").typed::<ClusterRole>();
    let ctl_rules = ctl.rules.unwrap_or_default();
    for res in ["hostsubnets", "netnamespaces"] {
        for v in ["get", "list", "watch", "create", "update", "delete"] {
            assert!(
                grants(&ctl_rules, net, res, v),
                "controller cannot {v} {res}"
            );
        }
    }
    for v in ["get", "list", "watch"] {
        assert!(grants(&ctl_rules, net, "clusternetworks", v));
        assert!(grants(&ctl_rules, "", "nodes", v));
        assert!(grants(&ctl_rules, "", "namespaces", v));
    }
    let writes = ["create", "update", "patch", "delete", "deletecollection"];
    let allowed_writes: BTreeSet<(String, String)> = grant_set(&ctl_rules)
        .into_iter()
        .filter(|(_, _, v, _)| writes.contains(&v.as_str()))
        .map(|(_, res, v, _)| (res, v))
        .collect();
    let mut want_writes = BTreeSet::new();
    for res in ["hostsubnets", "netnamespaces"] {
        for v in ["create", "update", "delete"] {
            want_writes.insert((res.to_string(), v.to_string()));
        }
    }
    want_writes.insert(("clusternetworks".into(), "create".into()));
    assert_eq!(
        allowed_writes, want_writes,
        "the controller's cluster-wide writes"
    );
    let resources: BTreeSet<String> = grant_set(&ctl_rules).into_iter().map(|g| g.1).collect();
    for res in ["pods", "secrets", "leases", "egressnetworkpolicies"] {
        assert!(
            !resources.contains(res),
            "controller ClusterRole grants {res}"
        );
    }

    // Leader election: a namespaced Role on one Lease (create cannot be limited by name).
    let role = find(&docs, "Role", "sdn-controller-leader");
    assert_eq!(role.value["metadata"]["namespace"], NAMESPACE);
    let role_rules = role.typed::<Role>().rules.unwrap_or_default();
    for (g, res, v, names) in grant_set(&role_rules) {
        assert_eq!(
            (g.as_str(), res.as_str()),
            ("coordination.k8s.io", "leases")
        );
        if v == "create" {
            assert!(names.is_empty());
        } else {
            assert_eq!(
                names,
                vec![LEASE.to_string()],
                "{v} leases must name the Lease"
            );
        }
    }
    for v in ["create", "get", "update"] {
        assert!(grants(&role_rules, "coordination.k8s.io", "leases", v));
    }
    // Moving from openshift-sdn: the same on openshift-sdn's controller Lease, in its namespace.
    let fence = find(&docs, "Role", "sdn-controller-openshift-sdn-fence");
    assert_eq!(fence.value["metadata"]["namespace"], "openshift-sdn");
    for (g, res, v, names) in grant_set(&fence.typed::<Role>().rules.unwrap_or_default()) {
        assert_eq!(
            (g.as_str(), res.as_str()),
            ("coordination.k8s.io", "leases")
        );
        if v != "create" {
            assert_eq!(names, vec!["openshift-network-controller".to_string()]);
        }
    }
    let fb = find(&docs, "RoleBinding", "sdn-controller-openshift-sdn-fence");
    assert_eq!(fb.value["subjects"][0]["name"], "sdn-controller");
    assert_eq!(fb.value["subjects"][0]["namespace"], NAMESPACE);

    // Bindings: each role to its own service account, which its workload runs as.
    let bindings = [
        (
            "ClusterRoleBinding",
            "sdn-agent",
            "ClusterRole",
            "sdn-agent",
            "sdn-agent",
        ),
        (
            "ClusterRoleBinding",
            "sdn-controller",
            "ClusterRole",
            "sdn-controller",
            "sdn-controller",
        ),
        (
            "RoleBinding",
            "sdn-controller-leader",
            "Role",
            "sdn-controller-leader",
            "sdn-controller",
        ),
        (
            "RoleBinding",
            "sdn-agent-live-trace",
            "Role",
            "sdn-agent-live-trace",
            "sdn-agent",
        ),
    ];
    for (kind, name, role_kind, role_name, sa) in bindings {
        let d = find(&docs, kind, name);
        let (role_ref, subjects) = if kind == "RoleBinding" {
            let b = d.typed::<RoleBinding>();
            (b.role_ref, b.subjects.unwrap_or_default())
        } else {
            let b = d.typed::<ClusterRoleBinding>();
            (b.role_ref, b.subjects.unwrap_or_default())
        };
        assert_eq!(
            (role_ref.kind.as_str(), role_ref.name.as_str()),
            (role_kind, role_name),
            "{}",
            d.what()
        );
        let subjects: Vec<(String, String, Option<String>)> = subjects
            .into_iter()
            .map(|s| (s.kind, s.name, s.namespace))
            .collect();
        assert_eq!(
            subjects,
            vec![(
                "ServiceAccount".to_string(),
                sa.to_string(),
                Some(NAMESPACE.to_string())
            )],
            "{}",
            d.what()
        );
        find(&docs, "ServiceAccount", sa);
    }
    for (kind, name, sa) in [
        ("DaemonSet", "sdn-agent", "sdn-agent"),
        ("Deployment", "sdn-controller", "sdn-controller"),
    ] {
        let spec = pod_spec(find(&docs, kind, name));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some(sa),
            "{kind} {name}"
        );
    }
}

// ---- the agent DaemonSet ---------------------------------------------------------------------

fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn volume<'a>(spec: &'a PodSpec, name: &str) -> &'a Volume {
    spec.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// The mount of `c` covering `path` (the deepest one).
fn mount_for<'a>(c: &'a Container, path: &Path) -> Option<&'a VolumeMount> {
    c.volume_mounts
        .iter()
        .flatten()
        .filter(|m| path.starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
}

/// Stand-ins for the downward API fields the manifests use.
fn downward(field: &str, workload: &Doc) -> String {
    match field {
        "spec.nodeName" => "node-1.example.com".into(),
        "metadata.name" => format!("{}-5d9f8c7b6-x2x4q", workload.name()),
        "metadata.namespace" => workload.value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        other => panic!(
            "{}: no stand-in for the downward API field {other}",
            workload.what()
        ),
    }
}

/// How a container of a workload starts `sdn-agent`: its arguments after `command` (with
/// `$(VAR)` expanded as Kubernetes does, from env vars of the downward API) and its
/// configuration, resolved through the `--config` mount and the ConfigMap, then parsed and
/// validated by `Config::from_args` exactly as the binary does. Returns the arguments (with the
/// configuration file's path as mounted) and the configuration.
fn started_config(
    docs: &[Doc],
    kind: &str,
    name: &str,
    container_name: &str,
) -> (Vec<String>, Config) {
    let workload = find(docs, kind, name);
    let spec = pod_spec(workload);
    let c = container(&spec, container_name);
    let env: BTreeMap<String, String> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let field = e
                .value_from
                .as_ref()?
                .field_ref
                .as_ref()?
                .field_path
                .clone();
            Some((e.name.clone(), downward(&field, workload)))
        })
        .collect();
    let args: Vec<String> = c
        .args
        .iter()
        .flatten()
        .map(
            |a| match a.strip_prefix("$(").and_then(|a| a.strip_suffix(')')) {
                Some(var) => env
                    .get(var)
                    .unwrap_or_else(|| panic!("{a}: no env {var} from the downward API"))
                    .clone(),
                None => a.clone(),
            },
        )
        .collect();
    let at = args
        .iter()
        .position(|a| a == "--config")
        .unwrap_or_else(|| panic!("{kind} {name}: sdn-agent runs without --config"));
    let config_path = PathBuf::from(&args[at + 1]);
    let m = mount_for(c, &config_path).expect("the --config file is mounted");
    let cm_name = volume(&spec, &m.name)
        .config_map
        .as_ref()
        .expect("the --config file comes from a ConfigMap")
        .name
        .clone();
    let key = config_path
        .strip_prefix(&m.mount_path)
        .unwrap()
        .display()
        .to_string();
    let cm = find(docs, "ConfigMap", &cm_name).typed::<ConfigMap>();
    let text = cm
        .data
        .unwrap_or_default()
        .remove(&key)
        .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no key {key:?}"));
    // The file alone, as the agent's YAML parser reads it.
    cluster::yaml::from_str::<Config>(&text)
        .unwrap_or_else(|e| panic!("ConfigMap {cm_name} {key}: {e}"));
    let dir = std::env::temp_dir().join(unique_name("deploy-test-"));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(&key);
    fs::write(&file, &text).unwrap();
    let mut local = args.clone();
    local[at + 1] = file.display().to_string();
    // The subcommand (`run`) is taken off by main before the flags are parsed.
    let flags: Vec<String> = local
        .into_iter()
        .skip_while(|a| !a.starts_with("--"))
        .collect();
    let cfg = Config::from_args(&flags);
    fs::remove_dir_all(&dir).unwrap();
    let cfg = cfg
        .unwrap_or_else(|e| panic!("sdn-agent refuses the command line of {kind} {name}: {e:#}"));
    (args, cfg)
}

/// The agent's configuration as the DaemonSet starts it.
fn agent_config(docs: &[Doc]) -> Config {
    let (args, cfg) = started_config(docs, "DaemonSet", "sdn-agent", "sdn-agent");
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    assert_eq!(
        cfg.node_name, "node-1.example.com",
        "--node-name from the downward API (spec.nodeName)"
    );
    cfg
}

#[test]
fn agent_daemonset_runs_privileged_in_the_host_network_with_what_its_config_needs() {
    let docs = docs();
    let cfg = agent_config(&docs);
    assert_eq!(cfg.cluster_state, ClusterStateSource::Kubernetes);

    let ds = find(&docs, "DaemonSet", "sdn-agent");
    let spec = pod_spec(ds);
    assert_eq!(spec.host_network, Some(true), "hostNetwork");
    assert_ne!(spec.host_pid, Some(true), "hostPID must stay off");
    assert!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()),
        "the agent must run on every node whatever its taints"
    );
    let c = container(&spec, "sdn-agent");
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["/usr/local/bin/sdn-entrypoint", "/usr/local/bin/sdn-agent"],
        "the agent starts through the entrypoint that picks the host's iptables backend"
    );
    assert_eq!(
        c.security_context.as_ref().and_then(|s| s.privileged),
        Some(true),
        "privileged"
    );

    // Every path the configuration uses is a host path mounted at the same path, writable.
    let cluster::config::OvsdbTarget::Unix(ovsdb) = &cfg.ovsdb else {
        panic!("the agent reaches the host's OVS over its unix socket")
    };
    let paths: Vec<(&str, PathBuf)> = vec![
        ("ovsdb", ovsdb.clone()),
        ("bridgeMgmt", cfg.bridge_mgmt.clone()),
        ("cniSocket", cfg.cni_socket.clone()),
        ("ipamDir", cfg.ipam_dir.clone()),
        ("cniConfDir", cfg.cni_conf_dir.clone()),
        ("pod network namespaces", PathBuf::from("/var/run/netns")),
    ];
    for (what, path) in &paths {
        let m =
            mount_for(c, path).unwrap_or_else(|| panic!("{what} {}: not mounted", path.display()));
        let host = volume(&spec, &m.name)
            .host_path
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: volume {} is not a hostPath", m.name));
        assert_eq!(
            host.path, m.mount_path,
            "{what}: the host path must be mounted at the same path (the CNI plugin and the \
             runtime hand the agent host paths)"
        );
        assert_ne!(m.read_only, Some(true), "{what}: mounted read-only");
    }
    let netns = mount_for(c, Path::new("/var/run/netns")).unwrap();
    assert_eq!(
        netns.mount_propagation.as_deref(),
        Some("Bidirectional"),
        "network namespaces created after the agent started must show up"
    );
    // The port pool's namespace is pinned next to the CNI socket and must outlive the
    // container (the agent runs without a pool otherwise).
    let pin = agent::node::pool_netns_pin(&cfg);
    let run = mount_for(c, &pin).expect("the pool namespace's directory is mounted");
    assert_eq!(
        run.mount_propagation.as_deref(),
        Some("Bidirectional"),
        "the port pool's namespace, pinned at {}, must outlive the agent's container",
        pin.display()
    );
    // Every hostPath mount of the agent is at its host path (no hidden renames).
    for m in c.volume_mounts.iter().flatten() {
        if let Some(h) = &volume(&spec, &m.name).host_path {
            assert_eq!(h.path, m.mount_path, "volume {}", m.name);
        }
    }

    // Health: readiness and liveness are the agent's own endpoints on its metrics address
    // (/readyz is what CNI STATUS answers), reached on the host network's loopback.
    let addr = cfg
        .metrics_address()
        .expect("the DaemonSet's agent serves metrics");
    for (probe, path) in [
        (c.readiness_probe.as_ref(), "/readyz"),
        (c.liveness_probe.as_ref(), "/livez"),
        (c.startup_probe.as_ref(), "/livez"),
    ] {
        let get = probe
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("an httpGet probe of {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.host.as_deref(), Some(addr.ip().to_string().as_str()));
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(addr.port()))
        );
    }

    // The init container installs sdn-cni into the host's CNI bin dir by atomic rename.
    let init = container(&spec, "install-cni");
    assert!(spec
        .init_containers
        .iter()
        .flatten()
        .any(|i| i.name == "install-cni"));
    assert_eq!(init.image, c.image, "one image for both");
    let m = init.volume_mounts.iter().flatten().next().expect("a mount");
    let host = volume(&spec, &m.name)
        .host_path
        .clone()
        .expect("a hostPath");
    assert_eq!(host.path, "/opt/cni/bin");
    let script = init.command.clone().unwrap_or_default().join("\n");
    let dir = &m.mount_path;
    let mv = script
        .lines()
        .find(|l| l.trim_start().starts_with("mv "))
        .unwrap_or_else(|| panic!("no mv in {script:?}"));
    let words: Vec<&str> = mv.split_whitespace().collect();
    let (from, to) = (words[words.len() - 2], words[words.len() - 1]);
    assert_eq!(to, format!("{dir}/sdn-cni"), "{mv}");
    assert_eq!(
        Path::new(from).parent(),
        Some(Path::new(dir)),
        "the temporary copy must be in the same directory, so the rename is atomic: {mv}"
    );
    assert!(
        script.contains(&format!("cp /usr/local/bin/sdn-cni {from}")),
        "{script}"
    );
}

#[test]
fn controller_is_two_replicas_leader_elected_and_unprivileged() {
    let docs = docs();
    let d = find(&docs, "Deployment", "sdn-controller");
    let dep = d.typed::<Deployment>();
    let spec = dep.spec.clone();
    assert_eq!(spec.replicas, Some(2));
    let pod = pod_spec(d);
    let c = container(&pod, "sdn-controller");
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["/usr/local/bin/sdn-agent", "controller"]
    );
    let agent_image = container(
        &pod_spec(find(&docs, "DaemonSet", "sdn-agent")),
        "sdn-agent",
    )
    .image
    .clone();
    assert_eq!(
        c.image, agent_image,
        "one image for the agent and the controller"
    );
    // Nodes are NotReady until the agent runs, and the agent waits for the controller.
    assert_eq!(
        pod.host_network,
        Some(true),
        "the controller cannot need the pod network"
    );
    assert!(pod
        .tolerations
        .iter()
        .flatten()
        .any(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready")
            && t.operator.as_deref() == Some("Exists")));
    let sc = c.security_context.clone().unwrap_or_default();
    assert_ne!(sc.privileged, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    // It starts with the shared configuration, a Lease holder identity unique per pod (two
    // replicas on one node share the host name) and the Lease in its own namespace, where the
    // leader-election Role is.
    let (args, cfg) = started_config(&docs, "Deployment", "sdn-controller", "sdn-controller");
    assert_eq!(cfg.node_name, "sdn-controller-5d9f8c7b6-x2x4q", "{args:?}");
    assert_eq!(cfg.controller_namespace, NAMESPACE);
    let role = find(&docs, "Role", "sdn-controller-leader");
    assert_eq!(
        role.value["metadata"]["namespace"],
        cfg.controller_namespace.as_str()
    );
    let agent = agent_config(&docs);
    assert_eq!(
        ClusterNetworkSpec::from_config(&cfg).unwrap(),
        ClusterNetworkSpec::from_config(&agent).unwrap(),
        "the controller and the agents read the same networks"
    );
}

// ---- the ClusterNetwork object ---------------------------------------------------------------

fn crd_schema(c: &CustomResourceDefinition) -> &JSONSchemaProps {
    c.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("an openAPIV3Schema")
}

/// Validates `v` against a structural schema: types, required and unknown fields, numeric
/// ranges, enums, maxItems. Not `pattern` (no regex engine here; the agent validates values),
/// and not inside the root `metadata` (the API server checks that as an ObjectMeta).
fn schema_errors(s: &JSONSchemaProps, v: &Value, path: &str, out: &mut Vec<String>) {
    let here = if path.is_empty() { "." } else { path };
    let type_ok = match (s.type_.as_deref(), v) {
        (Some("object"), Value::Object(_))
        | (Some("array"), Value::Array(_))
        | (Some("string"), Value::String(_))
        | (Some("boolean"), Value::Bool(_))
        | (Some("number"), Value::Number(_))
        | (None, _) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !type_ok {
        out.push(format!("{here}: expected {:?}, found {v}", s.type_));
        return;
    }
    if path == ".metadata" {
        // The API server checks the root metadata as an ObjectMeta itself.
        return;
    }
    if let Some(e) = &s.enum_ {
        if !e.iter().any(|x| &x.0 == v) {
            out.push(format!("{here}: {v} is not one of the enum values"));
        }
    }
    if let Some(n) = v.as_f64() {
        if s.minimum.is_some_and(|m| n < m) || s.maximum.is_some_and(|m| n > m) {
            out.push(format!("{here}: {v} is out of range"));
        }
    }
    match v {
        Value::Object(map) => {
            for r in s.required.iter().flatten() {
                if !map.contains_key(r) {
                    out.push(format!("{path}.{r}: required"));
                }
            }
            let props = s.properties.clone().unwrap_or_default();
            for (k, child) in map {
                match props.get(k) {
                    Some(p) => schema_errors(p, child, &format!("{path}.{k}"), out),
                    None if s.x_kubernetes_preserve_unknown_fields == Some(true) => {}
                    None => out.push(format!(
                        "{path}.{k}: unknown field (the API server prunes it)"
                    )),
                }
            }
        }
        Value::Array(items) => {
            if s.max_items.is_some_and(|m| items.len() as i64 > m) {
                out.push(format!("{here}: more than {:?} items", s.max_items));
            }
            if let Some(JSONSchemaPropsOrArray::Schema(item)) = &s.items {
                for (i, x) in items.iter().enumerate() {
                    schema_errors(item, x, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn the_cluster_network_the_controller_creates_passes_its_crd() {
    let docs = docs();
    let (_, cfg) = started_config(&docs, "Deployment", "sdn-controller", "sdn-controller");
    let cn = ClusterNetworkSpec::from_config(&cfg).unwrap().to_object();
    cn.validate().unwrap();
    let value = serde_json::to_value(&cn).unwrap();
    // The API server's view: the CRD it holds.
    let crd = find(
        &docs,
        "CustomResourceDefinition",
        "clusternetworks.network.openshift.io",
    )
    .typed::<CustomResourceDefinition>();
    let mut errors = Vec::new();
    schema_errors(crd_schema(&crd), &value, "", &mut errors);
    assert_eq!(errors, Vec::<String>::new(), "{value}");
    // The validator is not a pushover.
    let mut bad = value.clone();
    bad["clusterNetworks"][0]["hostSubnetLength"] = Value::from(31);
    bad["vxlanPort"] = Value::String("4789".into());
    bad["extra"] = Value::Bool(true);
    bad.as_object_mut().unwrap().remove("serviceNetwork");
    let mut errors = Vec::new();
    schema_errors(crd_schema(&crd), &bad, "", &mut errors);
    errors.sort();
    assert_eq!(
        errors,
        [
            ".clusterNetworks[0].hostSubnetLength: 31 is out of range",
            ".extra: unknown field (the API server prunes it)",
            ".serviceNetwork: required",
            ".vxlanPort: expected Some(\"integer\"), found \"4789\"",
        ]
    );
    // The same schema takes the objects the controller writes for nodes and namespaces.
    for (name, obj) in [
        (
            "hostsubnets.network.openshift.io",
            serde_json::to_value(HostSubnet::new(
                "node-1.example.com",
                "192.168.1.10",
                "10.128.0.0/23",
            ))
            .unwrap(),
        ),
        (
            "netnamespaces.network.openshift.io",
            serde_json::to_value(NetNamespace::new("tenant-a", 10)).unwrap(),
        ),
    ] {
        let crd = find(&docs, "CustomResourceDefinition", name).typed::<CustomResourceDefinition>();
        let mut errors = Vec::new();
        schema_errors(crd_schema(&crd), &obj, "", &mut errors);
        assert_eq!(errors, Vec::<String>::new(), "{name}: {obj}");
    }
}

// ---- kustomization and image -----------------------------------------------------------------

#[test]
fn kustomization_lists_every_manifest() {
    let dir = deploy().join("kubernetes");
    let k: Value =
        serde_saphyr::from_str(&fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1beta1");
    assert_eq!(k["kind"], "Kustomization");
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let present: BTreeSet<String> = yaml_files(&dir)
        .iter()
        .filter(|p| !is_kustomization(p))
        .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    assert_eq!(
        listed, present,
        "kustomization.yaml resources vs files in deploy/kubernetes"
    );
    assert!(
        k.get("namespace").is_none(),
        "a kustomize namespace would also be set on the cluster-scoped ClusterNetwork"
    );
}

#[test]
fn the_image_holds_what_the_manifests_run() {
    // tests/tests/image.rs builds the image for real; here: what it holds, statically.
    let text = fs::read_to_string(deploy().join("image/Containerfile")).unwrap();
    for line in [
        "COPY bin/ /usr/local/bin/",
        "COPY sdn-entrypoint /usr/local/bin/sdn-entrypoint",
    ] {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "Containerfile: no {line:?}"
        );
    }
    assert!(text.contains("ARG BASE=docker.io/library/debian:12-slim"));
    let script = fs::read_to_string(deploy().join("build-image.sh")).unwrap();
    assert!(
        script.contains(
            r#"install -m 0755 "$BIN/sdn-agent" "$BIN/sdnctl" "$BIN/sdn-cni" "$ctx/bin/""#
        ),
        "build-image.sh stages the three binaries"
    );
    assert!(
        script.contains("mmdebstrap"),
        "build-image.sh bootstraps Debian 12 itself"
    );
    // The binary names are the crates' bin targets.
    let agent = fs::read_to_string(repo().join("agent/Cargo.toml")).unwrap();
    assert!(agent.contains("name = \"sdn-agent\""));
    let shim = fs::read_to_string(repo().join("cni-shim/Cargo.toml")).unwrap();
    assert!(shim.contains("name = \"sdn-cni\""));
    // What the manifests run is what the image holds.
    let docs = docs();
    for d in docs
        .iter()
        .filter(|d| matches!(d.kind(), "DaemonSet" | "Deployment"))
    {
        let spec = pod_spec(d);
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let words = c.command.clone().unwrap_or_default().join(" ");
            for w in words
                .split_whitespace()
                .filter(|w| w.starts_with("/usr/local/bin/"))
            {
                let bin = w.trim_start_matches("/usr/local/bin/");
                assert!(
                    ["sdn-agent", "sdnctl", "sdn-cni", "sdn-entrypoint"].contains(&bin),
                    "{}: container {} runs {w}, which the image does not have",
                    d.what(),
                    c.name
                );
            }
        }
    }
}
