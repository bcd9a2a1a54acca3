//! CustomResourceDefinitions of the `network.openshift.io/v1` kinds (ClusterNetwork, HostSubnet,
//! NetNamespace, EgressNetworkPolicy), built from the Rust types of [`super::types`].
//!
//! Why generated: the types are what the agent parses and validates; a hand-written CRD would
//! drift from them. The schema comes from the types' [`schemars::JsonSchema`] derives, generated
//! the way kube-derive does it for its own CRDs (OpenAPI v3 settings, subschemas inlined, kube's
//! structural-schema rewriters), then tidied: no `title`, `apiVersion`/`kind` not required (the
//! API server fills them), `metadata` a plain object. `sdn-agent crds` prints the result; the
//! checked-in `deploy/crds.yaml` is that output, and `tests/tests/deploy.rs` fails when they
//! differ ([`REGENERATE`] says how to refresh it).
//!
//! The names, scopes and printer columns follow OpenShift's own CRDs for these kinds (no short
//! names, as OpenShift has none), so `kubectl get hostsubnets` prints Host, Host IP and Subnet.
//! The schemas are structural (every node typed, no `$ref`/`anyOf`, no
//! `x-kubernetes-preserve-unknown-fields`: nothing here is free-form); [`structural_problems`]
//! checks that and the unit tests run it.
//!
//! Limits: one version (`v1`, served and stored), no status subresource (these kinds have no
//! status), no conversion webhook.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceValidation,
    JSONSchemaProps, JSONSchemaPropsOrArray,
};
use kube::core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use kube::Resource;
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;

use super::types::{
    meta_named, ClusterNetwork, EgressNetworkPolicy, HostSubnet, NetNamespace, GROUP, VERSION,
};

/// The command that regenerates `deploy/crds.yaml` (from the repository root).
pub const REGENERATE: &str = "cargo run -q -p agent --bin sdn-agent -- crds > deploy/crds.yaml";

/// Why the CRDs could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A type's JSON schema is not a valid `JSONSchemaProps`.
    #[error("the schema of {kind} is not a valid openAPIV3Schema: {message}")]
    Schema {
        /// The kind.
        kind: String,
        /// The deserializer's message.
        message: String,
    },
    /// Rendering as YAML failed.
    #[error("cannot render the CRD of {kind} as YAML: {message}")]
    Render {
        /// The kind.
        kind: String,
        /// The serializer's message.
        message: String,
    },
}

/// A printer column: name, type, JSON path, description.
type Column = (&'static str, &'static str, &'static str, &'static str);

const CLUSTER_NETWORK_COLUMNS: &[Column] = &[
    (
        "Cluster Network",
        "string",
        ".network",
        "The first cluster network CIDR",
    ),
    (
        "Service Network",
        "string",
        ".serviceNetwork",
        "The service network CIDR",
    ),
    (
        "Plugin Name",
        "string",
        ".pluginName",
        "The SDN plugin (isolation mode)",
    ),
];

const HOST_SUBNET_COLUMNS: &[Column] = &[
    ("Host", "string", ".host", "The node name"),
    (
        "Host IP",
        "string",
        ".hostIP",
        "The node's VXLAN endpoint address",
    ),
    ("Subnet", "string", ".subnet", "The node's pod subnet"),
    (
        "Egress CIDRs",
        "string",
        ".egressCIDRs",
        "Egress CIDRs the node may host IPs from",
    ),
    (
        "Egress IPs",
        "string",
        ".egressIPs",
        "Egress IPs hosted by the node",
    ),
];

const NET_NAMESPACE_COLUMNS: &[Column] = &[
    ("NetID", "integer", ".netid", "The namespace's VNID"),
    (
        "Egress IPs",
        "string",
        ".egressIPs",
        "Egress IPs of the namespace",
    ),
];

/// The JSON schema of `T` as a CRD's `openAPIV3Schema`.
pub fn schema_of<T: JsonSchema + Resource<DynamicType = ()>>() -> Result<JSONSchemaProps, CrdError>
{
    let kind = T::kind(&()).into_owned();
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            // CRDs allow neither `$ref` definitions nor `$schema`.
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(StructuralSchemaRewriter)
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    strip_defaults_and_nullable(&mut value);
    if let Some(root) = value.as_object_mut() {
        root.remove("title");
        if let Some(serde_json::Value::Array(required)) = root.get_mut("required") {
            required.retain(|r| r != "apiVersion" && r != "kind" && r != "metadata");
        }
        if let Some(serde_json::Value::Object(props)) = root.get_mut("properties") {
            props.insert("metadata".into(), serde_json::json!({ "type": "object" }));
        }
    }
    serde_json::from_value(value).map_err(|e| CrdError::Schema {
        kind,
        message: e.to_string(),
    })
}

