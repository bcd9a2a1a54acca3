#!/usr/bin/env bash
# Tears down what deploy/node-up.sh made: deletes br0 (so ovs-vswitchd removes its tap devices
# br0 and tun0), removes the userspace datapath, stops the two daemons by their pid files (bounded
# wait) and removes the run directory. Nothing is left in the host's network.
set -euo pipefail
RUNDIR=${SDN_RUNDIR:-/run/sdn-node}
export OVS_RUNDIR=$RUNDIR OVS_LOGDIR=$RUNDIR OVS_DBDIR=$RUNDIR
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if alive "$RUNDIR/ovsdb-server.pid" && alive "$RUNDIR/ovs-vswitchd.pid"; then
  ovs-vsctl --db="unix:$RUNDIR/db.sock" --timeout=10 --if-exists del-br br0 || true
  ctl="$RUNDIR/ovs-vswitchd.$(cat "$RUNDIR/ovs-vswitchd.pid").ctl"
  ovs-appctl -t "$ctl" dpctl/del-dp netdev@ovs-netdev >/dev/null 2>&1 || true
fi
for d in ovs-vswitchd ovsdb-server; do
  pidfile="$RUNDIR/$d.pid"
  if alive "$pidfile"; then
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" || true
  fi
done
rm -rf "$RUNDIR"
echo "node down"
