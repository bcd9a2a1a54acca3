//! Keeping pods' MLD messages off br0: a `tc` filter on each pool peer's egress that drops
//! them before they cross the veth.
//!
//! A dual-stack pod's kernel joins the solicited-node group of its IPv6 address and sends two
//! MLDv2 reports for it (the join is unconditional, the repeat count is a global sysctl with a
//! minimum of one). Table 0 drops MLD from anyone (nothing on br0 listens to it), but each
//! report still reaches ovs-vswitchd, and on the datapath leaves a flow for its input port
//! until it has been idle for 10 s, which every revalidation translates again: at 1000 pods
//! that was about 130 translations per ADD on the userspace datapath, on a machine where
//! ovs-vswitchd and the agent already share the CPU. A pod on a pool port sends through the
//! pool peer (its interface is a passthru macvlan on it, which transmits on the peer), so a
//! filter on the peer's egress, in the agent's parking namespace where no pod can see or
//! change it, stops them at the source.
//!
//! The filter is a classic BPF program in `cls_bpf`'s direct-action mode (it returns "drop" or
//! "continue" itself): kernels without `act_gact` (this project's test machines among them)
//! have `cls_bpf`, and a classic program needs no BPF syscall. It matches exactly what table 0
//! drops as MLD (ICMPv6 types 130, 131, 132 and 143), behind the 8-byte hop-by-hop header
//! (router alert and padding) every MLD message carries; anything else, neighbour discovery
//! included, goes on untouched. Equals:
//!
//! ```text
//! ip netns exec PARKING tc qdisc add dev PEER clsact
//! ip netns exec PARKING tc filter replace dev PEER egress prio 1 handle 1 protocol ipv6 \
//!     bpf da bytecode "$(the program below)"
//! ```
//!
//! It is an economy, not a guard: where it cannot be set (a kernel without `clsact` or
//! `cls_bpf`), the pool port works as before and table 0 still drops the reports. Pods on
//! ports made outside the pool (`portPoolSize: 0`, or the pool empty) send their reports to
//! br0 as before.

use futures::StreamExt;
use netlink_packet_route::tc::{
    TcAttribute, TcBpfFlags, TcFilterBpf, TcFilterBpfOption, TcHandle, TcMessage, TcOption,
};
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::packet_core::{DefaultNla, NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST};
use rtnetlink::Handle;

/// One classic BPF instruction (`struct sock_filter`).
type Insn = (u16, u8, u8, u32);

/// `BPF_LD | BPF_H | BPF_ABS`: load the 16-bit word at offset k.
const LDH: u16 = 0x28;
/// `BPF_LD | BPF_B | BPF_ABS`: load the byte at offset k.
const LDB: u16 = 0x30;
/// `BPF_JMP | BPF_JEQ | BPF_K`: jump by jt if equal to k, else by jf.
const JEQ: u16 = 0x15;
/// `BPF_RET | BPF_K`: return k.
const RET: u16 = 0x06;
/// `TC_ACT_UNSPEC`: not decided here, the packet goes on.
const GO_ON: u32 = u32::MAX;
/// `TC_ACT_SHOT`: drop.
const DROP: u32 = 2;

/// The program, on the frame from its Ethernet header: IPv6 (ethertype at 12), next header
/// hop-by-hop (0, at 14 + 6), the hop-by-hop header's next header ICMPv6 and length 0 (8
/// bytes: at 14 + 40, read as one 16-bit word `0x3a00`), then the ICMPv6 type (at 14 + 40 +
/// 8) one of MLD's four. The jump offsets count instructions after the jump.
pub(crate) const PROGRAM: [Insn; 13] = [
    (LDH, 0, 0, 12),
    (JEQ, 0, 9, 0x86dd),
    (LDB, 0, 0, 20),
    (JEQ, 0, 7, 0),
    (LDH, 0, 0, 54),
    (JEQ, 0, 5, 0x3a00),
    (LDB, 0, 0, 62),
    (JEQ, 4, 0, 143),
    (JEQ, 3, 0, 131),
    (JEQ, 2, 0, 132),
    (JEQ, 1, 0, 130),
    (RET, 0, 0, GO_ON),
    (RET, 0, 0, DROP),
];

/// `TCA_BPF_OPS_LEN` and `TCA_BPF_OPS` (a classic program; the crate names only eBPF's).
const TCA_BPF_OPS_LEN: u16 = 4;
const TCA_BPF_OPS: u16 = 5;
/// `ETH_P_IPV6`.
const ETH_P_IPV6: u16 = 0x86dd;

