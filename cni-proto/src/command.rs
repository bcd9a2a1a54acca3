//! The CNI commands and the environment variables each one needs.
//!
//! The shim checks the variables a command needs before it forwards anything ([`Command::required_env`]);
//! the agent validates their contents. VERSION is answered by the shim alone and never crosses
//! the socket ([`Command::is_forwarded`]).

use std::fmt;
use std::str::FromStr;

/// A CNI command (`CNI_COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Attach the container to the network.
    Add,
    /// Detach; idempotent.
    Del,
    /// Verify the attachment is as ADD left it (0.4.0+).
    Check,
    /// Remove resources of attachments not in the valid list (1.1.0+).
    Gc,
    /// Report whether the plugin is ready for ADDs (1.1.0+).
    Status,
    /// Report the supported versions (answered by the shim alone).
    Version,
}

/// Every command, in the order the spec lists them.
pub const ALL: [Command; 6] = [
    Command::Add,
    Command::Del,
    Command::Check,
    Command::Gc,
    Command::Status,
    Command::Version,
];

impl Command {
    /// The `CNI_COMMAND` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Whether the command concerns one attachment (container id + ifname), as opposed to the
    /// whole network (GC, STATUS, VERSION).
    pub fn is_per_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }

    /// Whether the shim forwards the command to the agent (all but VERSION).
    pub fn is_forwarded(self) -> bool {
        self != Command::Version
    }

    /// The variables that must be set and non-empty for this command. DEL needs no netns: the
    /// namespace may already be gone and DEL must still clean up.
    pub fn required_env(self) -> &'static [&'static str] {
        match self {
            Command::Add | Command::Check => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME"],
            Command::Gc | Command::Status | Command::Version => &[],
        }
    }

    /// The commands as one comma-separated list, for error messages; `forwarded` leaves
    /// VERSION out.
    pub fn list(forwarded: bool) -> String {
        ALL.iter()
            .filter(|c| !forwarded || c.is_forwarded())
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `CNI_COMMAND` that is not a CNI command (case matters: the spec spells them in capitals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCommand(pub String);

impl fmt::Display for UnknownCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CNI_COMMAND {:?} is not one of {}",
            self.0,
            Command::list(false)
        )
    }
}

impl std::error::Error for UnknownCommand {}

impl FromStr for Command {
    type Err = UnknownCommand;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCommand(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_round_trips_and_case_matters() {
        for c in ALL {
            assert_eq!(c.as_str().parse::<Command>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        let e = "add".parse::<Command>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "CNI_COMMAND \"add\" is not one of ADD, DEL, CHECK, GC, STATUS, VERSION"
        );
    }

    #[test]
    fn environment_and_forwarding() {
        assert_eq!(Command::list(true), "ADD, DEL, CHECK, GC, STATUS");
        assert!(!Command::Version.is_forwarded());
        assert!(Command::Del
            .required_env()
            .iter()
            .all(|v| *v != "CNI_NETNS"));
        assert!(Command::Add.required_env().contains(&"CNI_NETNS"));
        assert!(Command::Gc.required_env().is_empty());
        assert!(Command::Check.is_per_attachment() && !Command::Status.is_per_attachment());
    }
}
