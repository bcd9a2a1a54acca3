//! The CNI command set and the CNI error object, as the agent uses them: both come from the
//! `cni-proto` crate the shim shares, so the two ends cannot disagree on a command, a code or a
//! version. What is the agent's own is the rule that VERSION never reaches it ([`parse_command`]).
//!
//! A [`CniError`] is what the runtime finally sees (the shim prints it verbatim): a spec error
//! code, a one-line `msg` that names the field and the offending value, and optional `details`
//! (which step failed, what to do). Handlers build them with the per-code constructors, so the
//! code is chosen once, where the failure is understood. Codes below 100 are the spec's; 100 and
//! above are ours (see [`codes`]).

pub use cni_proto::{codes, CniError, Command};

/// Parses a forwarded `CNI_COMMAND`; the error is code 4 (invalid environment variable), and
/// VERSION is refused: the shim answers it alone.
pub fn parse_command(s: &str) -> Result<Command, CniError> {
    match s.parse::<Command>() {
        Ok(Command::Version) => Err(CniError::invalid_env(
            "CNI_COMMAND VERSION is answered by the sdn-cni shim and must not be forwarded to the agent",
        )),
        Ok(c) => Ok(c),
        Err(_) => Err(CniError::invalid_env(format!(
            "CNI_COMMAND {s:?} is not one of {}",
            Command::list(true)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_parse() {
        for c in [
            Command::Add,
            Command::Del,
            Command::Check,
            Command::Gc,
            Command::Status,
        ] {
            assert_eq!(parse_command(c.as_str()).unwrap(), c);
        }
        let e = parse_command("VERSION").unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("answered by the sdn-cni shim"), "{e}");
        let e = parse_command("add").unwrap_err();
        assert_eq!(e.code, 4);
        assert_eq!(
            e.msg,
            "CNI_COMMAND \"add\" is not one of ADD, DEL, CHECK, GC, STATUS"
        );
    }
}
