//! The corpus text is exactly what Open vSwitch prints; our parser reads every line and our
//! `Display` prints it back unchanged (no OVS needed: the corpus lines themselves were taken
//! from `ovs-ofctl dump-flows`, and `corpus.rs` checks that against a live switch).

use sdn_tests::corpus;

#[test]
fn every_corpus_line_parses_and_prints_back_identically() {
    let lines = corpus::lines();
    let flows = corpus::flows();
    assert!(lines.len() >= 70, "corpus too small: {}", lines.len());
    for (line, flow) in lines.iter().zip(&flows) {
        assert_eq!(&flow.to_string(), line);
        flow.validate().unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

#[test]
fn corpus_covers_every_table_of_the_pipeline() {
    let flows = corpus::flows();
    for t in flows::Table::ALL {
        assert!(
            flows.iter().any(|f| f.table == t.id()),
            "no corpus flow in table {}",
            t.name()
        );
    }
}

#[test]
fn base_flow_builders_produce_exactly_the_corpus_base_flows() {
    let built: Vec<String> = flows::base_flows(&corpus::node_config())
        .iter()
        .map(|f| f.to_string())
        .collect();
    let golden: Vec<String> = corpus::lines()
        .into_iter()
        .filter(|l| l.starts_with("cookie=0x1, "))
        .map(String::from)
        .collect();
    let mut a = built.clone();
    let mut b = golden.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "built:\n{}\n", built.join("\n"));
}
