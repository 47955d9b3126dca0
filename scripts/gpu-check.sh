#!/usr/bin/env bash
# ssl-zoo GPU check: one script for a Linux x86-64 machine with an NVIDIA GPU, no Node.js
# and no network. It needs the bundle built by `node scripts/bundle-gpu.mjs` (node, dist,
# runtime node_modules, libvulkan, step_torch.py, a Fashion-MNIST subset), next to this
# script, in the current folder, or named by --bundle / $GPU_BUNDLE.
#
#   bash gpu-check.sh [--small] [--bundle ssl-zoo-gpu.tar.xz] [--peak-tflops X]
#
# Steps: unpack into a temp dir; find the Vulkan loader (else the bundle's lib/) and the
# NVIDIA Vulkan driver (ICD json in the icd.d folders, or one written for libGLX_nvidia.so.0);
# print the adapter Dawn picks; bench:step-gpu on WebGPU for tiny_resnet, resnet18, vit_tiny;
# the same steps in PyTorch (step_torch.py --device cuda, CPU when no CUDA); their ratio; a
# 2-epoch SimCLR on Fashion-MNIST on WebGPU and its kNN accuracy.
# --small: SwiftShader (VK_ICD_FILENAMES, for a machine without GPU), tiny batches and images,
# one timed step, a few SimCLR steps: the end-to-end test of this script (slow: SwiftShader
# costs milliseconds per kernel call; resnet18 needed over 7 minutes here, hence a 900 s
# limit per step part, $SMALL_STEP_TIMEOUT; the SimCLR part took 268 s, and under load just
# under its then 420 s limit, now 900 s, $SMALL_SIMCLR_TIMEOUT).
# Everything printed goes to $OUT (when set) or ./gpu-check-results: gpu-check.log, the JSON of
# each part, and summary.json. Budget: about 8 minutes on a GPU (each part has a timeout).
set -uo pipefail

SMALL=0
BUNDLE="${GPU_BUNDLE:-}"
PEAK="${PEAK_TFLOPS:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --small) SMALL=1 ;;
    --bundle) BUNDLE="$2"; shift ;;
    --peak-tflops) PEAK="$2"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

RESULTS="${OUT:-$PWD/gpu-check-results}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
exec > >(tee -a "$RESULTS/gpu-check.log") 2>&1
say() { echo "[gpu-check $(date -u +%H:%M:%S)] $*"; }
START=$(date +%s)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "$BUNDLE" ]; then
  for c in "$HERE/ssl-zoo-gpu.tar.xz" "$PWD/ssl-zoo-gpu.tar.xz" "$HERE/../.tmp/ssl-zoo-gpu.tar.xz"; do
    [ -f "$c" ] && BUNDLE="$c" && break
  done
fi
[ -n "$BUNDLE" ] && [ -f "$BUNDLE" ] || { say "no bundle: build it with 'node scripts/bundle-gpu.mjs' and pass --bundle PATH"; exit 2; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ssl-zoo-gpu.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
say "unpacking $BUNDLE ($(du -h "$BUNDLE" | cut -f1)) into $WORK"
tar -C "$WORK" -xJf "$BUNDLE" || { say "unpacking failed"; exit 2; }
B="$WORK/ssl-zoo-gpu"
NODE="$B/bin/node"
say "node $("$NODE" --version), $(uname -m), $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"

# --- Vulkan: loader and driver -----------------------------------------------------------
if [ "$SMALL" = 1 ]; then
  export VK_ICD_FILENAMES="${SWIFTSHADER_ICD:-/usr/lib/chromium/vk_swiftshader_icd.json}"
  say "--small: SwiftShader ($VK_ICD_FILENAMES)"
fi
if ! { ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; } && ! ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 /usr/lib64/libvulkan.so.1 /usr/lib/libvulkan.so.1 >/dev/null 2>&1; then
  export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "no Vulkan loader on this machine: using the bundle's lib/libvulkan.so.1"
else
  say "Vulkan loader: $( (ldconfig -p 2>/dev/null | grep -m1 'libvulkan.so.1 ' | sed 's/.*=> //') || echo found)"
fi
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]; then
  ICD=""
  for d in /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d /usr/local/etc/vulkan/icd.d; do
    for f in "$d"/nvidia*.json; do [ -f "$f" ] && ICD="$f" && break 2; done
  done
  GLX="$( (ldconfig -p 2>/dev/null | grep -m1 'libGLX_nvidia.so.0 ' | sed 's/.*=> //') || true)"
  if [ -z "$GLX" ]; then
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
      [ -e "$d/libGLX_nvidia.so.0" ] && GLX="$d/libGLX_nvidia.so.0" && break
    done
  fi
  if [ -z "$ICD" ] && [ -n "$GLX" ]; then
    for f in "$(dirname "$GLX")"/nvidia_icd.json "$(dirname "$GLX")"/vulkan/icd.d/nvidia_icd.json "$(dirname "$GLX")"/nvidia/nvidia_icd.json; do
      [ -f "$f" ] && ICD="$f" && break
    done
  fi
  if [ -z "$ICD" ] && [ -n "$GLX" ]; then
    ICD="$WORK/nvidia_icd.json"
    printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$GLX" > "$ICD"
    say "no nvidia_icd.json found: wrote $ICD for $GLX"
  fi
  if [ -n "$ICD" ]; then
    export VK_ICD_FILENAMES="$ICD"
    say "NVIDIA Vulkan driver: $ICD"
  else
    say "no NVIDIA Vulkan driver found (no nvidia*.json in the icd.d folders, no libGLX_nvidia.so.0; a container needs NVIDIA_DRIVER_CAPABILITIES to include graphics): Dawn will list what the loader finds"
  fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/[nvidia-smi] /'
