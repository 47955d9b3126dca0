#!/usr/bin/env python3
"""Generates tests/fixtures/core/iternorm-torch.json: float64 PyTorch answers for IterNorm
(VIbCReg's projector layer, solo-learn's `solo/utils/whitening.py`), which
tests/core/iter-norm.test.ts checks ssl-zoo's IterNorm against: the training-mode output,
the gradients w.r.t. the input, weight and bias of sum(output * upstream), the running mean
and whitening matrix after the step, and the evaluation-mode output of another batch with
those running statistics.

The forward is solo-learn's `iterative_normalization_py.forward` written with differentiable
torch ops (its hand-written backward is the gradient of this forward: the script checks
that autograd matches it, by central finite differences on a few entries). Inputs are
stored, so the test needs no generator. Run with Debian's python3-torch:

    /usr/bin/python3 scripts/gen_iternorm_fixtures.py
"""
import json
import pathlib

import torch

torch.manual_seed(20261126)
torch.set_default_dtype(torch.float64)

# (batch, features, num_groups, T, eps, momentum)
CASES = [
    (16, 12, 3, 5, 1e-5, 0.1),  # groups of 4
    (10, 8, 64, 5, 1e-5, 0.1),  # more groups than features: groups of 1 (per-feature standardisation)
    (24, 10, 4, 3, 1e-3, 0.2),  # d = ceil(10 / 4) = 3 does not divide 10: halved to 1
    (40, 32, 2, 5, 1e-5, 0.1),  # groups of 16, fewer samples than 2d
]


def groups_of(num_features: int, num_groups: int) -> tuple:
    num_channels = (num_features - 1) // num_groups + 1
    num_groups = num_features // num_channels
    while num_features % num_channels != 0:
        num_channels //= 2
        num_groups = num_features // num_channels
    return num_groups, num_channels


def iternorm(x, weight, bias, nc, T, eps):
    """solo-learn's training-mode forward (X [B, F]); returns the output, the batch mean and the whitening matrix."""
    g = x.size(1) // nc
    xg = x.transpose(0, 1).contiguous().view(g, nc, -1)
    _, d, m = xg.size()
    mean = xg.mean(-1, keepdim=True)
    xc = xg - mean
    eye = torch.eye(d).expand(g, d, d)
    sigma = torch.baddbmm(eye, xc, xc.transpose(1, 2), beta=eps, alpha=1.0 / m)
    r_tr = (sigma * eye).sum((1, 2), keepdim=True).reciprocal()
    sigma_n = sigma * r_tr
    p = eye
    for _ in range(T):
        p = torch.baddbmm(p, torch.matrix_power(p, 3), sigma_n, beta=1.5, alpha=-0.5)
    wm = p * r_tr.sqrt()
    xn = wm.matmul(xc)
    y = xn.view(x.size(1), x.size(0)).transpose(0, 1)
    return y * weight + bias, mean, wm


def flat(t: torch.Tensor) -> list:
    return t.detach().reshape(-1).tolist()


def main() -> None:
    out = []
    for b, f, num_groups, T, eps, momentum in CASES:
        g, nc = groups_of(f, num_groups)
        x = (torch.randn(b, f) * torch.linspace(0.5, 2.0, f) + torch.randn(f)).requires_grad_()
        mix = torch.eye(f) + 0.3 * torch.randn(f, f)  # correlated features
        x_in = (x.detach() @ mix).requires_grad_()
        weight = (1 + 0.2 * torch.randn(f)).requires_grad_()
        bias = (0.1 * torch.randn(f)).requires_grad_()
        upstream = torch.randn(b, f)
        y, mean, wm = iternorm(x_in, weight, bias, nc, T, eps)
        (y * upstream).sum().backward()
        # autograd vs central differences on a few input entries
        for i, j in [(0, 0), (b - 1, f - 1), (b // 2, f // 2)]:
            h = 1e-6
            xp, xm = x_in.detach().clone(), x_in.detach().clone()
            xp[i, j] += h
            xm[i, j] -= h
            fd = ((iternorm(xp, weight.detach(), bias.detach(), nc, T, eps)[0] * upstream).sum() - (iternorm(xm, weight.detach(), bias.detach(), nc, T, eps)[0] * upstream).sum()) / (2 * h)
            assert abs(fd.item() - x_in.grad[i, j].item()) < 1e-6 * max(1.0, abs(fd.item())), (fd.item(), x_in.grad[i, j].item())
        running_mean = momentum * mean.detach()
        running_wm = momentum * wm.detach() + (1 - momentum) * torch.eye(nc).expand(g, nc, nc)
        x_eval = torch.randn(b, f) @ mix
        xg = x_eval.transpose(0, 1).contiguous().view(g, nc, -1)
        y_eval = running_wm.matmul(xg - running_mean).view(f, b).transpose(0, 1) * weight.detach() + bias.detach()
        out.append(
            {
                "batch": b,
                "features": f,
                "numGroups": num_groups,
                "groups": g,
                "groupSize": nc,
                "iterations": T,
                "eps": eps,
                "momentum": momentum,
                "x": flat(x_in),
                "weight": flat(weight),
                "bias": flat(bias),
                "upstream": flat(upstream),
                "y": flat(y),
                "gradX": flat(x_in.grad),
                "gradWeight": flat(weight.grad),
                "gradBias": flat(bias.grad),
                "runningMean": flat(running_mean),
                "runningWm": flat(running_wm),
                "xEval": flat(x_eval),
                "yEval": flat(y_eval),
            }
        )
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "core" / "iternorm-torch.json"
    path.write_text(json.dumps({"generator": "scripts/gen_iternorm_fixtures.py", "torch": torch.__version__, "cases": out}) + "\n")
    print(f"wrote {path} ({len(out)} cases)")


if __name__ == "__main__":
    main()
