#!/usr/bin/env bash
# Brings up a standalone SDN node on this machine, on real Open vSwitch (userspace datapath, so no
# kernel module is needed): installs missing packages, builds the workspace, starts a private
# ovsdb-server + ovs-vswitchd under $SDN_RUNDIR (default /run/sdn-node, left running), and runs
# `sdn-agent setup`, which creates br0 with vxlan0 (ofport 1) and tun0 (ofport 2) over OVSDB,
# registers the pipeline's table names and installs the pipeline flows over OpenFlow.
# Idempotent: a second run changes nothing. Stop with: deploy/node-down.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNDIR=${SDN_RUNDIR:-/run/sdn-node}

export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in openvswitch-switch openvswitch-common iproute2 iptables ethtool; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

cargo build --release -p agent

mkdir -p "$RUNDIR"
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

target/release/sdn-agent setup --ovsdb "unix:$RUNDIR/db.sock" --rundir "$RUNDIR" \
  --datapath-type netdev

echo
echo "node up: br0 on $RUNDIR (ovsdb unix:$RUNDIR/db.sock)"
echo "  ovs-vsctl --db=unix:$RUNDIR/db.sock show"
echo "  ovs-ofctl -O OpenFlow13 --names dump-flows unix:$RUNDIR/br0.mgmt"
