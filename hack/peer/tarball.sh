#!/usr/bin/env bash
# Print the path of the upstream driver's source tarball (dra-driver-nvidia-gpu-<commit>.tar.xz,
# with vendor/). Looked up, in order: $CDRIVER_PEER_TARBALL (a file), $CDRIVER_PEERS_DIR (a
# folder), then shared/peers/ beside the repository or beside any folder above it.
# Exit 4 (with the reason on stderr) when there is none: nothing upstream can be built.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PATTERN="dra-driver-nvidia-gpu-*.tar.xz"

newest_in() { ls -1t "$1"/$PATTERN 2>/dev/null | head -n1 || true; }

if [[ -n "${CDRIVER_PEER_TARBALL:-}" ]]; then
  [[ -f "$CDRIVER_PEER_TARBALL" ]] || { echo "CDRIVER_PEER_TARBALL=$CDRIVER_PEER_TARBALL is not a file" >&2; exit 4; }
  echo "$CDRIVER_PEER_TARBALL"; exit 0
fi
if [[ -n "${CDRIVER_PEERS_DIR:-}" ]]; then
  found="$(newest_in "$CDRIVER_PEERS_DIR")"
  [[ -n "$found" ]] || { echo "no $PATTERN in CDRIVER_PEERS_DIR=$CDRIVER_PEERS_DIR" >&2; exit 4; }
  echo "$found"; exit 0
fi
dir="$ROOT"
while :; do
  dir="$(dirname "$dir")"
  found="$(newest_in "$dir/shared/peers")"
  [[ -n "$found" ]] && { echo "$found"; exit 0; }
  [[ "$dir" == / ]] && break
done
echo "the upstream driver's source tarball ($PATTERN) was not found in shared/peers/ beside the" \
     "repository or a folder above it: set CDRIVER_PEER_TARBALL to the file or CDRIVER_PEERS_DIR to its folder" >&2
exit 4
