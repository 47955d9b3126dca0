#!/usr/bin/python3
"""Reference values for ssl-zoo's optimizers (tests/optim/reference.test.ts).

Runs torch.optim.SGD, torch.optim.AdamW and a re-implementation of solo-learn's LARS
(solo/utils/lars.py: same update, same order of operations) for a few steps on fixed
parameters, gradients and per-step learning rates, records the learning rates Lightning Bolts'
LinearWarmupCosineAnnealingLR (solo-learn's warmup_cosine, chained form) applies per step,
and writes tests/fixtures/optim/reference.json.

Run with Debian's python3-torch:  /usr/bin/python3 scripts/gen_optim_fixtures.py
"""

import json
import math
import os

import torch
from torch.optim.lr_scheduler import _LRScheduler
from torch.optim.optimizer import Optimizer

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "optim", "reference.json")


class SoloLARS(Optimizer):
    """solo-learn's LARS: SGD (PyTorch momentum semantics) on a LARS-scaled gradient.

    For each parameter with a gradient, unless excluded (exclude_bias_n_norm and ndim == 1):
    when ||p|| != 0 and ||g|| != 0, trust = eta * ||p|| / (||g|| + wd * ||p|| + eps),
    optionally min(trust / lr, 1), and d = (g + wd * p) * trust; otherwise d = g.
    """

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 eta=1e-3, eps=1e-8, clip_lr=False, exclude_bias_n_norm=False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, eta=eta, eps=eps, clip_lr=clip_lr,
                        exclude_bias_n_norm=exclude_bias_n_norm)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            wd = group["weight_decay"]
            mom = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad
                p_norm = torch.norm(p.data)
                g_norm = torch.norm(p.grad.data)
                if p.ndim != 1 or not group["exclude_bias_n_norm"]:
                    if p_norm != 0 and g_norm != 0:
                        trust = p_norm / (g_norm + p_norm * wd + group["eps"])
                        trust *= group["eta"]
                        if group["clip_lr"]:
                            trust = min(trust / group["lr"], 1)
                        d_p = d_p.add(p, alpha=wd)
                        d_p *= trust
                if mom != 0:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        buf = state["momentum_buffer"] = torch.clone(d_p).detach()
                    else:
                        buf = state["momentum_buffer"]
                        buf.mul_(mom).add_(d_p, alpha=1 - group["dampening"])
                    d_p = d_p.add(buf, alpha=mom) if group["nesterov"] else buf
                p.add_(d_p, alpha=-group["lr"])


class BoltsWarmupCosine(_LRScheduler):
    """Lightning Bolts' LinearWarmupCosineAnnealingLR (used by solo-learn), chained form:
    the lrs that scheduler.step() produces, to check ssl-zoo's closed form against."""

    def __init__(self, optimizer, warmup_epochs, max_epochs, warmup_start_lr=0.0, eta_min=0.0):
        self.warmup_epochs = warmup_epochs
        self.max_epochs = max_epochs
        self.warmup_start_lr = warmup_start_lr
        self.eta_min = eta_min
        super().__init__(optimizer)

    def get_lr(self):
        w, t, e = self.warmup_epochs, self.max_epochs, self.last_epoch
        groups = self.optimizer.param_groups
        if e == 0:
            return [self.warmup_start_lr] * len(self.base_lrs)
        if e < w:
            return [g["lr"] + (b - self.warmup_start_lr) / (w - 1) for b, g in zip(self.base_lrs, groups)]
        if e == w:
            return list(self.base_lrs)
        if (e - 1 - t) % (2 * (t - w)) == 0:
            return [g["lr"] + (b - self.eta_min) * (1 - math.cos(math.pi / (t - w))) / 2
                    for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * (e - w) / (t - w))) / (1 + math.cos(math.pi * (e - w - 1) / (t - w)))
                * (g["lr"] - self.eta_min) + self.eta_min for g in groups]


SCHEDULE = {"warmupSteps": 5, "totalSteps": 20, "warmupStartLr": 0.003, "minLr": 0.001, "baseLrs": [1.2, 0.05]}


def schedule_reference():
    """lr of each group at optimizer steps 0..totalSteps-1, as Lightning applies them."""
    s = SCHEDULE
    opt = torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in s["baseLrs"]], lr=0.1)
    sched = BoltsWarmupCosine(opt, s["warmupSteps"], s["totalSteps"], s["warmupStartLr"], s["minLr"])
    lrs = []
    for _ in range(s["totalSteps"]):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    return lrs


