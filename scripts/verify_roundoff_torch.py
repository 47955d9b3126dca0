#!/usr/bin/env python3
"""Evidence for what `ssl-train verify` may call float32 round-off.

Recomputes, in PyTorch float64 and float32, the first step of a `verify` run dumped with

    npx ssl-train verify --method METHOD --devices 2 --dump DUMP   # then DIR = DUMP/step-<k>

(the default tiny_resnet backbone with batch-norm heads; METHOD is simclr, barlow_twins or
byol with their default hyperparameters), and prints for the gradient tensors, relative to
the largest float64 gradient entry:
  |1-W|      ssl-zoo's one-process gradient against its W-rank gradient;
  |1-f64|    ssl-zoo's one-process gradient against the float64 truth;
  |W-f64|    ssl-zoo's W-rank gradient against the float64 truth at the W-rank state
             (`init-W/`: from step 2 on, the W-rank run's parameters are its own);
  |t32-f64|  PyTorch's own float32 gradient against the float64 truth.
and the same as the norm of the difference over the norm of the float64 gradient, per
tensor (`n|..|`). A W-rank result that is a correct float32 computation is as close to the
float64 truth as the one-process result and PyTorch's float32 are; a wrong one is not.
Then it moves every input value by one float32 ulp (and by 1/100 ulp) and shows how far the
float64 gradients move: a change that does not shrink in proportion to the perturbation is a
discontinuity (ReLUs whose pre-activation is within round-off of zero), which no float32
computation can resolve. Run with Debian's python3-torch:

    /usr/bin/python3 scripts/verify_roundoff_torch.py DIR METHOD
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
DIR = pathlib.Path(sys.argv[1])
METHOD = sys.argv[2] if len(sys.argv) > 2 else 'simclr'
INIT = {p.stem: np.load(p) for p in (DIR / 'init').glob('*.npy')}
INIT_W = {p.stem: np.load(p) for p in (DIR / 'init-W').glob('*.npy')} or INIT
VIEWS = [np.load(DIR / 'view0.npy'), np.load(DIR / 'view1.npy')]
LABELS = np.load(DIR / 'labels.npy')
BUFFERS = ('runningMean', 'runningVar', 'numBatchesTracked')


def step(dtype, views, init=INIT):
    """Method loss and gradients (+ the online classifier on detached features) from the state `init`."""
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=not k.startswith('momentum'))
              for k, v in init.items() if not k.endswith(BUFFERS)}

    def conv(x, name, stride=1, pad=1):  # ssl-zoo kernels are [kh, kw, in, out]
        return F.conv2d(x, params[name].permute(3, 2, 0, 1), stride=stride, padding=pad)

    def bn(x, name):
        return F.batch_norm(x, None, None, params[name + '.weight'], params[name + '.bias'], training=True, eps=1e-5)

    def block(x, pre, stride, down):
        out = torch.relu(bn(conv(x, pre + '.conv1.weight', stride), pre + '.bn1'))
        out = bn(conv(out, pre + '.conv2.weight'), pre + '.bn2')
        shortcut = bn(conv(x, pre + '.downsample.0.weight', stride, 0), pre + '.downsample.1') if down else x
        return torch.relu(out + shortcut)

    def backbone(x, prefix='backbone'):
        h = torch.relu(bn(conv(x, prefix + '.conv1.weight'), prefix + '.bn1'))
        for name, stride, down in (('layer1', 1, False), ('layer2', 2, True), ('layer3', 2, True)):
            h = block(h, f'{prefix}.{name}', stride, down)
        return h.mean(dim=(2, 3))

    def linear(x, name):
        return x @ params[name + '.weight'] + params[name + '.bias']

    def mlp(x, prefix, hidden_layers):
        """Linear(-BN-ReLU-Linear) x hidden_layers: ssl-zoo's Sequential indices 0, 1, 2, 3, ..."""
        for i in range(hidden_layers):
            x = torch.relu(bn(linear(x, f'{prefix}.{3 * i}'), f'{prefix}.{3 * i + 1}'))
        return linear(x, f'{prefix}.{3 * hidden_layers}')

    images = [torch.tensor(v, dtype=dtype).permute(0, 3, 1, 2) for v in views]
    feats = [backbone(x) for x in images]
    batch = feats[0].shape[0]
    if METHOD == 'simclr':  # Linear-ReLU-Linear projector, NT-Xent at temperature 0.2
        z = [linear(torch.relu(linear(f, 'projector.0')), 'projector.2') for f in feats]
        n = torch.cat([F.normalize(z[0], dim=1), F.normalize(z[1], dim=1)])
        logits = (n @ n.T / 0.2).masked_fill(torch.eye(2 * batch, dtype=torch.bool), float('-inf'))
        target = torch.cat([torch.arange(batch, 2 * batch), torch.arange(0, batch)])
        ssl = F.cross_entropy(logits, target)
    elif METHOD == 'barlow_twins':  # 3-layer projector, cross-correlation, lambda 0.0051, scale 0.1
        z = [mlp(f, 'projector', 2) for f in feats]
        zn = [(v - v.mean(0)) / torch.sqrt(v.var(0, unbiased=False) + 1e-5) for v in z]
        c = zn[0].T @ zn[1] / batch
        on = ((1 - torch.diagonal(c)) ** 2).sum()
        off = (c ** 2).sum() - (torch.diagonal(c) ** 2).sum()
        ssl = 0.1 * (on + 0.0051 * off)
    elif METHOD == 'byol':  # projector + predictor (Linear-BN-ReLU-Linear), 2 - 2 cos, symmetric
        p = [mlp(mlp(f, 'projector', 1), 'predictor', 1) for f in feats]
        with torch.no_grad():
            t = [mlp(backbone(x, 'momentumBackbone'), 'momentumProjector', 1) for x in images]
        cos = lambda a, b: F.cosine_similarity(a, b, dim=1, eps=0)
        ssl = (4 - 2 * (cos(p[0], t[1]) + cos(p[1], t[0]))).mean()
    else:
        raise SystemExit(f'unknown method {METHOD}: simclr, barlow_twins or byol')
    labels = torch.tensor(LABELS, dtype=torch.int64).repeat(2)
    (ssl + F.cross_entropy(linear(torch.cat(feats).detach(), 'classifier'), labels)).backward()
    return float(ssl), {k: v.grad.double().numpy() for k, v in params.items() if v.grad is not None}


