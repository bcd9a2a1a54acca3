#!/usr/bin/env bash
# Tears down what deploy/node-up.sh made: deletes the demo pods through sdn-cni (DEL releases
# their flows, ports, veths and leases) and their network namespaces, stops sdn-agent, removes the
# agent's iptables chains, deletes br0 (so ovs-vswitchd removes its tap devices br0 and tun0) and
# the userspace datapath and the agent's ready pool veths, stops the two OVS daemons by their pid files (bounded wait) and removes
# the run directory (with the installed sdn-agent, sdnctl and sdn-cni, agent.yaml and the cluster
# state). Nothing is left in the host's network.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNDIR=${SDN_RUNDIR:-/run/sdn-node}
CNI_BIN=$RUNDIR/cni/bin
export OVS_RUNDIR=$RUNDIR OVS_LOGDIR=$RUNDIR OVS_DBDIR=$RUNDIR
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop() { # pidfile
  if alive "$1"; then
    local pid
    pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" || true
  fi
}

NETCONF="{\"cniVersion\":\"1.0.0\",\"name\":\"sdn\",\"type\":\"sdn-cni\",\"socket\":\"$RUNDIR/cni.sock\"}"
for ns in $(ip netns list | awk '{print $1}' | grep '^sdn-demo-' || true); do
  if alive "$RUNDIR/sdn-agent.pid" && [ -x "$CNI_BIN/sdn-cni" ]; then
    echo "$NETCONF" | env -i CNI_COMMAND=DEL CNI_CONTAINERID="$ns" CNI_NETNS="/run/netns/$ns" \
      CNI_IFNAME=eth0 "$CNI_BIN/sdn-cni" >/dev/null || echo "DEL $ns failed" >&2
  fi
  ip netns del "$ns"
done
stop "$RUNDIR/sdn-agent.pid"
# The agent's ready pool pairs (sdnp<hex>, peer sdnq<hex>); deleting one end deletes the pair.
for l in $(ip -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^sdn[pq][0-9a-f]{10}$' || true); do
  ip link del "$l" 2>/dev/null || true
done
# The agent node-up.sh installed (else a build in the tree) knows its iptables chains.
for agent in "$RUNDIR/bin/sdn-agent" target/release/sdn-agent; do
  if [ -x "$agent" ]; then
    "$agent" remove-host-rules || true
    break
  fi
done
if alive "$RUNDIR/ovsdb-server.pid" && alive "$RUNDIR/ovs-vswitchd.pid"; then
  ovs-vsctl --db="unix:$RUNDIR/db.sock" --timeout=10 --if-exists del-br br0 || true
  ctl="$RUNDIR/ovs-vswitchd.$(cat "$RUNDIR/ovs-vswitchd.pid").ctl"
  ovs-appctl -t "$ctl" dpctl/del-dp netdev@ovs-netdev >/dev/null 2>&1 || true
fi
stop "$RUNDIR/ovs-vswitchd.pid"
stop "$RUNDIR/ovsdb-server.pid"
# The port pool's namespace, pinned next to the CNI socket.
umount "$RUNDIR/pool-netns" 2>/dev/null || true
rm -rf "$RUNDIR"
echo "node down"