SHAPES = {
    "net.weight": [3, 4],
    "net.bias": [4],
    "zero.weight": [2, 3],  # zero norm: LARS leaves the gradient alone (and skips weight decay)
    "temp": [],  # 0-D parameter
    "bn.weight": [4],
    "cls.weight": [4, 2],
}
GROUPS = [
    {"name": "backbone", "params": ["net.weight", "zero.weight", "temp"], "weight_decay": 0.05},
    {"name": "backbone_no_decay", "params": ["net.bias", "bn.weight"], "weight_decay": 0.0},
    {"name": "classifier", "params": ["cls.weight"], "weight_decay": 0.01, "momentum": 0.5},
]
STEPS = 3
# Per step, per group.
LRS = [[0.1, 0.1, 0.3], [0.05, 0.05, 0.3], [0.2, 0.2, 0.1]]
# Parameters without a gradient at a step (skipped: no update, state untouched).
MISSING = {1: ["net.bias"], 2: ["cls.weight"]}
# Parameters with an all-zero gradient at a step (LARS: no trust ratio, no weight decay).
ZERO = {1: ["net.weight"]}
# Gradient scale per parameter: small gradients make the clipped LARS trust ratio hit 1.
GRAD_SCALE = {"net.weight": 0.05, "bn.weight": 0.02}


def make_data():
    g = torch.Generator().manual_seed(1234)
    params = {}
    for name, shape in SHAPES.items():
        if name == "zero.weight":
            params[name] = torch.zeros(shape)
        else:
            params[name] = torch.randn(shape, generator=g)
    grads = []
    for step in range(STEPS):
        gs = {}
        for name, shape in SHAPES.items():
            t = torch.randn(shape, generator=g) * GRAD_SCALE.get(name, 1.0)
            if name in ZERO.get(step, []):
                t = torch.zeros(shape)
            if name not in MISSING.get(step, []):
                gs[name] = t
        grads.append(gs)
    return params, grads


CASES = [
    ("sgd_momentum", "sgd", {"momentum": 0.9}),
    ("sgd_nesterov", "sgd", {"momentum": 0.9, "nesterov": True}),
    ("sgd_dampening", "sgd", {"momentum": 0.9, "dampening": 0.1}),
    ("sgd_no_momentum", "sgd", {"momentum": 0.0}),
    ("lars", "lars", {"momentum": 0.9, "eta": 0.02}),
    ("lars_clip_exclude", "lars", {"momentum": 0.9, "eta": 0.02, "clipLr": True, "excludeBiasAndNorm": True}),
    ("lars_nesterov_eta", "lars", {"momentum": 0.9, "nesterov": True, "eta": 0.001, "eps": 1e-6}),
    ("adamw", "adamw", {}),
    ("adamw_betas", "adamw", {"betas": [0.8, 0.99], "eps": 1e-6}),
]


def build(kind, opts, tensors):
    groups = []
    for gr in GROUPS:
        d = {"params": [tensors[n] for n in gr["params"]], "weight_decay": gr["weight_decay"], "lr": 0.0}
        if "momentum" in gr and kind != "adamw":
            d["momentum"] = gr["momentum"]
        groups.append(d)
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.0, momentum=opts.get("momentum", 0.0),
                               dampening=opts.get("dampening", 0.0), nesterov=opts.get("nesterov", False))
    if kind == "lars":
        return SoloLARS(groups, lr=0.0, momentum=opts.get("momentum", 0.0), dampening=opts.get("dampening", 0.0),
                        nesterov=opts.get("nesterov", False), eta=opts.get("eta", 1e-3), eps=opts.get("eps", 1e-8),
                        clip_lr=opts.get("clipLr", False), exclude_bias_n_norm=opts.get("excludeBiasAndNorm", False))
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=0.0, betas=tuple(opts.get("betas", (0.9, 0.999))),
                                 eps=opts.get("eps", 1e-8))
    raise ValueError(kind)


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def main():
    params, grads = make_data()
    cases = []
    for name, kind, opts in CASES:
        tensors = {n: p.clone().requires_grad_(True) for n, p in params.items()}
        opt = build(kind, opts, tensors)
        expected = []
        for step in range(STEPS):
            for i, group in enumerate(opt.param_groups):
                group["lr"] = LRS[step][i]
            for n, t in tensors.items():
                t.grad = grads[step][n].clone() if n in grads[step] else None
            opt.step()
            expected.append({n: flat(t) for n, t in tensors.items()})
        cases.append({"name": name, "optimizer": kind, "options": opts, "expected": expected})

    groups = []
    for gr in GROUPS:
        g = {"name": gr["name"], "params": gr["params"], "weightDecay": gr["weight_decay"]}
        if "momentum" in gr:
            g["momentum"] = gr["momentum"]
        groups.append(g)
    out = {
        "generator": "scripts/gen_optim_fixtures.py",
        "torch": torch.__version__,
        "shapes": SHAPES,
        "groups": groups,
        "lrs": LRS,
        "params": {n: flat(p) for n, p in params.items()},
        "grads": [{n: flat(t) for n, t in gs.items()} for gs in grads],
        "cases": cases,
        "schedule": {**SCHEDULE, "lrs": schedule_reference()},
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f)
        f.write("\n")
    print(f"wrote {os.path.normpath(OUT)} ({len(cases)} cases, torch {torch.__version__})")


if __name__ == "__main__":
    main()
