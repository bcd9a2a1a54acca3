#!/usr/bin/env bash
# Brings up a standalone SDN node on this machine, on real Open vSwitch (userspace datapath, so no
# kernel module is needed), and shows pods talking through it:
#   1. installs missing packages, builds sdn-agent, sdnctl and sdn-cni (release) and installs them
#      in $SDN_RUNDIR/bin (default /run/sdn-node/bin; the plugin in $SDN_RUNDIR/cni/bin);
#   2. starts a private ovsdb-server + ovs-vswitchd under $SDN_RUNDIR;
#   3. writes the agent's configuration to $SDN_RUNDIR/agent.yaml (multitenant mode, standalone
#      cluster state in $SDN_RUNDIR/state) and starts sdn-agent with it; the agent sets up br0,
#      vxlan0, tun0 (gateway 10.128.0.1), iptables and the pipeline, then writes its CNI config;
#   4. creates $SDN_DEMO_PODS (default 3) pods as network namespaces sdn-demo-N through the real
#      sdn-cni plugin (in namespace default, which is global), pings every pair and the gateway,
#      and prints `ovs-ofctl --names dump-flows br0`.
# SDN_DUAL_STACK=1 makes the cluster dual stack: an IPv6 cluster network fd01::/48 (a /64 per
# node) beside 10.128.0.0/14 and the service networks 172.30.0.0/16 and fd02::/112; the demo pods
# get both families and ping each other and the gateway over IPv6 too. Switching a running node
# to it restarts the agent and re-creates the demo pods (pods made before keep IPv4 only).
# Everything stays running until deploy/node-down.sh. Idempotent: a second run starts nothing
# twice and re-uses the pods that exist. Tenants: `sdnctl` reads the same agent.yaml
# (export SDN_CONFIG=$SDN_RUNDIR/agent.yaml; sdnctl namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNDIR=${SDN_RUNDIR:-/run/sdn-node}
PODS=${SDN_DEMO_PODS:-3}
DUAL=${SDN_DUAL_STACK:-0}
case "$DUAL" in 0|1) ;; *) echo "SDN_DUAL_STACK must be 0 or 1, not '$DUAL'" >&2; exit 2 ;; esac
CNI_BIN=$RUNDIR/cni/bin
CNI_CONF=$RUNDIR/cni/net.d

[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps node

TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -p agent -p sdnctl
cargo build --profile release-small -p cni-shim

BIN=$RUNDIR/bin
CONFIG=$RUNDIR/agent.yaml
mkdir -p "$RUNDIR" "$BIN" "$CNI_BIN" "$CNI_CONF"
# Install through a temporary name and a rename: a running agent keeps its (old) binary.
put() { install -m 0755 "$1" "$2.new" && mv -f "$2.new" "$2"; }
put "$TARGET/release-small/sdn-cni" "$CNI_BIN/sdn-cni"
put "$TARGET/release/sdn-agent" "$BIN/sdn-agent"
put "$TARGET/release/sdnctl" "$BIN/sdnctl"
export OVS_RUNDIR=$RUNDIR OVS_LOGDIR=$RUNDIR OVS_DBDIR=$RUNDIR
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if ! alive "$RUNDIR/ovsdb-server.pid"; then
  [ -f "$RUNDIR/conf.db" ] || ovsdb-tool create "$RUNDIR/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  ovsdb-server "$RUNDIR/conf.db" --remote="punix:$RUNDIR/db.sock" \
    --pidfile="$RUNDIR/ovsdb-server.pid" --detach --log-file="$RUNDIR/ovsdb-server.log"
  ovs-vsctl --db="unix:$RUNDIR/db.sock" --no-wait init
fi
if ! alive "$RUNDIR/ovs-vswitchd.pid"; then
  ovs-vswitchd "unix:$RUNDIR/db.sock" --pidfile="$RUNDIR/ovs-vswitchd.pid" --detach \
    --log-file="$RUNDIR/ovs-vswitchd.log"
fi

# The node's underlay address: the source address of its default route (else 127.0.0.1).
NODE_IP=$(ip -4 route get 192.0.2.255 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i+1)}')
# The agent's settings, in the file both sdn-agent and sdnctl read (see sdn-agent --help).
cat >"$CONFIG.new" <<CONFIG
nodeName: "$(hostname | tr 'A-Z_' 'a-z-')"
nodeIP: "${NODE_IP:-127.0.0.1}"
mode: multitenant
datapathType: netdev
ovsdb: "unix:$RUNDIR/db.sock"
bridgeMgmt: "$RUNDIR/br0.mgmt"
cniSocket: "$RUNDIR/cni.sock"
ipamDir: "$RUNDIR/ipam"
cniConfDir: "$CNI_CONF"
clusterState: "standalone:$RUNDIR/state"
auditLogFile: "$RUNDIR/audit.log"
CONFIG
if [ "$DUAL" = 1 ]; then
  cat >>"$CONFIG.new" <<CONFIG
