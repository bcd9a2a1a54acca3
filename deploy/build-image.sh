#!/bin/bash
# Builds the runtime image (deploy/image/Containerfile) from binaries built in this tree:
#   deploy/build-image.sh [TAG]                  (default localhost/sdn:latest)
# Settings (environment):
#   BASE=IMAGE       build on that base image (e.g. docker.io/library/debian:12-slim); without it a
#                    Debian 12 base is bootstrapped from Debian's own packages with mmdebstrap (the
#                    host's apt sources), cached as a tar and imported as localhost/sdn-base:bookworm
#   SDN_PROFILE      cargo profile of the binaries (release; debug for the tests)
#   SDN_SKIP_BUILD=1 use the binaries already built
#   PODMAN           the podman command, e.g. "podman --root DIR --runroot DIR" (default podman)
#   SDN_BASE_TAR     where the bootstrapped base is cached (default target/image-base/bookworm.tar)
# Needs root (mmdebstrap, podman), podman, and mmdebstrap when no BASE is given.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-localhost/sdn:latest}
PROFILE=${SDN_PROFILE:-release}
PODMAN=${PODMAN:-podman}
TARGET=${CARGO_TARGET_DIR:-target}
BASE_TAR=${SDN_BASE_TAR:-$TARGET/image-base/bookworm.tar}
PACKAGES=iptables,iproute2,ca-certificates

if [ "${SDN_SKIP_BUILD:-}" != 1 ]; then
  if [ "$PROFILE" = debug ]; then flag=(); else flag=(--profile "$PROFILE"); fi
  cargo build "${flag[@]}" --locked -p agent -p sdnctl -p cni-shim
fi
BIN="$TARGET/$PROFILE"
for b in sdn-agent sdnctl sdn-cni; do
  [ -x "$BIN/$b" ] || { echo "build-image: $BIN/$b is missing; build it or unset SDN_SKIP_BUILD" >&2; exit 1; }
done

base=${BASE:-}
pull=()
if [ -z "$base" ]; then
  pull=(--pull=never)
  base=localhost/sdn-base:bookworm
  if ! $PODMAN image exists "$base"; then
    if [ ! -s "$BASE_TAR" ] || [ "$(cat "$BASE_TAR.packages" 2>/dev/null)" != "$PACKAGES" ]; then
      command -v mmdebstrap >/dev/null || { echo "build-image: mmdebstrap is missing (apt-get install mmdebstrap), or set BASE to a Debian 12 image" >&2; exit 1; }
      mkdir -p "$(dirname "$BASE_TAR")"
      echo "build-image: bootstrapping a Debian 12 base ($PACKAGES) with mmdebstrap"
      mmdebstrap --quiet --format=tar --variant=minbase --include="$PACKAGES" bookworm "$BASE_TAR.tmp"
      mv "$BASE_TAR.tmp" "$BASE_TAR"
      echo "$PACKAGES" >"$BASE_TAR.packages"
    fi
    $PODMAN import --quiet "$BASE_TAR" "$base" >/dev/null
  fi
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/bin"
cp deploy/image/Containerfile deploy/image/sdn-entrypoint "$ctx/"
install -m 0755 "$BIN/sdn-agent" "$BIN/sdnctl" "$BIN/sdn-cni" "$ctx/bin/"
$PODMAN build --quiet "${pull[@]}" --build-arg "BASE=$base" -t "$TAG" -f "$ctx/Containerfile" "$ctx" >/dev/null
echo "build-image: built $TAG on $base"
