//! CNI error codes: the specification's well-known codes (below 100) and ours (100 and above).
//! A [`crate::CniError`] carries one; the runtime decides on retries by it (11 is transient).

/// Incompatible CNI version.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Unsupported field in the network configuration.
pub const UNSUPPORTED_FIELD: u32 = 2;
/// Container unknown or does not exist.
pub const UNKNOWN_CONTAINER: u32 = 3;
/// Invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS,
/// CNI_IFNAME, CNI_ARGS, CNI_PATH).
pub const INVALID_ENV: u32 = 4;
/// I/O failure.
pub const IO_FAILURE: u32 = 5;
/// Failed to decode content (bad JSON).
pub const DECODE_FAILURE: u32 = 6;
/// Invalid network configuration.
pub const INVALID_CONFIG: u32 = 7;
/// Try again later (transient: the agent is busy, starting, not running or timed out).
pub const TRY_AGAIN_LATER: u32 = 11;
/// STATUS: the plugin is not available (new ADDs would fail).
pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
/// STATUS: the plugin is not available and existing containers may have limited connectivity.
pub const LIMITED_CONNECTIVITY: u32 = 51;
/// Ours: an internal failure of the agent; `details` names the step.
pub const INTERNAL: u32 = 100;
/// Ours: the connecting process is not allowed to talk to the agent (SO_PEERCRED).
pub const PERMISSION_DENIED: u32 = 101;