def main():
    loss64, f64 = step(torch.float64, VIEWS)
    f64W = step(torch.float64, VIEWS, INIT_W)[1] if INIT_W is not INIT else f64
    _, t32 = step(torch.float32, VIEWS)
    ours1 = {k: np.load(DIR / 'grads-1' / f'{k}.npy').astype(np.float64) for k in f64}
    oursW = {k: np.load(DIR / 'grads-W' / f'{k}.npy').astype(np.float64) for k in f64}
    scale = max(np.abs(g).max() for g in f64.values())
    rel = lambda a, b: np.abs(a - b).max() / scale
    nrel = lambda a, b: np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
    rows = sorted(((rel(ours1[k], oursW[k]), k) for k in f64), reverse=True)
    print(f'{METHOD}: losses {json.loads((DIR / "losses.json").read_text())}, float64 {loss64}')
    print(f'{"tensor":36s} {"|1-W|":>9s} {"|1-f64|":>9s} {"|W-f64|":>9s} {"|t32-f64|":>9s}'
          f' {"n|1-f64|":>9s} {"n|W-f64|":>9s} {"n|t32-f64|":>10s}')
    for d, k in rows[:12]:
        print(f'{k:36s} {d:9.2e} {rel(ours1[k], f64[k]):9.2e} {rel(oursW[k], f64W[k]):9.2e} {rel(t32[k], f64[k]):9.2e}'
              f' {nrel(ours1[k], f64[k]):9.2e} {nrel(oursW[k], f64W[k]):9.2e} {nrel(t32[k], f64[k]):10.2e}')
    worst = lambda a: max(rel(a[k], f64[k]) for k in f64)
    print(f'worst over tensors: |1-W| {rows[0][0]:.2e}, |1-f64| {worst(ours1):.2e}, |W-f64| {max(rel(oursW[k], f64W[k]) for k in f64):.2e}, |t32-f64| {worst(t32):.2e}')
    rng = np.random.default_rng(0)
    signs = [rng.choice([-1.0, 1.0], size=v.shape) for v in VIEWS]
    for eps in (2.0 ** -24, 2.0 ** -24 / 100):
        _, moved = step(torch.float64, [v.astype(np.float64) * (1 + eps * s) for v, s in zip(VIEWS, signs)])
        print(f'float64 gradients with every input moved by {eps / 2 ** -24:g} ulp: largest change {max(rel(moved[k], f64[k]) for k in f64):.2e}')


if __name__ == '__main__':
    main()
