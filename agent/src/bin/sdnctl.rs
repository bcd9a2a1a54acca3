//! `sdnctl`: the operator CLI. Its commands (status, pods, flows, trace, vnids) arrive with the
//! node and multitenant issues; for now it says so and exits non-zero.

fn main() -> anyhow::Result<()> {
    anyhow::bail!(
        "sdnctl {}: no commands yet; see README.md",
        env!("CARGO_PKG_VERSION")
    )
}
