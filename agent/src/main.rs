//! `sdn-agent`: the node agent. It owns `br0` over OVSDB and OpenFlow, serves the CNI shim and
//! programs the pipeline. This binary is filled by the node issue; the foundation only proves the
//! clients it will use (crate `ovs`), so for now it says so and exits non-zero.

fn main() -> anyhow::Result<()> {
    anyhow::bail!(
        "sdn-agent {}: the node agent is not implemented yet (the ovs clients are); \
         see README.md for what works today",
        env!("CARGO_PKG_VERSION")
    )
}
