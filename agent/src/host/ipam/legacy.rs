//! Leases in the format of the host-local openshift-sdn runs: containernetworking/plugins
//! v0.6.0, vendored by openshift/sdn (its `go.mod` pins it; the node's `osdn-host-local` is
//! built from `vendor/.../plugins/ipam/host-local`). The hand-back writes its pods' leases so,
//! because that version reads and releases nothing else.
//!
//! What v0.6.0's `backend/disk/backend.go` does, and so what is done here:
//! - `Reserve`: the file `<dir>/<ip>` created `O_RDWR|O_EXCL|O_CREAT`, mode `0600`, holding
//!   `strings.TrimSpace(id)` and nothing more (no interface name, no line break), then
//!   `last_reserved_ip.<rangeID>` rewritten with the address, mode `0600`; openshift-sdn's IPAM
//!   config has one range, so the range id is `0`;
//! - `ReleaseByID` (its DEL): every file of the directory whose `TrimSpace`d content *equals*
//!   the `TrimSpace`d container id is removed. A file holding `<id>\r\neth0` (the newer
//!   format, what [`super::Store`] writes) is never equal, so such a lease would outlive its pod
//!   and the node's subnet would run out with churn;
//! - the lock (`backend/disk/lock.go`): `flock(LOCK_EX)` on the lease *directory* itself, not on
//!   a `lock` file (newer versions lock a file named `lock`).
//!
//! The newer [`super::Store`] reads these files as "legacy" leases (empty interface name), which
//! is how a takeover reads openshift-sdn's leases.

use std::fs::{self, File};
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::unix::fs::DirBuilderExt;

use cluster::files::{self, Durability};
use std::path::{Path, PathBuf};

use super::*;

/// v0.6.0's lease and last-reserved files' mode (`backend.go` `Reserve`).
const MODE: u32 = 0o600;

/// A lease directory written as host-local v0.6.0 writes it.
#[derive(Debug, Clone)]
pub struct V060Dir {
    dir: PathBuf,
}

impl V060Dir {
    /// Opens (creating it `0755` if needed, as `disk.New` does) `<data_dir>/<network>`.
    pub fn open(data_dir: &Path, network: &str) -> Result<V060Dir, IpamError> {
        let dir = data_dir.join(network);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(io_err("create lease directory", &dir))?;
        Ok(V060Dir { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `Reserve(id, ip, "0")` under the directory's flock: `ip` leased to container `id`.
    /// Idempotent when `id` holds it already; [`IpamError::InUse`] naming the holder when
    /// another container does.
    pub fn reserve(&self, ip: Ipv4Addr, id: &str) -> Result<(), IpamError> {
        super::store::validate_id(id)?;
        let _lock = self.lock()?;
        let path = self.dir.join(ip.to_string());
        if files::create_new(&path, id.trim().as_bytes(), MODE, Durability::PowerLoss)
            .map_err(io_err("create lease file", &path))?
        {
            let last = self
                .dir
                .join(format!("{LAST_RESERVED_PREFIX}{}", Ipv4Addr::RANGE_SET));
            return files::write(
                &last,
                ip.to_string().as_bytes(),
                MODE,
                Durability::PowerLoss,
            )
            .map_err(io_err("write the last reserved address", &last));
        }
        let mut content = String::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_string(&mut content))
            .map_err(io_err("read lease file", &path))?;
        let held = Lease::parse(ip, &content);
        if held.container_id != id.trim() {
            return Err(IpamError::InUse {
                ip: ip.into(),
                container_id: held.container_id,
                ifname: held.ifname,
                path,
            });
        }
        // Ours. In the newer format (an earlier hand-back's, or a newer host-local's) it is
        // rewritten in v0.6.0's, which alone that version releases.
        if !held.ifname.is_empty() {
            files::write(&path, id.trim().as_bytes(), MODE, Durability::PowerLoss)
                .map_err(io_err("rewrite lease file", &path))?;
        }
        Ok(())
    }

    /// v0.6.0's lock: `flock(LOCK_EX)` on the directory (blocking, as it blocks).
    fn lock(&self) -> Result<File, IpamError> {
        let d = File::open(&self.dir).map_err(io_err("open lease directory", &self.dir))?;
        d.lock()
            .map_err(io_err("lock lease directory", &self.dir))?;
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn leases_hold_the_id_alone_with_v060_s_modes() {
        let tmp = std::env::temp_dir().join(format!("v060-{}", std::process::id()));
        let d = V060Dir::open(&tmp, "openshift-sdn").unwrap();
        let ip = Ipv4Addr::new(10, 128, 2, 9);
        d.reserve(ip, "abc123").unwrap();
        d.reserve(ip, "abc123").unwrap();
        let lease = d.dir().join("10.128.2.9");
        assert_eq!(fs::read_to_string(&lease).unwrap(), "abc123");
        assert_eq!(
            fs::metadata(&lease).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let last = d.dir().join("last_reserved_ip.0");
        assert_eq!(fs::read_to_string(&last).unwrap(), "10.128.2.9");
        assert!(!d.dir().join(LOCK_FILE).exists(), "v0.6.0 has no lock file");
        let err = d.reserve(ip, "other").unwrap_err().to_string();
        assert!(err.contains("abc123"), "{err}");
        // The same container's lease in the newer format is rewritten in v0.6.0's.
        let newer = d.dir().join("10.128.2.10");
        fs::write(&newer, "def456\r\neth0").unwrap();
        d.reserve(Ipv4Addr::new(10, 128, 2, 10), "def456").unwrap();
        assert_eq!(fs::read_to_string(&newer).unwrap(), "def456");
        assert_eq!(
            fs::metadata(&newer).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::remove_file(&newer).unwrap();
        // The newer store reads it as a legacy lease of the container.
        let leases = Store::new(&tmp, "openshift-sdn").unwrap().leases().unwrap();
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].container_id, "abc123");
        assert!(leases[0].ifname.is_empty());
        fs::remove_dir_all(&tmp).unwrap();
    }
}
