#!/usr/bin/env bash
# Installs everything ssl-zoo needs on Debian/Ubuntu (run as root or with sudo), then
# installs the npm dependencies and builds the TypeScript and the native addons.
#   libgloo-dev           collectives for multi-process training (native/gloo)
#   libdnnl-dev           oneDNN CPU kernels (native/dnnl)
#   dataset-fashion-mnist Fashion-MNIST in /usr/share/datasets/fashion-mnist
#   redis-server          Redis rendezvous (tests start their own server)
#   chromium              headless browser for the comparison-report test
#   fonts-dejavu-core     the font of the PNG charts
#   iproute2              `ip netns`: the multi-host test's two hosts as network namespaces
#   libvulkan1            the Vulkan loader Dawn (the `webgpu` package) runs on; chromium brings SwiftShader,
#                         a CPU Vulkan driver the WebGPU engine tests run on (no GPU here)
#   mesa-vulkan-drivers   Mesa's Vulkan device-select layer: how ranks tell identical GPUs apart
#                         (tests/core/webgpu-select.test.ts runs it on two copies of SwiftShader)
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential python3 python3-numpy libgloo-dev libdnnl-dev dataset-fashion-mnist redis-server chromium fonts-dejavu-core iproute2 libvulkan1 mesa-vulkan-drivers
# onnxruntime-node (a test dependency) bundles its CPU binaries; skip its download of the CUDA ones.
ONNXRUNTIME_NODE_INSTALL=skip npm ci
npm run build:native
npm run build
