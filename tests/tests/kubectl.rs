//! kubectl against the fake API server, for the verbs the tests and docs use: create (a
//! namespace, which kubectl sends as protobuf, and objects from files), apply (create, unchanged,
//! changed), label, annotate, patch (strategic merge on a built-in kind, merge on an OpenShift
//! kind), get -o json and delete; and a CRD installed with kubectl serving its kind. The client
//! is Debian's `kubernetes-client` (kubectl 1.20),
//! unpacked under `target/debian-kubectl` by `scripts/install-deps`; validation stays on (the
//! fake serves an OpenAPI document without schemas, so kubectl validates nothing and asks for
//! it as it does of a real server).

use std::path::PathBuf;
use std::process::Command;

use sdn_tests::fakeapi::FakeApi;
use serde_json::{json, Value};

fn kubectl_bin() -> PathBuf {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/debian-kubectl/usr/bin/kubectl"
    ));
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-deps test (it unpacks Debian's kubernetes-client there)",
        p.display()
    );
    p
}

struct Kubectl {
    config: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&self.config)
            .args(args)
            .current_dir(&self.dir)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        self.run(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    fn file(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        name.to_string()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn kubectl_creates_applies_labels_patches_gets_and_deletes() {
    let fake = FakeApi::start("127.0.0.1:0");
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("kubectl-"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubeconfig");
    fake.kubeconfig(&config).unwrap();
    let k = Kubectl { config, dir };

    assert_eq!(
        k.ok(&["create", "namespace", "tenant-a"]).trim(),
        "namespace/tenant-a created"
    );
    let ns = fake.get("", "namespaces", None, "tenant-a").unwrap();
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "tenant-a"
    );

    let np = k.file(
        "np.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\n  \
         namespace: tenant-a\nspec:\n  podSelector: {}\n  egress: []\n",
    );
    assert!(k
        .ok(&["apply", "-f", &np])
        .contains("networkpolicy.networking.k8s.io/deny created"));
    assert!(k.ok(&["apply", "-f", &np]).contains("unchanged"));
    let got: Value = serde_json::from_str(&k.ok(&[
        "get",
        "networkpolicy",
        "-n",
        "tenant-a",
        "deny",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(
        got["spec"]["policyTypes"],
        json!(["Ingress"]),
        "defaulted: {got:#}"
    );
    let np2 = k.file(
        "np2.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\n  \
         namespace: tenant-a\nspec:\n  podSelector:\n    matchLabels: {app: db}\n",
    );
    assert!(k.ok(&["apply", "-f", &np2]).contains("configured"));
    let stored = fake
        .get(
            "networking.k8s.io",
            "networkpolicies",
            Some("tenant-a"),
            "deny",
        )
        .unwrap();
    assert_eq!(stored["spec"]["podSelector"]["matchLabels"]["app"], "db");

    let nn = k.file(
        "nn.yaml",
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata:\n  name: tenant-a\n\
         netname: tenant-a\nnetid: 12\n",
    );
    assert!(k
        .ok(&["create", "-f", &nn])
        .contains("netnamespace.network.openshift.io/tenant-a created"));
    k.ok(&["label", "namespace", "tenant-a", "team=red"]);
    k.ok(&[
        "annotate",
        "netnamespace",
        "tenant-a",
        "netnamespace.network.openshift.io/multicast-enabled=true",
    ]);
    k.ok(&[
        "patch",
        "namespace",
        "tenant-a",
        "-p",
        r#"{"metadata":{"labels":{"tier":"gold"}}}"#,
    ]);
    k.ok(&[
        "patch",
        "netnamespace",
        "tenant-a",
        "--type",
        "merge",
        "-p",
        r#"{"netid":13}"#,
    ]);
    let ns = fake.get("", "namespaces", None, "tenant-a").unwrap();
    assert_eq!(ns["metadata"]["labels"]["team"], "red");
    assert_eq!(ns["metadata"]["labels"]["tier"], "gold");
    let nn = fake
        .get("network.openshift.io", "netnamespaces", None, "tenant-a")
        .unwrap();
    assert_eq!(nn["netid"], 13);
    assert_eq!(
        nn["metadata"]["annotations"]["netnamespace.network.openshift.io/multicast-enabled"],
        "true"
    );

    k.ok(&["delete", "networkpolicy", "-n", "tenant-a", "deny"]);
    k.ok(&["delete", "netnamespace", "tenant-a"]);
    assert!(fake
        .get(
            "networking.k8s.io",
            "networkpolicies",
            Some("tenant-a"),
            "deny"
        )
        .is_none());
    assert!(fake
        .get("network.openshift.io", "netnamespaces", None, "tenant-a")
        .is_none());
    let err = k.run(&["get", "netnamespace", "tenant-a"]).unwrap_err();
    assert!(err.contains("NotFound"), "{err}");
}

/// `kubectl apply -k deploy/migration` (a cluster moving from openshift-sdn): kubectl's own
/// kustomize renders every manifest of deploy/kubernetes, the agent's DaemonSet limited to the
/// nodes labelled `sdn/network=sdn`, and the Role letting the controller hold openshift-sdn's
/// controller Lease.
#[test]
fn the_migration_overlay_renders_with_kubectl() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/migration");
    let out = Command::new(kubectl_bin())
        .args(["kustomize", dir])
        .output()
        .expect("kubectl kustomize");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let daemonsets: Vec<&&str> = docs
        .iter()
        .filter(|d| d.contains("kind: DaemonSet"))
        .collect();
    assert_eq!(daemonsets.len(), 1, "{text}");
    assert!(
        daemonsets[0].contains("nodeSelector:\n        sdn/network: sdn"),
        "{}",
        daemonsets[0]
    );
    assert!(
        docs.iter().any(|d| d.contains("kind: Deployment")),
        "the controller: {text}"
    );
    let fence = docs
        .iter()
        .find(|d| {
            d.contains("name: sdn-controller-openshift-sdn-fence") && d.contains("kind: Role\n")
        })
        .unwrap_or_else(|| panic!("no fence Role: {text}"));
    assert!(fence.contains("namespace: openshift-sdn"), "{fence}");
    assert!(fence.contains("openshift-network-controller"), "{fence}");
}

/// The ClusterNetworkPolicy CRD (deploy/crd-clusternetworkpolicies.yaml, upstream's definition)
/// installed with kubectl on a server that did not serve the kind: once it is in, kubectl
/// creates, gets (by its short name too), patches and deletes ClusterNetworkPolicies; once it
/// is deleted, the kind is gone again.
#[test]
fn kubectl_installs_the_cluster_network_policy_crd_and_manages_policies() {
    let fake = FakeApi::start("127.0.0.1:0");
    fake.unregister("policy.networking.k8s.io", "clusternetworkpolicies");
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("kubectl-"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubeconfig");
    fake.kubeconfig(&config).unwrap();
    let k = Kubectl { config, dir };
    let missing = k.run(&["get", "clusternetworkpolicies"]).unwrap_err();
    assert!(
        missing.contains("doesn't have a resource type"),
        "{missing}"
    );

    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/crd-clusternetworkpolicies.yaml"
    );
    let out = k.ok(&["apply", "-f", crd]);
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/clusternetworkpolicies.policy.networking.k8s.io created"
        ),
        "{out}"
    );
    let cnp = k.file(
        "cnp.yaml",
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata:\n  name: monitoring-scrapes\nspec:\n  tier: Admin\n  priority: 10\n  \
         subject: {namespaces: {}}\n  ingress:\n  - name: prometheus\n    action: Accept\n    \
         from: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]\n    \
         protocols: [{tcp: {destinationPort: {number: 9100}}}]\n",
    );
    let out = k.ok(&["apply", "-f", &cnp]);
    assert!(
        out.contains("clusternetworkpolicy.policy.networking.k8s.io/monitoring-scrapes created"),
        "{out}"
    );
    assert!(k.ok(&["apply", "-f", &cnp]).contains("unchanged"));
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "cnp", "monitoring-scrapes", "-o", "json"])).unwrap();
    assert_eq!(got["spec"]["priority"], 10, "{got:#}");
    assert_eq!(
        got["spec"]["ingress"][0]["protocols"][0]["tcp"]["destinationPort"]["number"],
        9100
    );
    k.ok(&[
        "patch",
        "clusternetworkpolicy",
        "monitoring-scrapes",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"priority":20}}"#,
    ]);
    let stored = fake
        .get(
            "policy.networking.k8s.io",
            "clusternetworkpolicies",
            None,
            "monitoring-scrapes",
        )
        .unwrap();
    assert_eq!(stored["spec"]["priority"], 20);
    k.ok(&["delete", "cnp", "monitoring-scrapes"]);
    assert!(fake
        .get(
            "policy.networking.k8s.io",
            "clusternetworkpolicies",
            None,
            "monitoring-scrapes"
        )
        .is_none());
    k.ok(&[
        "delete",
        "crd",
        "clusternetworkpolicies.policy.networking.k8s.io",
    ]);
    // kubectl may still have the kind in its discovery cache: then the server says it is gone.
    let gone = k.run(&["get", "clusternetworkpolicies"]).unwrap_err();
    assert!(
        gone.contains("doesn't have a resource type")
            || gone.contains("could not find the requested resource"),
        "{gone}"
    );
}
