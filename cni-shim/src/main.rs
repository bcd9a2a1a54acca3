//! `sdn-cni`: the CNI plugin the runtime executes. It forwards requests to `sdn-agent`; the
//! forwarding arrives with the node issue. Until then it answers every command with a CNI error
//! object saying so (code 11, "try again later"), which runtimes understand.

use std::io::Write;

fn main() {
    let msg = format!(
        "{{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"sdn-cni {}: the node agent is not available yet\"}}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(std::io::stdout(), "{msg}");
    std::process::exit(1);
}