clusterNetworks:
  - {cidr: "10.128.0.0/14", hostSubnetLength: 9}
  - {cidr: "fd01::/48", hostSubnetLength: 64}
serviceNetwork: ["172.30.0.0/16", "fd02::/112"]
CONFIG
fi
# A changed configuration (dual stack turned on) takes a restart of a running agent.
if alive "$RUNDIR/sdn-agent.pid" && ! cmp -s "$CONFIG.new" "$CONFIG"; then
  pid=$(cat "$RUNDIR/sdn-agent.pid")
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
fi
mv -f "$CONFIG.new" "$CONFIG"
if ! alive "$RUNDIR/sdn-agent.pid"; then
  rm -f "$CNI_CONF/10-sdn.conflist"
  setsid "$BIN/sdn-agent" run --config "$CONFIG" \
    </dev/null >>"$RUNDIR/sdn-agent.log" 2>&1 &
  echo $! >"$RUNDIR/sdn-agent.pid"
fi
# The agent writes its CNI config only when the node is ready.
for _ in $(seq 300); do
  [ -f "$CNI_CONF/10-sdn.conflist" ] && break
  alive "$RUNDIR/sdn-agent.pid" || { echo "sdn-agent exited:" >&2; tail -20 "$RUNDIR/sdn-agent.log" >&2; exit 1; }
  sleep 0.1
done
[ -f "$CNI_CONF/10-sdn.conflist" ] || { echo "sdn-agent not ready after 30 s:" >&2; tail -20 "$RUNDIR/sdn-agent.log" >&2; exit 1; }
echo "sdn-agent ready (log: $RUNDIR/sdn-agent.log)"

