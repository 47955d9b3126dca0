#!/usr/bin/python3
"""PyTorch reference for `npm run bench:step`: the same SimCLR training step as ssl-zoo's
(two views, backbone, 2-layer projector, NT-Xent, backward, solo-learn's LARS), timed.

Usage: /usr/bin/python3 scripts/bench/step_torch.py MODEL BATCH SIZE CHANNELS REPS THREADS
Prints one JSON object: {"model", "pytorch_s" (median step seconds), "steps": [...]}.
Run with Debian's python3-torch (and libopenblas0-pthread for a fast BLAS).
"""

import json
import os
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
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets)


def main():
    model, batch, size, channels, reps, threads = sys.argv[1], *map(int, sys.argv[2:7])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model == "tiny_resnet":
        backbone, features = TinyResNet(channels), 128
    elif model == "vit_tiny":
        backbone, features = ViT(dim=192, depth=12, heads=3, mlp_ratio=4, patch=4, channels=channels, image=size), 192
    else:
        backbone, features = resnets.resnet18_cifar(channels), 512
    projector = torch.nn.Sequential(torch.nn.Linear(features, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 256))
    params = list(backbone.parameters()) + list(projector.parameters())
    optimizer = SoloLARS(params, lr=0.4, momentum=0.9, weight_decay=1e-4, eta=0.02, clip_lr=True, exclude_bias_n_norm=True)
    views = [torch.randn(batch, channels, size, size) for _ in range(2)]

    def step():
        optimizer.zero_grad(set_to_none=True)
        z1, z2 = (projector(backbone(v)) for v in views)
        loss = nt_xent(z1, z2, 0.2)
        loss.backward()
        optimizer.step()

    step()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"model": model, "pytorch_s": statistics.median(times), "steps": times, "threads": threads}))


if __name__ == "__main__":
    main()