GPU_NAME="$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || true)"
# FP32 (non-tensor) peaks from NVIDIA's datasheets, used only when --peak-tflops is not given.
if [ -z "$PEAK" ] && [ "$SMALL" = 0 ]; then
  case "$GPU_NAME" in
    *H200*NVL*|*H100*NVL*) PEAK=60 ;;
    *H200*|*"H100 80GB HBM3"*|*H100*SXM*) PEAK=66.9 ;;
    *H100*PCIe*) PEAK=51.2 ;;
    *A100*) PEAK=19.5 ;;
  esac
  [ -n "$PEAK" ] && say "FP32 peak $PEAK TFLOP/s for '$GPU_NAME' (datasheet; override with --peak-tflops)"
fi

# --- sizes ---------------------------------------------------------------------------------
if [ "$SMALL" = 1 ]; then
  BATCH=4; REPS=1; SIZES="tiny_resnet:12 resnet18:8 vit_tiny:8"; STEP_TIMEOUT=${SMALL_STEP_TIMEOUT:-900}
  SIMCLR_ARGS=(--epochs 2 --batch-size 8 --train-samples 16 --knn-train-samples 64 --val-samples 64)
  SIMCLR_TIMEOUT=${SMALL_SIMCLR_TIMEOUT:-900}; TOTAL=3600
else
  BATCH=256; REPS=5; SIZES="tiny_resnet:28 resnet18:32 vit_tiny:32"; STEP_TIMEOUT=90
  SIMCLR_ARGS=(--epochs 2 --batch-size 256 --knn-train-samples 10000)
  SIMCLR_TIMEOUT=240; TOTAL=470
fi
# Seconds a part may take: its own limit, capped by what is left of the TOTAL budget.
budget() { local left=$(( START + TOTAL - $(date +%s) )); echo $(( $1 < left ? $1 : left )); }
BENCH="$RESULTS/bench"
mkdir -p "$BENCH"

# --- adapter -------------------------------------------------------------------------------
say "adapter (Dawn):"
(cd "$B" && timeout 120 "$NODE" dist/scripts/bench/adapter-info.js 2>&1 | grep -v XDG_RUNTIME_DIR | tail -1 | tee "$BENCH/adapter.json")

# --- PyTorch -------------------------------------------------------------------------------
PY=""
for p in "${PYTHON:-}" python3 /usr/bin/python3 python; do
  [ -n "$p" ] && command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null && PY="$p" && break
done
TORCH_DEVICE=cpu
if [ -n "$PY" ]; then
  "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && TORCH_DEVICE=cuda
  say "PyTorch: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)'), device $TORCH_DEVICE"
else
  say "no python with torch found: PyTorch part skipped"
fi