/// Sets the MLD drop on the egress of link `index` of `handle`'s namespace. Idempotent: an
/// existing `clsact` qdisc is kept and the filter replaced.
pub(crate) async fn drop_mld_on_egress(
    handle: &Handle,
    index: u32,
) -> Result<(), rtnetlink::Error> {
    let index = i32::try_from(index).map_err(|_| {
        rtnetlink::Error::InvalidNla(format!("interface index {index} out of range"))
    })?;
    let mut qdisc = TcMessage::with_index(index);
    qdisc.header.handle = TcHandle::from(0xffff_0000);
    qdisc.header.parent = TcHandle::CLSACT;
    qdisc.attributes = vec![TcAttribute::Kind("clsact".into())];
    match request(
        handle,
        RouteNetlinkMessage::NewQueueDiscipline(qdisc),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .await
    {
        Err(e) if super::error::errno(&e) == Some(libc::EEXIST) => {}
        other => other?,
    }
    let mut filter = TcMessage::with_index(index);
    filter.header.handle = TcHandle::from(1);
    filter.header.parent = TcHandle {
        major: 0xffff,
        minor: TcHandle::MIN_EGRESS,
    };
    // Priority 1 in the high half, the protocol (big-endian on the wire) in the low.
    filter.header.info = (1 << 16) | u32::from(ETH_P_IPV6.to_be());
    filter.attributes = vec![
        TcAttribute::Kind(TcFilterBpf::KIND.into()),
        TcAttribute::Options(vec![
            TcOption::Bpf(TcFilterBpfOption::Other(DefaultNla::new(
                TCA_BPF_OPS_LEN,
                (PROGRAM.len() as u16).to_ne_bytes().to_vec(),
            ))),
            TcOption::Bpf(TcFilterBpfOption::Other(DefaultNla::new(
                TCA_BPF_OPS,
                program_bytes(),
            ))),
            TcOption::Bpf(TcFilterBpfOption::Flags(TcBpfFlags::DirectAction)),
        ]),
    ];
    request(
        handle,
        RouteNetlinkMessage::NewTrafficFilter(filter),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .await
}

/// [`PROGRAM`] as the kernel's `struct sock_filter` array (host byte order).
fn program_bytes() -> Vec<u8> {
    PROGRAM
        .iter()
        .flat_map(|&(code, jt, jf, k)| {
            let mut insn = Vec::with_capacity(8);
            insn.extend_from_slice(&code.to_ne_bytes());
            insn.extend_from_slice(&[jt, jf]);
            insn.extend_from_slice(&k.to_ne_bytes());
            insn
        })
        .collect()
}

/// Sends one request with `flags` besides `NLM_F_REQUEST | NLM_F_ACK`, and waits for its
/// answer.
async fn request(
    handle: &Handle,
    msg: RouteNetlinkMessage,
    flags: u16,
) -> Result<(), rtnetlink::Error> {
    let mut req = NetlinkMessage::from(msg);
    req.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    let mut answers = handle.clone().request(req)?;
    while let Some(answer) = answers.next().await {
        if let NetlinkPayload::Error(e) = answer.payload {
            if e.code.is_some() {
                return Err(rtnetlink::Error::NetlinkError(e));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on `frame` as the kernel would (classic BPF, the subset it uses).
    fn run(frame: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0;
        loop {
            let (code, jt, jf, k) = PROGRAM[pc];
            pc += 1;
            let at = k as usize;
            match code {
                LDH => match frame.get(at..at + 2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return 0, // out of the frame: the kernel's program ends with 0
                },
                LDB => match frame.get(at) {
                    Some(b) => a = u32::from(*b),
                    None => return 0,
                },
                JEQ => pc += usize::from(if a == k { jt } else { jf }),
                RET => return k,
                other => panic!("instruction {other:#x} not in the program"),
            }
        }
    }

    /// An Ethernet + IPv6 frame with `next` as next header and `payload` after the IPv6 header.
    fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![
            0x33, 0x33, 0, 0, 0, 0x16, 0x0a, 0x58, 10, 128, 0, 5, 0x86, 0xdd,
        ];
        let mut hdr = [0u8; 40];
        hdr[0] = 0x60;
        hdr[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        hdr[6] = next;
        hdr[7] = 1;
        f.extend_from_slice(&hdr);
        f.extend_from_slice(payload);
        f
    }

    /// A hop-by-hop header (router alert, PadN) then ICMPv6 of `icmp_type`.
    fn behind_hop_by_hop(icmp_type: u8) -> Vec<u8> {
        let mut p = vec![58, 0, 5, 2, 0, 0, 1, 0];
        p.extend_from_slice(&[icmp_type, 0, 0, 0, 0, 0, 0, 0]);
        p
    }

    #[test]
    fn the_program_drops_mld_and_nothing_else() {
        for t in [130, 131, 132, 143] {
            assert_eq!(run(&ipv6(0, &behind_hop_by_hop(t))), DROP, "MLD type {t}");
        }
        // Neighbour discovery, echo, router solicitation behind the same header: not MLD.
        for t in [128, 129, 133, 135, 136] {
            assert_eq!(run(&ipv6(0, &behind_hop_by_hop(t))), GO_ON, "type {t}");
        }
        // ICMPv6 without the hop-by-hop header, whatever its type (real MLD always has it).
        assert_eq!(run(&ipv6(58, &[143, 0, 0, 0, 0, 0, 0, 0])), GO_ON);
        // A longer hop-by-hop header, UDP behind it, IPv4, a runt frame.
        let mut long = behind_hop_by_hop(143);
        long[1] = 1;
        assert_eq!(run(&ipv6(0, &long)), GO_ON);
        let mut udp = behind_hop_by_hop(143);
        udp[0] = 17;
        assert_eq!(run(&ipv6(0, &udp)), GO_ON);
        let mut v4 = ipv6(0, &behind_hop_by_hop(143));
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(run(&v4), GO_ON);
        assert_eq!(run(&ipv6(0, &[])), 0, "a frame too short ends the program");
    }

    #[test]
    fn the_program_is_laid_out_as_the_kernel_reads_it() {
        let bytes = program_bytes();
        assert_eq!(bytes.len(), 8 * PROGRAM.len());
        // Every jump lands inside the program, and the last two instructions are the returns.
        for (i, &(code, jt, jf, _)) in PROGRAM.iter().enumerate() {
            if code == JEQ {
                assert!(
                    i + 1 + usize::from(jt.max(jf)) < PROGRAM.len(),
                    "jump at {i}"
                );
            }
        }
        assert_eq!(PROGRAM[11], (RET, 0, 0, GO_ON));
        assert_eq!(PROGRAM[12], (RET, 0, 0, DROP));
        assert_eq!(
            &bytes[..8],
            &[&LDH.to_ne_bytes()[..], &[0, 0], &12u32.to_ne_bytes()].concat()[..]
        );
    }
}
