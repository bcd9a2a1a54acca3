//! Property tests of every parser that reads input from outside the agent: the CNI request body
//! (every field, and the network config in it), `CNI_ARGS`, `runtimeConfig` (port mappings and
//! bandwidth), the agent's configuration (flags and file), and cluster state files.
//!
//! What holds for any input, generated at random (`proptest`, a few hundred cases each) and by
//! mutating valid inputs: no parser panics; a refusal is a CNI error with a code the spec defines
//! and a message that says something, or an error whose text is not empty; what is accepted is
//! consistent (ports are ports, rates are positive, a request keeps its command and container).
//! No root, no OVS: pure parsing.

use std::time::Duration;

use agent::cni::{CniArgs, NetConf, Request, RequestBody};
use agent::features::bandwidth::Bandwidth;
use cluster::config::Config;
use cluster::types::{parse_objects, Format};
use proptest::prelude::*;
use serde_json::{json, Value};

/// CNI error codes the spec (and the agent) use.
fn known_code(code: u32) -> bool {
    matches!(code, 1..=7 | 11 | 50 | 51 | 100..=199)
}

/// Any JSON value, a few levels deep, with the keys and strings runtimes and fuzzers send.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
        prop_oneof![
            Just("1.0.0"),
            Just("0.4.0"),
            Just("eth0"),
            Just("tcp"),
            Just("10.128.0.5"),
            Just("0.0.0.0"),
            Just("sdn-cni")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    let key = prop_oneof![
        Just("cniVersion".to_string()),
        Just("name".to_string()),
        Just("type".to_string()),
        Just("socket".to_string()),
        Just("namespace".to_string()),
        Just("timeoutSeconds".to_string()),
        Just("runtimeConfig".to_string()),
        Just("portMappings".to_string()),
        Just("bandwidth".to_string()),
        Just("hostPort".to_string()),
        Just("HostPort".to_string()),
        Just("containerPort".to_string()),
        Just("protocol".to_string()),
        Just("hostIP".to_string()),
        Just("ingressRate".to_string()),
        Just("EgressBurst".to_string()),
        Just("prevResult".to_string()),
        Just("ips".to_string()),
        Just("cni.dev/valid-attachments".to_string()),
        "[a-zA-Z/.]{1,12}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid ADD body, the starting point of the mutations.
fn valid_body() -> Value {
    json!({
        "protocol": 1,
        "command": "ADD",
        "containerId": "c0ffee",
        "netns": "/var/run/netns/p1",
        "ifname": "eth0",
        "args": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
        "path": "/opt/cni/bin",
        "config": {
            "cniVersion": "1.0.0", "name": "sdn", "type": "sdn-cni",
            "runtimeConfig": {
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {"ingressRate": 1000000, "egressRate": 1000000}
            }
        }
    })
}

fn check_request(v: &Value) {
    let Ok(body) = serde_json::from_value::<RequestBody>(v.clone()) else {
        // The server answers a body that is not the protocol's shape itself (code 5).
        return;
    };
    match Request::from_body(body, tokio::time::Instant::now(), Duration::from_secs(120)) {
        Ok(r) => {
            assert_eq!(Some(r.command.as_str()), v["command"].as_str(), "{v}");
        }
        Err(e) => {
            assert!(known_code(e.code), "code {} for {v}: {}", e.code, e.msg);
            assert!(!e.msg.trim().is_empty(), "empty message for {v}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_request_body_is_accepted_or_refused_with_a_code(v in json_value()) {
        check_request(&v);
    }

    #[test]
    fn a_valid_body_with_one_field_replaced_is_accepted_or_refused_with_a_code(
        field in prop_oneof![
            Just("command"), Just("containerId"), Just("netns"), Just("ifname"),
            Just("args"), Just("path"), Just("config"), Just("protocol")
        ],
        junk in json_value(),
    ) {
        let mut v = valid_body();
        v[field] = junk;
        check_request(&v);
    }

    #[test]
    fn a_valid_config_with_one_key_replaced_is_accepted_or_refused_with_a_code(
        key in prop_oneof![
            Just("cniVersion"), Just("name"), Just("type"), Just("socket"), Just("namespace"),
            Just("timeoutSeconds"), Just("runtimeConfig"), Just("prevResult"),
            Just("cni.dev/valid-attachments")
        ],
        junk in json_value(),
    ) {
        let mut v = valid_body()["config"].clone();
        v[key] = junk;
        if let Err(e) = NetConf::parse(&v) {
            prop_assert!(known_code(e.code), "code {} for {}: {}", e.code, v, e.msg);
            prop_assert!(!e.msg.trim().is_empty());
        }
    }

    #[test]
    fn cni_args_never_panic_and_keep_what_they_accept(raw in ".{0,80}") {
        match CniArgs::parse(&raw) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(known_code(e.code), "code {} for {raw:?}", e.code);
                prop_assert!(!e.msg.trim().is_empty());
            }
        }
    }

    #[test]
    fn runtime_config_gives_real_ports_and_positive_rates(rc in json_value()) {
        if let Ok(mappings) = agent::features::hostports::parse(Some(&rc)) {
            for m in mappings {
                prop_assert!(m.host_port != 0 && m.container_port != 0, "{rc}");
            }
        }
        if let Ok(bw) = Bandwidth::from_pod(None, Some(&rc)) {
            for l in [bw.ingress, bw.egress].into_iter().flatten() {
                prop_assert!(l.rate > 0, "{rc}");
            }
        }
        // Inside a runtimeConfig, as runtimes send it.
        let wrapped = json!({"portMappings": rc.clone(), "bandwidth": rc});
        let _ = agent::features::hostports::parse(Some(&wrapped));
        let _ = Bandwidth::from_pod(None, Some(&wrapped));
    }

    #[test]
    fn agent_flags_are_accepted_or_refused_with_a_message(
        flag in prop_oneof![
            Just("--mtu"), Just("--vxlan-port"), Just("--node-ip"), Just("--cluster-network"),
            Just("--service-cidr"), Just("--mode"), Just("--node-name"), Just("--cluster-state"),
            Just("--port-pool-size"), Just("--request-timeout"), Just("--pod-tx-checksum-off")
        ],
        value in ".{0,30}",
    ) {
        let args = vec![
            "sdn-agent".to_string(),
            "--node-name".into(),
            "n1".into(),
            format!("{flag}={value}"),
        ];
        if let Err(e) = Config::from_args(&args) {
            let text = format!("{e:#}");
            prop_assert!(!text.trim().is_empty());
        }
    }

    #[test]
    fn config_files_are_accepted_or_refused_with_a_message(text in "(.|\n){0,200}") {
        if let Err(e) = cluster::yaml::from_str::<Config>(&text) {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        // Valid keys with random values.
        let doc = format!("nodeName: n1\nmtu: {text}\n");
        let _ = cluster::yaml::from_str::<Config>(&doc).map(|c| c.validate());
    }

    #[test]
    fn cluster_state_files_never_panic(text in "(.|\n){0,300}", v in json_value()) {
        let _ = parse_objects(&text, Format::Yaml);
        let _ = parse_objects(&text, Format::Json);
        let _ = parse_objects(&v.to_string(), Format::Json);
        let doc = format!(
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {{name: t}}\nnetname: t\nnetid: {text}\n"
        );
        if let Ok(objects) = parse_objects(&doc, Format::Yaml) {
            for o in objects {
                let _ = o.validate();
            }
        }
    }
}
