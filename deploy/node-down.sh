#!/usr/bin/env bash
# Stops the daemons deploy/node-up.sh started (by their pid files) and removes its run directory.
set -euo pipefail
RUNDIR=${SDN_RUNDIR:-/run/sdn-node}
for d in ovs-vswitchd ovsdb-server; do
  if [ -f "$RUNDIR/$d.pid" ]; then
    kill "$(cat "$RUNDIR/$d.pid")" 2>/dev/null || true
  fi
done
sleep 1
rm -rf "$RUNDIR"
echo "node down"
