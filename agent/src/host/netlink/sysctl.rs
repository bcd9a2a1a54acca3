//! Kernel parameters through `/proc/sys` files (no `sysctl` exec).
//!
//! The `net/` subtree is per network namespace: the kernel resolves it against the netns of the
//! thread that opens the file, so these functions act on the netns of the calling thread. The
//! agent calls them from its own threads, which stay in the node netns.

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::NetlinkError;

/// The root of the sysctl tree.
const PROC_SYS: &str = "/proc/sys";

/// Sets the sysctl `key` (slash form relative to `/proc/sys`, e.g. `net/ipv4/ip_forward`) to
/// `value`, writing only when the current value differs. Returns whether it wrote.
///
/// Idempotent. The dotted form (`net.ipv4.ip_forward`) is not accepted, since interface names in
/// keys may contain dots.
pub fn set_sysctl(key: &str, value: &str) -> Result<bool, NetlinkError> {
    let path = sysctl_path(key)?;
    let current = fs::read_to_string(&path)
        .map_err(|e| NetlinkError::os(format!("reading {}", path.display()), e))?;
    if current.trim() == value.trim() {
        return Ok(false);
    }
    fs::write(&path, value)
        .map_err(|e| NetlinkError::os(format!("writing {value:?} to {}", path.display()), e))?;
    Ok(true)
}

/// Reads the sysctl `key` (slash form), trimmed.
pub fn get_sysctl(key: &str) -> Result<String, NetlinkError> {
    let path = sysctl_path(key)?;
    fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| NetlinkError::os(format!("reading {}", path.display()), e))
}

/// `net.ipv4.ip_forward = 1` in the netns of the calling thread. Idempotent.
pub fn enable_ip_forward() -> Result<(), NetlinkError> {
    set_sysctl("net/ipv4/ip_forward", "1").map(|_| ())
}

/// Takes the node kernel out of a pod's path on the host end `ifname` of its veth.
///
/// With the userspace datapath OVS reads the port through a packet socket, and the node's kernel
/// *also* sees every frame the pod sends on it. Left alone, the kernel would answer the pod's ARP
/// for any node address with the veth's own MAC, and route IP sent to that MAC, with whatever
/// source the pod wrote, out of tun0 back into br0, where tables 0 and 25 trust the source
/// address: a way around the spoof guard of table 20 and across tenants. So on the host end:
/// `forwarding=0` (never route what arrives here), `rp_filter=1` (strict: no route points at the
/// veth, so every IP packet arriving on it fails the reverse-path check and is dropped, local
/// delivery included), `arp_ignore=8` (never answer ARP here), and IPv6 off (no link-local
/// address, no neighbour discovery). With the kernel datapath the frames never reach the stack
/// and these settings change nothing. Idempotent.
pub fn isolate_host_veth(ifname: &str) -> Result<(), NetlinkError> {
    isolate_host_veth_ipv4(ifname)?;
    let v6 = format!("net/ipv6/conf/{ifname}/disable_ipv6");
    if sysctl_path(&v6)?.exists() {
        set_sysctl(&v6, "1")?;
    }
    Ok(())
}

/// The IPv4 half of [`isolate_host_veth`] (`forwarding=0`, `rp_filter=1`, `arp_ignore=8`):
/// sysctls only, no address or route changes (a pod adopted at a takeover keeps its veth's
/// IPv6, see `cluster::ports::keys::HARDENED`). Idempotent.
pub fn isolate_host_veth_ipv4(ifname: &str) -> Result<(), NetlinkError> {
    super::validate_ifname(ifname)?;
    for (key, value) in [("forwarding", "0"), ("rp_filter", "1"), ("arp_ignore", "8")] {
        set_sysctl(&format!("net/ipv4/conf/{ifname}/{key}"), value)?;
    }
    Ok(())
}

fn sysctl_path(key: &str) -> Result<PathBuf, NetlinkError> {
    let rel = Path::new(key);
    let plain = !key.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(NetlinkError::os(
            format!("sysctl key {key:?}"),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "expected a relative path below /proc/sys such as net/ipv4/ip_forward",
            ),
        ));
    }
    Ok(Path::new(PROC_SYS).join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_must_stay_below_proc_sys() {
        assert_eq!(
            sysctl_path("net/ipv4/ip_forward").unwrap(),
            Path::new("/proc/sys/net/ipv4/ip_forward")
        );
        for bad in ["", "/etc/passwd", "net/../../etc/passwd", "./net"] {
            let err = sysctl_path(bad).unwrap_err().to_string();
            assert!(err.contains("expected a relative path"), "{bad}: {err}");
        }
    }

    #[test]
    fn get_sysctl_reads_a_value() {
        // Present in every netns; 0 or 1.
        let v = get_sysctl("net/ipv4/ip_forward").unwrap();
        assert!(v == "0" || v == "1", "{v}");
    }
}