# Pods: network namespaces wired by the real plugin, exactly as a runtime would call it.
NETCONF="{\"cniVersion\":\"1.0.0\",\"name\":\"sdn\",\"type\":\"sdn-cni\",\"socket\":\"$RUNDIR/cni.sock\"}"
ips=()
ip6s=()
for i in $(seq "$PODS"); do
  ns=sdn-demo-$i
  if ! ip netns list | grep -qw "$ns"; then
    ip netns add "$ns"
  fi
  ip=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 || true)
  ip6=$(ip -n "$ns" -6 -o addr show dev eth0 scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 || true)
  if [ -n "$ip" ] && [ "$DUAL" = 1 ] && [ -z "$ip6" ]; then
    # Made before the cluster had IPv6: re-created to get both families.
    echo "$NETCONF" | env -i CNI_COMMAND=DEL CNI_CONTAINERID="$ns" CNI_NETNS="/run/netns/$ns" \
      CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo-$i" CNI_PATH="$CNI_BIN" \
      "$CNI_BIN/sdn-cni" >/dev/null || { echo "DEL $ns failed" >&2; exit 1; }
    ip=
  fi
  if [ -z "$ip" ]; then
    out=$(echo "$NETCONF" | env -i CNI_COMMAND=ADD CNI_CONTAINERID="$ns" CNI_NETNS="/run/netns/$ns" \
      CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo-$i" CNI_PATH="$CNI_BIN" \
      "$CNI_BIN/sdn-cni") || { echo "ADD $ns failed: $out" >&2; exit 1; }
    ip=$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
    ip6=$(ip -n "$ns" -6 -o addr show dev eth0 scope global | awk '{print $4}' | cut -d/ -f1)
  fi
  if [ "$DUAL" = 1 ]; then
    [ -n "$ip6" ] || { echo "pod $ns has no IPv6 address" >&2; exit 1; }
    echo "pod $ns: $ip $ip6"
  else
    echo "pod $ns: $ip"
  fi
  ips+=("$ip")
  ip6s+=("$ip6")
done

echo
for i in $(seq "$PODS"); do
  for j in $(seq "$PODS"); do
    [ "$i" = "$j" ] && continue
    if ip netns exec "sdn-demo-$i" ping -c 1 -W 2 "${ips[$((j-1))]}" >/dev/null; then
      echo "sdn-demo-$i -> sdn-demo-$j (${ips[$((j-1))]}): ok"
    else
      echo "sdn-demo-$i -> sdn-demo-$j (${ips[$((j-1))]}): FAILED" >&2; exit 1
    fi
  done
  ip netns exec "sdn-demo-$i" ping -c 1 -W 2 10.128.0.1 >/dev/null && echo "sdn-demo-$i -> gateway: ok"
  [ "$DUAL" = 1 ] || continue
  for j in $(seq "$PODS"); do
    [ "$i" = "$j" ] && continue
    if ip netns exec "sdn-demo-$i" ping -6 -c 1 -W 2 "${ip6s[$((j-1))]}" >/dev/null; then
      echo "sdn-demo-$i -> sdn-demo-$j (${ip6s[$((j-1))]}): ok"
    else
      echo "sdn-demo-$i -> sdn-demo-$j (${ip6s[$((j-1))]}): FAILED" >&2; exit 1
    fi
  done
  gw6=$(ip -n "sdn-demo-$i" -6 route show default | awk '{print $3}')
  ip netns exec "sdn-demo-$i" ping -6 -c 1 -W 2 "$gw6" >/dev/null && echo "sdn-demo-$i -> gateway $gw6: ok"
done

echo
ovs-ofctl -O OpenFlow13 --names dump-flows "unix:$RUNDIR/br0.mgmt"
echo
SDN_CONFIG=$CONFIG "$BIN/sdnctl" namespaces
echo
if [ "$PODS" -gt 0 ]; then
  echo "node up: br0 on $RUNDIR; pods sdn-demo-1..$PODS (ip netns exec sdn-demo-1 ping ${ips[0]})"
else
  echo "node up: br0 on $RUNDIR; no demo pods (SDN_DEMO_PODS=0)"
fi
echo "  CNI config: $CNI_CONF/10-sdn.conflist   plugin: $CNI_BIN/sdn-cni"
echo "  ovs-ofctl -O OpenFlow13 --names dump-flows unix:$RUNDIR/br0.mgmt"
echo "  agent config: $CONFIG; tenants (sdnctl help lists the commands):"
echo "    export PATH=$BIN:\$PATH"
echo "    export SDN_CONFIG=$CONFIG; sdnctl namespaces"
echo "  what the agent sees: sdnctl status; sdnctl pods; sdnctl flows default/demo-1;"
echo "    sdnctl trace default/demo-1 default/demo-2 tcp/80; sdnctl bundle"
echo "  metrics and health: curl -s http://127.0.0.1:9101/metrics; curl -s 'http://127.0.0.1:9101/readyz?verbose'"
echo "  stop everything: deploy/node-down.sh"