/// Removes `default` and `nullable` from every node of a schema. schemars writes `default` for
/// fields with `#[serde(default)]` (the API server would then fill `clusterNetworks: []` into
/// stored objects) and `nullable` for `Option`s; the deserializers take an absent field (and a
/// `null`) already, and OpenShift's CRDs have neither, so the stored objects look like
/// OpenShift's.
fn strip_defaults_and_nullable(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.remove("default");
            map.remove("nullable");
            for (key, child) in map.iter_mut() {
                // `properties` maps field names to schemas: a field named `default` stays.
                if key == "properties" {
                    if let serde_json::Value::Object(fields) = child {
                        fields.values_mut().for_each(strip_defaults_and_nullable);
                    }
                } else {
                    strip_defaults_and_nullable(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_defaults_and_nullable),
        _ => {}
    }
}

/// The CRD of `T`.
fn definition<T: JsonSchema + Resource<DynamicType = ()>>(
    namespaced: bool,
    columns: &[Column],
) -> Result<CustomResourceDefinition, CrdError> {
    let kind = T::kind(&()).into_owned();
    let plural = T::plural(&()).into_owned();
    let columns: Vec<CustomResourceColumnDefinition> = columns
        .iter()
        .map(
            |(name, type_, json_path, description)| CustomResourceColumnDefinition {
                name: (*name).into(),
                type_: (*type_).into(),
                json_path: (*json_path).into(),
                description: Some((*description).into()),
                ..CustomResourceColumnDefinition::default()
            },
        )
        .collect();
    Ok(CustomResourceDefinition {
        metadata: meta_named(&format!("{plural}.{GROUP}")),
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: kind.clone(),
                list_kind: Some(format!("{kind}List")),
                plural,
                singular: Some(kind.to_ascii_lowercase()),
                ..CustomResourceDefinitionNames::default()
            },
            scope: if namespaced { "Namespaced" } else { "Cluster" }.into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                additional_printer_columns: (!columns.is_empty()).then_some(columns),
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema_of::<T>()?),
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    })
}

/// The four CRDs: ClusterNetwork, HostSubnet, NetNamespace, EgressNetworkPolicy.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Ok(vec![
        definition::<ClusterNetwork>(false, CLUSTER_NETWORK_COLUMNS)?,
        definition::<HostSubnet>(false, HOST_SUBNET_COLUMNS)?,
        definition::<NetNamespace>(false, NET_NAMESPACE_COLUMNS)?,
        definition::<EgressNetworkPolicy>(true, &[])?,
    ])
}

