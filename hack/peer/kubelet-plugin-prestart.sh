#!/usr/bin/env bash
# The upstream image's kubelet-plugin init step, for simulated nodes: wait until the driver
# root holds nvidia-smi and libnvidia-ml.so.1 and `nvidia-smi --version` succeeds.
# A simulated container's root is an overlay of the machine's filesystems, private to it, not
# the image's, so the image's own script is not there: this stand-in is bound at its path. It
# reads the driver root through the /driver-root-parent mount and makes no /driver-root link.
set -u
driver_root="${NVIDIA_DRIVER_ROOT:-/}"
root="/driver-root-parent"
[ "$driver_root" = "/" ] || root="$root/$(basename "${driver_root%/}")"
for attempt in $(seq 1 360); do
  smi=$(find "$root/opt/bin" "$root/usr/bin" "$root/usr/sbin" "$root/bin" "$root/sbin" \
          -maxdepth 1 -type f -name nvidia-smi 2>/dev/null | head -n1)
  lib=$(find -L "$root/usr/lib64" "$root/usr/lib/x86_64-linux-gnu" "$root/usr/lib/aarch64-linux-gnu" \
          "$root/lib64" "$root/lib/x86_64-linux-gnu" "$root/lib/aarch64-linux-gnu" \
          -maxdepth 1 -type f -name libnvidia-ml.so.1 2>/dev/null | head -n1)
  if [ -n "$smi" ] && [ -n "$lib" ] && env -i "$smi" --version; then
    exit 0
  fi
  echo "attempt $attempt: driver root $driver_root (at $root): nvidia-smi '${smi:-not found}'," \
       "libnvidia-ml.so.1 '${lib:-not found}'; set the chart's nvidiaDriverRoot to where the driver is"
  sleep 10
done
exit 1
