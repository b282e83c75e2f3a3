#!/usr/bin/env bash
# Checks, on a machine with an NVIDIA GPU (Node not needed), what server/gpus/ assumes of it:
# nvidia-smi's CSV for Runplane's query (header, columns, units), each GPU's `Device Minor` in
# /proc/driver/nvidia/gpus/<bus id>/information and its /dev/nvidia<minor> node, the shared nodes, and
# (with python3) that CUDA sees exactly the one GPU CUDA_VISIBLE_DEVICES names by UUID.
# Usage: scripts/device/gpu_check.sh   (exit 0: all as expected; 1: a mismatch, printed)
set -u
fail=0
problem() { echo "MISMATCH: $*"; fail=1; }

# Keep in step with NVIDIA_SMI_ARGS and REQUIRED in server/gpus/_nvidia_smi.ts.
query=(--query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv)
if ! out=$(nvidia-smi "${query[@]}" 2>&1); then
  echo "nvidia-smi ${query[*]} failed: $out"
  exit 1
fi
echo "== nvidia-smi ${query[*]}"
echo "$out"
header=$(printf '%s\n' "$out" | head -n 1)
[ "$header" = "index, uuid, name, memory.total [MiB], pci.bus_id" ] || problem "header is \"$header\""

first_uuid=""
while IFS= read -r line; do
  [ -z "$line" ] && continue
  IFS=',' read -r index uuid name memory bus extra <<<"$line"
  index=${index# } uuid=${uuid# } name=${name# } memory=${memory# } bus=${bus# }
  [ -z "${extra:-}" ] || problem "more than 5 columns: $line"
  [[ $index =~ ^[0-9]{1,4}$ ]] || problem "index \"$index\" in: $line"
  [[ $uuid =~ ^GPU-[A-Za-z0-9][A-Za-z0-9-]{0,79}$ ]] || problem "uuid \"$uuid\" in: $line"
  [[ $name =~ ^[[:print:]]{1,96}$ ]] || problem "name \"$name\" in: $line"
  [[ $memory =~ ^[0-9]+\ MiB$ ]] || problem "memory \"$memory\" in: $line"
  [[ $bus =~ ^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$ ]] || problem "bus id \"$bus\" in: $line"
  [ -n "$first_uuid" ] || first_uuid=$uuid
  # The driver's folder: the domain's last 4 digits, lowercase (server/gpus/_nvidia_smi.ts procFolder).
  domain=${bus%%:*}
  folder=$(printf '%s:%s' "${domain: -4}" "${bus#*:}" | tr 'A-F' 'a-f')
  info=/proc/driver/nvidia/gpus/$folder/information
  minor=$(sed -n 's/^Device Minor:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$info" 2>/dev/null)
  if [ -z "$minor" ]; then
    problem "no Device Minor in $info (Runplane assumes /dev/nvidia$index)"
  else
    echo "GPU $index $uuid ($name): minor $minor, node $(ls -l /dev/nvidia"$minor" 2>&1)"
    [ -e "/dev/nvidia$minor" ] || problem "/dev/nvidia$minor is missing"
  fi
done < <(printf '%s\n' "$out" | tail -n +2)

for node in nvidiactl nvidia-uvm nvidia-uvm-tools; do
  echo "shared node: $(ls -l /dev/$node 2>&1)"
done
[ -e /dev/nvidiactl ] || problem "/dev/nvidiactl is missing"

if [ -n "$first_uuid" ] && command -v python3 >/dev/null; then
  echo "== CUDA with CUDA_VISIBLE_DEVICES=$first_uuid CUDA_DEVICE_ORDER=PCI_BUS_ID"
  CUDA_VISIBLE_DEVICES=$first_uuid CUDA_DEVICE_ORDER=PCI_BUS_ID python3 - <<'PY' || fail=1
import ctypes, sys
lib = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int(-1)
init = lib.cuInit(0)
listed = lib.cuDeviceGetCount(ctypes.byref(count)) if init == 0 else None
print(f"cuInit {init}, cuDeviceGetCount {listed}, count {count.value}")
sys.exit(0 if (init, listed, count.value) == (0, 0, 1) else 1)
PY
  echo "== CUDA with CUDA_VISIBLE_DEVICES empty (a replica without GPUs): expect cuInit 100"
  CUDA_VISIBLE_DEVICES= python3 -c 'import ctypes; print("cuInit", ctypes.CDLL("libcuda.so.1").cuInit(0))'
fi
[ "$fail" = 0 ] && echo "gpu_check: all as expected" || echo "gpu_check: see MISMATCH lines"
exit "$fail"