/// The CRDs as one multi-document YAML text with a header saying how it was made: what
/// `sdn-agent crds` prints and `deploy/crds.yaml` holds.
pub fn render_yaml() -> Result<String, CrdError> {
    let mut out = format!(
        "# CustomResourceDefinitions of {GROUP}/{VERSION} (ClusterNetwork, HostSubnet, NetNamespace,\n\
         # EgressNetworkPolicy), generated from the Rust types in agent/src/cluster/types.rs.\n\
         # Do not edit; regenerate with:\n\
         #   {REGENERATE}\n"
    );
    for crd in all()? {
        let text = crate::yaml::to_manifest_text(&crd).map_err(|e| CrdError::Render {
            kind: crd.spec.names.kind.clone(),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&text);
    }
    Ok(out)
}

/// What keeps `schema` from being a structural schema the API server accepts, one message per
/// problem with the path of the node (empty when it is structural). Checked: every node has a
/// `type` (`x-kubernetes-int-or-string` and `x-kubernetes-preserve-unknown-fields` nodes
/// excepted), arrays have `items`, no `$ref`, no `anyOf`/`oneOf`/`allOf`/`not`, no
/// `additionalProperties` next to `properties`, no `uniqueItems: true`, and `metadata` at the root
/// is a bare object.
pub fn structural_problems(schema: &JSONSchemaProps) -> Vec<String> {
    let mut out = Vec::new();
    walk(schema, ".", true, &mut out);
    out
}

fn walk(s: &JSONSchemaProps, path: &str, root: bool, out: &mut Vec<String>) {
    let free_form = s.x_kubernetes_int_or_string == Some(true)
        || s.x_kubernetes_preserve_unknown_fields == Some(true);
    if s.type_.is_none() && !free_form {
        out.push(format!("{path}: no type"));
    }
    if s.ref_path.is_some() {
        out.push(format!("{path}: $ref is not allowed"));
    }
    if s.any_of.is_some() || s.one_of.is_some() || s.all_of.is_some() || s.not.is_some() {
        out.push(format!(
            "{path}: anyOf/oneOf/allOf/not are not generated for these types"
        ));
    }
    if s.properties.is_some() && s.additional_properties.is_some() {
        out.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    if s.unique_items == Some(true) {
        out.push(format!("{path}: uniqueItems is not allowed"));
    }
    if s.type_.as_deref() == Some("array") {
        match &s.items {
            Some(JSONSchemaPropsOrArray::Schema(item)) => {
                walk(item, &format!("{path}[]"), false, out)
            }
            _ => out.push(format!("{path}: an array needs a single items schema")),
        }
    }
    for (name, prop) in s.properties.iter().flatten() {
        let child = if path == "." {
            format!(".{name}")
        } else {
            format!("{path}.{name}")
        };
        if root && name == "metadata" {
            let bare = JSONSchemaProps {
                type_: Some("object".into()),
                ..JSONSchemaProps::default()
            };
            if prop != &bare {
                out.push(format!(
                    "{child}: must be just `type: object` (the API server owns metadata)"
                ));
            }
            continue;
        }
        walk(prop, &child, false, out);
    }
}

/// Every node of `schema` that keeps unknown fields (`x-kubernetes-preserve-unknown-fields`).
pub fn preserve_unknown_fields_paths(schema: &JSONSchemaProps) -> Vec<String> {
    fn go(s: &JSONSchemaProps, path: &str, out: &mut Vec<String>) {
        if s.x_kubernetes_preserve_unknown_fields == Some(true) {
            out.push(path.to_string());
        }
        if let Some(JSONSchemaPropsOrArray::Schema(item)) = &s.items {
            go(item, &format!("{path}[]"), out);
        }
        for (name, prop) in s.properties.iter().flatten() {
            go(prop, &format!("{path}.{name}"), out);
        }
    }
    let mut out = Vec::new();
    go(schema, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap()
    }

    fn crd(kind: &str) -> CustomResourceDefinition {
        all()
            .unwrap()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap()
    }

    #[test]
    fn names_and_scopes_follow_openshift() {
        let got: Vec<(String, String, String)> = all()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap(),
                    c.spec.names.plural.clone(),
                    c.spec.scope.clone(),
                )
            })
            .collect();
        let want = [
            (
                "clusternetworks.network.openshift.io",
                "clusternetworks",
                "Cluster",
            ),
            ("hostsubnets.network.openshift.io", "hostsubnets", "Cluster"),
            (
                "netnamespaces.network.openshift.io",
                "netnamespaces",
                "Cluster",
            ),
            (
                "egressnetworkpolicies.network.openshift.io",
                "egressnetworkpolicies",
                "Namespaced",
            ),
        ];
        assert_eq!(
            got,
            want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        );
        for c in all().unwrap() {
            let names = &c.spec.names;
            assert_eq!(
                names.list_kind.as_deref(),
                Some(&*format!("{}List", names.kind))
            );
            assert_eq!(names.short_names, None, "OpenShift has no short names");
            let v = &c.spec.versions;
            assert_eq!(
                (v.len(), v[0].name.as_str(), v[0].served, v[0].storage),
                (1, "v1", true, true)
            );
        }
    }

    #[test]
    fn schemas_are_structural_and_closed() {
        for c in all().unwrap() {
            let s = schema(&c);
            assert_eq!(
                structural_problems(s),
                Vec::<String>::new(),
                "{}",
                c.spec.names.kind
            );
            assert_eq!(
                preserve_unknown_fields_paths(s),
                Vec::<String>::new(),
                "{}: nothing in these kinds is free-form",
                c.spec.names.kind
            );
        }
    }

    #[test]
    fn structural_check_catches_problems() {
        let mut s = schema(&crd("HostSubnet")).clone();
        let props = s.properties.as_mut().unwrap();
        props.get_mut("host").unwrap().type_ = None;
        props.get_mut("metadata").unwrap().description = Some("x".into());
        props.get_mut("egressIPs").unwrap().items = None;
        assert_eq!(
            structural_problems(&s),
            vec![
                ".egressIPs: an array needs a single items schema",
                ".host: no type",
                ".metadata: must be just `type: object` (the API server owns metadata)",
            ]
        );
    }

    /// Whether `value` matches the `pattern` of `field` in `kind`'s schema (no pattern: true).
    fn matches(kind: &str, field: &str, value: &str) -> bool {
        let c = crd(kind);
        let p = schema(&c).properties.as_ref().unwrap();
        p[field].pattern.as_deref().is_none_or(|pat| {
            regex::Regex::new(pat)
                .unwrap_or_else(|e| panic!("{kind}.{field}: {e}"))
                .is_match(value)
        })
    }

    #[test]
    fn what_the_agent_writes_in_every_family_passes_the_schema_patterns() {
        // The seed's objects for an IPv4, a dual-stack and an IPv6-only cluster.
        for flags in [
            "--node-name n",
            "--node-name n --cluster-network 10.128.0.0/14,9 --cluster-network fd01::/48,64 \
             --service-cidr 172.30.0.0/16,fd02::/112",
            "--node-name n --cluster-network fd01::/48,64 --service-cidr fd02::/112 \
             --node-ip fd00::10",
        ] {
            let args: Vec<String> = flags.split_whitespace().map(String::from).collect();
            let cfg = crate::config::Config::from_args(&args).unwrap();
            let dir = std::env::temp_dir().join(format!(
                "sdn-crd-{}-{}",
                std::process::id(),
                flags.len()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let spec = crate::ClusterNetworkSpec::from_config(&cfg).unwrap();
            let st = crate::seed(&dir, "n", cfg.node_ip, &spec).unwrap();
            let cn = st.cluster_network.as_ref().unwrap();
            assert!(
                matches("ClusterNetwork", "serviceNetwork", &cn.service_network),
                "{flags}"
            );
            let hs = st.host_subnet_of("n").unwrap();
            assert!(
                matches("HostSubnet", "hostIP", &hs.host_ip),
                "{flags}: {}",
                hs.host_ip
            );
            assert!(
                matches("HostSubnet", "subnet", &hs.subnet),
                "{flags}: {}",
                hs.subnet
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
        for bad in ["10.0.0.300", "node-1", ""] {
            assert!(!matches("HostSubnet", "hostIP", bad), "{bad}");
        }
        for bad in ["10.128.0.0", "fd01::/64", "10.128.0.0/33"] {
            assert!(!matches("HostSubnet", "subnet", bad), "{bad}");
        }
    }

    #[test]
    fn host_subnet_schema_has_the_fields_and_checks() {
        let c = crd("HostSubnet");
        let s = schema(&c);
        assert_eq!(s.type_.as_deref(), Some("object"));
        assert_eq!(
            s.required.clone().unwrap(),
            vec!["host", "hostIP", "subnet"],
            "apiVersion, kind and metadata are filled by the API server"
        );
        let p = s.properties.as_ref().unwrap();
        let keys: Vec<&str> = p.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "apiVersion",
                "egressCIDRs",
                "egressIPs",
                "host",
                "hostIP",
                "kind",
                "metadata",
                "subnet"
            ]
        );
        assert_eq!(
            p["hostIP"].pattern.as_deref(),
            Some(crate::types::IP_EITHER_PATTERN)
        );
        assert_eq!(
            p["subnet"].pattern.as_deref(),
            Some(crate::types::CIDR_OR_EMPTY_PATTERN)
        );
        let cols: Vec<(String, String)> = c.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.json_path.clone()))
            .collect();
        assert_eq!(
            cols[..3],
            [
                ("Host".into(), ".host".into()),
                ("Host IP".into(), ".hostIP".into()),
                ("Subnet".into(), ".subnet".into())
            ]
        );
    }

    #[test]
    fn net_namespace_and_cluster_network_ranges() {
        let s = schema(&crd("NetNamespace")).clone();
        let p = s.properties.unwrap();
        let netid = &p["netid"];
        assert_eq!(
            (
                netid.type_.as_deref(),
                netid.format.as_deref(),
                netid.minimum,
                netid.maximum
            ),
            (Some("integer"), Some("int32"), Some(0.0), Some(16777215.0))
        );
        assert_eq!(s.required.unwrap(), vec!["netid", "netname"]);
        let s = schema(&crd("ClusterNetwork")).clone();
        let p = s.properties.unwrap();
        let entry = match p["clusterNetworks"].items.as_ref().unwrap() {
            JSONSchemaPropsOrArray::Schema(e) => e.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            entry.required.clone().unwrap(),
            vec!["CIDR", "hostSubnetLength"]
        );
        let len = &entry.properties.as_ref().unwrap()["hostSubnetLength"];
        assert_eq!((len.minimum, len.maximum), (Some(2.0), Some(30.0)));
        assert_eq!(p["vxlanPort"].maximum, Some(65535.0));
    }

    #[test]
    fn egress_network_policy_schema() {
        let s = schema(&crd("EgressNetworkPolicy")).clone();
        assert_eq!(s.required.clone().unwrap(), vec!["spec"]);
        let spec = &s.properties.unwrap()["spec"];
        assert_eq!(spec.required.clone().unwrap(), vec!["egress"]);
        let rule = match spec.properties.as_ref().unwrap()["egress"]
            .items
            .as_ref()
            .unwrap()
        {
            JSONSchemaPropsOrArray::Schema(e) => e.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(rule.required.clone().unwrap(), vec!["to", "type"]);
        let p = rule.properties.unwrap();
        assert_eq!(p["type"].type_.as_deref(), Some("string"));
        assert_eq!(
            p["type"]
                .enum_
                .iter()
                .flatten()
                .map(|j| j.0.clone())
                .collect::<Vec<_>>(),
            vec![serde_json::json!("Allow"), serde_json::json!("Deny")]
        );
        let to = p["to"].properties.clone().unwrap();
        assert_eq!(to.keys().collect::<Vec<_>>(), ["cidrSelector", "dnsName"]);
    }

    #[test]
    fn rendered_yaml_parses_back_and_the_objects_match_their_schema_names() {
        let text = render_yaml().unwrap();
        assert!(text.starts_with("# CustomResourceDefinitions of network.openshift.io/v1"));
        assert!(text.contains(REGENERATE));
        let docs: Vec<CustomResourceDefinition> = crate::yaml::from_multiple(&text).unwrap();
        assert_eq!(docs, all().unwrap());
    }

    #[test]
    fn the_types_work_with_kube_runtime_stores() {
        use kube::runtime::reflector::{store, ObjectRef};
        use kube::runtime::watcher::Event;
        // An object as the API server sends it: server-filled metadata included.
        let json = serde_json::json!({
            "apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
            "metadata": {"name": "node-1", "uid": "u-1", "resourceVersion": "42",
                         "creationTimestamp": "2024-01-02T03:04:05Z", "generation": 1},
            "host": "node-1", "hostIP": "192.168.1.10", "subnet": "10.128.0.0/23"});
        let hs: HostSubnet = serde_json::from_value(json).unwrap();
        let (reader, mut writer) = store::<HostSubnet>();
        writer.apply_watcher_event(&Event::Apply(hs.clone()));
        let got = reader.get(&ObjectRef::new("node-1")).unwrap();
        assert_eq!(*got, hs);
        assert_eq!(got.meta().resource_version.as_deref(), Some("42"));
        let (reader, mut writer) = store::<EgressNetworkPolicy>();
        let enp = EgressNetworkPolicy::new("tenant-a", "default", Vec::new());
        writer.apply_watcher_event(&Event::Apply(enp.clone()));
        let key = ObjectRef::new("default").within("tenant-a");
        assert_eq!(*reader.get(&key).unwrap(), enp);
        let api = kube::core::ApiResource::erase::<NetNamespace>(&());
        assert_eq!(
            (
                api.group.as_str(),
                api.version.as_str(),
                api.kind.as_str(),
                api.plural.as_str()
            ),
            (
                "network.openshift.io",
                "v1",
                "NetNamespace",
                "netnamespaces"
            )
        );
    }

    #[test]
    fn resources_have_the_api_paths_of_openshift() {
        assert_eq!(
            HostSubnet::url_path(&(), None),
            "/apis/network.openshift.io/v1/hostsubnets"
        );
        assert_eq!(
            EgressNetworkPolicy::url_path(&(), Some("tenant-a")),
            "/apis/network.openshift.io/v1/namespaces/tenant-a/egressnetworkpolicies"
        );
        assert_eq!(ClusterNetwork::api_version(&()), "network.openshift.io/v1");
        assert_eq!(NetNamespace::plural(&()), "netnamespaces");
    }
}
