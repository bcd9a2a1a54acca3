//! The flow corpus: every flow of `shared/design/pipeline.md` with real values, plus flows that
//! cover every other match field and action the `ovs` crate supports (`tests/corpus/`).
//!
//! Each line is written exactly as `ovs-ofctl -O OpenFlow13 --no-names --no-stats dump-flows`
//! prints it, so the file is at once the input of the integration tests and their expected
//! output.

use ovs::flow::{parse_flow, Flow, Names};

/// The corpus text.
pub const PIPELINE: &str = include_str!("../corpus/pipeline.flows");

/// Port numbers and names of the corpus bridge.
pub const PORTS: [(u32, &str); 3] = [(1, "vxlan0"), (2, "tun0"), (3, "pod3")];

/// The corpus lines (comments and blank lines removed).
pub fn lines() -> Vec<&'static str> {
    PIPELINE.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// The corpus as flows.
pub fn flows() -> Vec<Flow> {
    lines()
        .into_iter()
        .map(|l| parse_flow(l, &Names::new()).unwrap_or_else(|e| panic!("corpus line {l}: {e}")))
        .collect()
}

/// The table names of the pipeline and the port names of the corpus bridge.
pub fn names() -> Names {
    let mut names = Names::new().tables(flows::Table::names());
    for (no, name) in PORTS {
        names = names.port(no, name);
    }
    names
}
