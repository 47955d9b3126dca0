#!/usr/bin/env python3
"""Why `ssl-train verify` measures round-off instead of using a fixed tolerance: evidence.

Recomputes, in PyTorch float64 and float32, the first step of a `verify` run dumped with

    npx ssl-train verify --method simclr --devices 2 --steps 1 --dump DIR

(SimCLR with tiny_resnet and batch-norm heads: the defaults), and prints for every gradient
tensor, relative to the largest float64 gradient entry:
  |1-W|      ssl-zoo's one-process gradient against its W-rank gradient;
  |1-f64|    ssl-zoo's one-process gradient against the float64 truth;
  |W-f64|    ssl-zoo's W-rank gradient against the float64 truth;
  |t32-f64|  PyTorch's own float32 gradient against the float64 truth.
Then it moves every input value by one float32 ulp (and by 1/100 ulp) and shows how far the
float64 gradients move: a change that does not shrink in proportion to the perturbation is a
discontinuity (ReLUs whose pre-activation is within round-off of zero), which no float32
computation can resolve. Run with Debian's python3-torch:

    /usr/bin/python3 scripts/verify_roundoff_torch.py DIR
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
DIR = pathlib.Path(sys.argv[1])
INIT = {p.stem: np.load(p) for p in (DIR / 'init').glob('*.npy')}
VIEWS = [np.load(DIR / 'view0.npy'), np.load(DIR / 'view1.npy')]
LABELS = np.load(DIR / 'labels.npy')
TEMPERATURE = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2


def step(dtype, views):
    """Loss and gradients of SimCLR (+ the online classifier on detached features)."""
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in INIT.items()
              if not k.endswith(('runningMean', 'runningVar', 'numBatchesTracked'))}

    def conv(x, name, stride=1, pad=1):  # ssl-zoo kernels are [kh, kw, in, out]
        return F.conv2d(x, params[name].permute(3, 2, 0, 1), stride=stride, padding=pad)

    def bn(x, name):
        return F.batch_norm(x, None, None, params[name + '.weight'], params[name + '.bias'], training=True, eps=1e-5)

    def block(x, pre, stride, down):
        out = torch.relu(bn(conv(x, pre + '.conv1.weight', stride), pre + '.bn1'))
        out = bn(conv(out, pre + '.conv2.weight'), pre + '.bn2')
        shortcut = bn(conv(x, pre + '.downsample.0.weight', stride, 0), pre + '.downsample.1') if down else x
        return torch.relu(out + shortcut)

    def backbone(x):
        h = torch.relu(bn(conv(x, 'backbone.conv1.weight'), 'backbone.bn1'))
        for name, stride, down in (('layer1', 1, False), ('layer2', 2, True), ('layer3', 2, True)):
            h = block(h, 'backbone.' + name, stride, down)
        return h.mean(dim=(2, 3))

    def linear(x, name):
        return x @ params[name + '.weight'] + params[name + '.bias']

    feats = [backbone(torch.tensor(v, dtype=dtype).permute(0, 3, 1, 2)) for v in views]
    z = [linear(torch.relu(linear(f, 'projector.0')), 'projector.2') for f in feats]
    n = torch.cat([F.normalize(z[0], dim=1), F.normalize(z[1], dim=1)])
    batch = z[0].shape[0]
    logits = (n @ n.T / TEMPERATURE).masked_fill(torch.eye(2 * batch, dtype=torch.bool), float('-inf'))
    target = torch.cat([torch.arange(batch, 2 * batch), torch.arange(0, batch)])
    ssl = F.cross_entropy(logits, target)
    labels = torch.tensor(LABELS, dtype=torch.int64).repeat(2)
    (ssl + F.cross_entropy(linear(torch.cat(feats).detach(), 'classifier'), labels)).backward()
    return float(ssl), {k: v.grad.double().numpy() for k, v in params.items()}


def main():
    _, f64 = step(torch.float64, VIEWS)
    _, t32 = step(torch.float32, VIEWS)
    ours1 = {k: np.load(DIR / 'grads-1' / f'{k}.npy').astype(np.float64) for k in f64}
    oursW = {k: np.load(DIR / 'grads-W' / f'{k}.npy').astype(np.float64) for k in f64}
    scale = max(np.abs(g).max() for g in f64.values())
    rel = lambda a, b: np.abs(a - b).max() / scale
    rows = sorted(((rel(ours1[k], oursW[k]), k) for k in f64), reverse=True)
    print(f'losses: {json.loads((DIR / "losses.json").read_text())}')
    print(f'{"tensor":40s} {"|1-W|":>9s} {"|1-f64|":>9s} {"|W-f64|":>9s} {"|t32-f64|":>9s}')
    for d, k in rows[:10]:
        print(f'{k:40s} {d:9.2e} {rel(ours1[k], f64[k]):9.2e} {rel(oursW[k], f64[k]):9.2e} {rel(t32[k], f64[k]):9.2e}')
    worst = lambda a: max(rel(a[k], f64[k]) for k in f64)
    print(f'worst over tensors: |1-W| {rows[0][0]:.2e}, |1-f64| {worst(ours1):.2e}, |W-f64| {worst(oursW):.2e}, |t32-f64| {worst(t32):.2e}')
    rng = np.random.default_rng(0)
    signs = [rng.choice([-1.0, 1.0], size=v.shape) for v in VIEWS]
    for eps in (2.0 ** -24, 2.0 ** -24 / 100):
        _, moved = step(torch.float64, [v.astype(np.float64) * (1 + eps * s) for v, s in zip(VIEWS, signs)])
        print(f'float64 gradients with every input moved by {eps / 2 ** -24:g} ulp: largest change {max(rel(moved[k], f64[k]) for k in f64):.2e}')


if __name__ == '__main__':
    main()