# --- per model: WebGPU step, PyTorch step ---------------------------------------------------
for ms in $SIZES; do
  m="${ms%%:*}"; s="${ms##*:}"
  T=$(budget "$STEP_TIMEOUT")
  [ "$T" -gt 15 ] || { say "out of time: $m skipped"; continue; }
  say "WebGPU step: $m batch $BATCH ${s}x${s} (timeout ${T}s)"
  (cd "$B" && timeout "$T" "$NODE" dist/scripts/bench/step-gpu.js --models "$m" --batch "$BATCH" --size "$s" --reps "$REPS" \
    --name "step-gpu-$m" ${PEAK:+--peak-tflops "$PEAK"} 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$BENCH/step-gpu-$m.out" | grep -v '^{')
  [ -f "$B/bench-results/step-gpu-$m.json" ] && cp "$B/bench-results/step-gpu-$m.json" "$BENCH/" || say "WebGPU step $m: no result (timeout ${STEP_TIMEOUT}s or failure; see $BENCH/step-gpu-$m.out)"
  if [ -n "$PY" ]; then
    FLOPS="$("$NODE" -e 'try{const r=require(process.argv[1]);const f=Object.values(r.models)[0].flops_per_step;if(f)console.log(f)}catch{}' "$BENCH/step-gpu-$m.json" 2>/dev/null)"
    CH=3; [ "$m" = tiny_resnet ] && CH=1
    T=$(budget "$STEP_TIMEOUT")
    say "PyTorch step ($TORCH_DEVICE): $m batch $BATCH ${s}x${s} (timeout ${T}s)"
    (cd "$B" && timeout "$T" "$PY" scripts/bench/step_torch.py "$m" "$BATCH" "$s" "$CH" "$REPS" "$(nproc)" --device "$TORCH_DEVICE" \
      --name "torch-$m" ${PEAK:+--peak-tflops "$PEAK"} ${FLOPS:+--flops "$FLOPS"} 2>&1 | tee "$BENCH/torch-$m.out" | grep -v '^{')
    [ -f "$B/bench-results/torch-$m.json" ] && cp "$B/bench-results/torch-$m.json" "$BENCH/" || say "PyTorch step $m: no result (see $BENCH/torch-$m.out)"
  fi
done

# --- SimCLR on Fashion-MNIST ------------------------------------------------------------------
DATA="${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA="$B/data/fashion-mnist"
T=$(budget "$SIMCLR_TIMEOUT")
if [ "$T" -le 20 ]; then
  say "SimCLR skipped: out of time"
elif [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  say "SimCLR, Fashion-MNIST ($DATA$( [ -f "$DATA/SUBSET.txt" ] && echo ': the bundle subset')), WebGPU: ${SIMCLR_ARGS[*]}"
  (cd "$B" && timeout "$T" "$NODE" dist/src/cli/bin.js --method simclr --backbone tiny_resnet --backend webgpu --dataset fashion-mnist \
    --data-dir "$DATA" "${SIMCLR_ARGS[@]}" --run-dir "$RESULTS/simclr-run" > "$BENCH/simclr.out" 2>&1)
  RC=$?
  echo "exit $RC" >> "$BENCH/simclr.out"
  grep -v XDG_RUNTIME_DIR "$BENCH/simclr.out" | tail -6
  [ "$RC" = 124 ] && say "SimCLR: timed out after ${T}s"
else
  say "SimCLR skipped: no Fashion-MNIST here and none in the bundle"
fi

# --- summary -------------------------------------------------------------------------------
"$NODE" - "$BENCH" "$RESULTS/summary.json" "$SMALL" "$(( $(date +%s) - START ))" "$GPU_NAME" "$PEAK" <<'EOF'
const fs = require('fs');
const [dir, out, small, seconds, gpuName, peak] = process.argv.slice(2);
const read = (f) => { try { return JSON.parse(fs.readFileSync(`${dir}/${f}`, 'utf8')); } catch { return null; } };
const summary = { small: small === '1', seconds: Number(seconds), nvidia_smi_name: gpuName || null, peak_tflops: peak ? Number(peak) : null, adapter: read('adapter.json'), models: {} };
for (const m of ['tiny_resnet', 'resnet18', 'vit_tiny']) {
  const w = read(`step-gpu-${m}.json`)?.models?.[m] ?? null;
  const t = read(`torch-${m}.json`);
  summary.models[m] = {
    webgpu: w && { seconds: w.seconds, images_per_s: w.images_per_s, tflops: w.tflops, peak_fraction: w.peak_fraction ?? null, batch: w.batch, image: w.image, first_step_s: w.first_step_s, error: w.error },
    pytorch: t && { device: t.device, device_name: t.device_name, torch: t.torch, seconds: t.pytorch_s, images_per_s: t.images_per_s, tflops: t.tflops, peak_fraction: t.peak_fraction, flops_counted_by_torch: t.flops_counted_by_torch },
    webgpu_over_pytorch_time: w?.seconds && t?.pytorch_s ? w.seconds / t.pytorch_s : null,
  };
}
let simclr = null;
try {
  const text = fs.readFileSync(`${dir}/simclr.out`, 'utf8');
  const json = text.split('\n').filter((l) => l.startsWith('{') && l.includes('knn_acc1')).pop();
  simclr = { exit: Number((text.match(/exit (\d+)\s*$/) || [])[1]), final: json ? JSON.parse(json) : null, last_lines: text.trim().split('\n').slice(-3) };
} catch {}
summary.simclr = simclr;
fs.writeFileSync(out, JSON.stringify(summary, null, 2) + '\n');
console.log('\n== summary ==');
for (const [m, r] of Object.entries(summary.models)) {
  const w = r.webgpu, t = r.pytorch, f = (x, d = 3) => (typeof x === 'number' ? x.toFixed(d) : 'n/a');
  const g = (x) => (typeof x === 'number' ? x.toPrecision(3) : 'n/a');
  console.log(`${m}: WebGPU ${w ? `${f(w.seconds)} s/step ${g(w.images_per_s)} img/s ${g(w.tflops)} TFLOP/s` : 'no result'}; ` +
    `PyTorch ${t ? `${t.device} ${f(t.seconds)} s/step ${g(t.images_per_s)} img/s ${g(t.tflops)} TFLOP/s` : 'no result'}; ` +
    `WebGPU/PyTorch time ${f(r.webgpu_over_pytorch_time, 2)}`);
}
console.log(`SimCLR: ${simclr ? `exit ${simclr.exit}, kNN top-1 ${simclr.final?.['val/knn_acc1'] ?? 'n/a'}` : 'not run'}`);
console.log(`total ${seconds} s; summary: ${out}`);
EOF
