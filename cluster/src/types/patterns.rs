//! The `pattern`s of the CRDs' address and CIDR fields (the API server checks them with RE2),
//! built from one copy of each piece so they cannot drift apart.

/// The pieces the patterns below are built of:
/// an IPv4 address in dotted decimal without leading zeros (what `Ipv4Addr` parses), an IPv4
/// prefix length, the shape of an IPv6 address (hex digits and colons; the agent parses it
/// strictly), an IPv6 prefix length.
macro_rules! ipv4 {
    () => {
        r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    };
}
macro_rules! prefix4 {
    () => {
        r"/(3[0-2]|[12]?[0-9])"
    };
}
macro_rules! ipv6_shape {
    () => {
        r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*"
    };
}
macro_rules! prefix6 {
    () => {
        r"/(12[0-8]|1[01][0-9]|[1-9]?[0-9])"
    };
}

/// An IPv4 address in dotted decimal without leading zeros (what `Ipv4Addr` parses).
pub const IPV4_PATTERN: &str = concat!("^", ipv4!(), "$");
/// An IPv4 CIDR (address as [`IPV4_PATTERN`], prefix 0..=32).
pub const CIDR_PATTERN: &str = concat!("^", ipv4!(), prefix4!(), "$");
/// An IPv4 address as [`IPV4_PATTERN`], or the shape of an IPv6 one: a HostSubnet's `hostIP`,
/// IPv6 on an IPv6-only cluster.
pub const IP_EITHER_PATTERN: &str = concat!("^", ipv4!(), "$|^", ipv6_shape!(), "$");
/// An IPv4 CIDR as [`CIDR_PATTERN`], or empty: the IPv4 subnet or service network of an
/// IPv6-only cluster, which has none (its IPv6 ones are in annotations).
pub const CIDR_OR_EMPTY_PATTERN: &str = concat!("^", ipv4!(), prefix4!(), "$|^$");
/// An IPv4 CIDR as [`CIDR_PATTERN`], or the shape of an IPv6 one with a prefix 0..=128: an
/// egress rule's destination in a dual-stack cluster.
pub const CIDR_EITHER_PATTERN: &str = concat!(
    "^",
    ipv4!(),
    prefix4!(),
    "$|^",
    ipv6_shape!(),
    prefix6!(),
    "$"
);
