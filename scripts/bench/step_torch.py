#!/usr/bin/python3
"""PyTorch reference for `npm run bench:step` and `bench:step-gpu`: the same SimCLR training
step as ssl-zoo's (two views, backbone, 2-layer projector, NT-Xent, backward, solo-learn's
LARS), timed.

Usage: /usr/bin/python3 scripts/bench/step_torch.py MODEL BATCH SIZE CHANNELS REPS THREADS
       [--device cpu|cuda] [--peak-tflops X] [--tf32] [--flops N] [--warmup 1] [--name NAME]
Prints one JSON object as its last line: {"model", "pytorch_s" (median step seconds),
"steps": [...], "images_per_s", "flops_per_step", "tflops", ...}; with --name also writes
bench-results/NAME.json.

On CUDA each timed step is bracketed by torch.cuda.synchronize(); TF32 is off unless --tf32
(PyTorch allows TF32 in cuDNN convolutions by default; WebGPU computes in plain FP32).
FLOPs: counted by torch.utils.flop_counter.FlopCounterMode (PyTorch >= 2.1: mm, bmm, addmm,
convolution and their backward, 2 per multiply-add) during the warm-up step; --flops N
overrides (e.g. the count of ssl-zoo's bench, scripts/bench/flops.ts, for the same model);
with neither, TFLOP/s is null.
Run on CPU with Debian's python3-torch (and libopenblas0-pthread for a fast BLAS).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from gen_backbone_fixtures import TinyResNet  # noqa: E402
from gen_optim_fixtures import SoloLARS  # noqa: E402
from gen_vit_fixtures import ViT  # noqa: E402
import torchvision_free_resnet as resnets  # noqa: E402  (this folder)


def nt_xent(z1, z2, temperature):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    logits = z @ z.t() / temperature
    logits.fill_diagonal_(-1e9)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(logits.device)
    return F.cross_entropy(logits, targets)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="tiny_resnet")
    p.add_argument("batch", nargs="?", type=int, default=256)
    p.add_argument("size", nargs="?", type=int, default=None, help="image side (default 28 for tiny_resnet, else 32)")
    p.add_argument("channels", nargs="?", type=int, default=None, help="default 1 for tiny_resnet, else 3")
    p.add_argument("reps", nargs="?", type=int, default=3)
    p.add_argument("threads", nargs="?", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--tf32", action="store_true", help="allow TF32 in matmuls and convolutions (CUDA)")
    p.add_argument("--flops", type=float, default=None, help="FLOPs per step to use instead of PyTorch's count")
    p.add_argument("--name", default=None, help="also write bench-results/NAME.json")
    a = p.parse_args()
    if a.size is None:
        a.size = 28 if a.model == "tiny_resnet" else 32
    if a.channels is None:
        a.channels = 1 if a.model == "tiny_resnet" else 3
    return a


def main():
    a = parse_args()
    model, batch, size, channels = a.model, a.batch, a.size, a.channels
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.set_num_threads(a.threads)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    if model == "tiny_resnet":
        backbone, features = TinyResNet(channels), 128
    elif model == "vit_tiny":
        backbone, features = ViT(dim=192, depth=12, heads=3, mlp_ratio=4, patch=4, channels=channels, image=size), 192
    else:
        backbone, features = resnets.resnet18_cifar(channels), 512
    projector = torch.nn.Sequential(torch.nn.Linear(features, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 256))
    backbone.to(device)
    projector.to(device)
    params = list(backbone.parameters()) + list(projector.parameters())
    optimizer = SoloLARS(params, lr=0.4, momentum=0.9, weight_decay=1e-4, eta=0.02, clip_lr=True, exclude_bias_n_norm=True)
    views = [torch.randn(batch, channels, size, size).to(device) for _ in range(2)]

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        z1, z2 = (projector(backbone(v)) for v in views)
        loss = nt_xent(z1, z2, 0.2)
        loss.backward()
        optimizer.step()
        return loss

    counted = None
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            step()  # warm-up, counted
        counted = float(counter.get_total_flops())
    except ImportError:
        step()  # warm-up (PyTorch < 2.1: no FLOP counter)
    for _ in range(a.warmup - 1):
        step()
    sync()
    times = []
    for _ in range(a.reps):
        sync()
        start = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = a.flops if a.flops else counted
    out = {
        "model": model,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "tf32": bool(cuda and a.tf32),
        "batch": batch,
        "image": [size, size, channels],
        "pytorch_s": seconds,
        "steps": times,
        "threads": a.threads,
        "images_per_s": batch / seconds,
        "flops_per_step": flops,
        "flops_source": "--flops" if a.flops else ("torch.utils.flop_counter" if counted else None),
        "flops_counted_by_torch": counted,
        "tflops": flops / seconds / 1e12 if flops else None,
        "peak_tflops": a.peak_tflops,
        "peak_fraction": flops / seconds / 1e12 / a.peak_tflops if flops and a.peak_tflops else None,
        "loss_last": float(loss.detach().cpu()),
    }
    if cuda:
        out["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
    if a.name:
        os.makedirs("bench-results", exist_ok=True)
        with open(os.path.join("bench-results", a.name + ".json"), "w") as f:
            json.dump(out, f, indent=2)
    print(
        f"{model} pytorch {device} batch {batch} {size}x{size}x{channels}: {seconds:.3f} s/step, {batch / seconds:.1f} images/s"
        + (f", {out['tflops']:.3g} TFLOP/s" if out["tflops"] else "")
        + (f" ({100 * out['peak_fraction']:.1f}% of {a.peak_tflops} TFLOP/s)" if out["peak_fraction"] else ""),
        file=sys.stderr,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
