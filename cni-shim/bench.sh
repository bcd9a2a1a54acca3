#!/usr/bin/env bash
# Per-exec cost of sdn-cni, measured with a plain bash loop (no hyperfine needed):
#   cargo build -p cni-shim --profile release-small
#   cni-shim/bench.sh [BINARY (default target/release-small/sdn-cni)] [N (default 1000)]
# Prints the binary size, then the mean wall time per exec of: /bin/true (the fork+exec floor of
# this machine), VERSION, the reference Go `bridge` plugin's VERSION if installed (for scale), and
# ADD against a socket that does not exist (the whole shim path up to connect: env, stdin, config
# checks, worker thread, error object). The agent's own time is not in these figures. Figures on
# a shared VM are noisy: run it a few times.
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release-small/sdn-cni}
N=${2:-1000}
[ -x "$BIN" ] || { echo "no executable $BIN: run cargo build -p cni-shim --profile release-small" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '{"cniVersion":"1.0.0"}' >"$tmp/version.json"
echo "{\"cniVersion\":\"1.0.0\",\"name\":\"bench\",\"socket\":\"$tmp/absent.sock\"}" >"$tmp/add.json"

# measure LABEL STDIN_FILE CMD...: runs CMD N times (one fork+exec each; the CNI_* variables are
# exported around it), prints the mean wall time per exec.
measure() {
    local label=$1 input=$2 start end i
    shift 2
    start=$(date +%s%N)
    for ((i = 0; i < N; i++)); do
        "$@" <"$input" >/dev/null || true
    done
    end=$(date +%s%N)
    awk -v l="$label" -v n="$N" -v ns="$((end - start))" \
        'BEGIN { printf "%-28s %6d execs %9.1f ms total %8.1f us/exec\n", l, n, ns / 1e6, ns / 1e3 / n }'
}

echo "binary: $BIN, $(stat -c %s "$BIN") bytes"
measure "/bin/true (floor)" "$tmp/version.json" /bin/true
export CNI_COMMAND=VERSION
measure "VERSION" "$tmp/version.json" "$BIN"
if [ -x /usr/lib/cni/bridge ]; then
    measure "reference bridge VERSION" "$tmp/version.json" /usr/lib/cni/bridge
fi
export CNI_COMMAND=ADD CNI_CONTAINERID=c CNI_NETNS=/run/netns/x CNI_IFNAME=eth0
measure "ADD, agent socket missing" "$tmp/add.json" "$BIN"
