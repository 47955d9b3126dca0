#!/usr/bin/env python3
"""Generates tests/fixtures/core/norm-torch.json: PyTorch's answers (float64) for group norm
and layer norm, which tests/core/norm.test.ts checks ssl-zoo's GroupNorm and LayerNorm against:
the output and the gradients w.r.t. the input, weight and bias of sum(output * upstream).

ssl-zoo is channels last (NHWC): inputs are stored NHWC and permuted to NCHW for
nn.GroupNorm. Everything (inputs too) is stored, so the test needs no generator. Run with
Debian's python3-torch:

    /usr/bin/python3 scripts/gen_norm_fixtures.py
"""
import json
import pathlib

import torch
from torch import nn

torch.manual_seed(20240611)

# (kind, groups, NHWC shape, eps): group norm over [B, H, W, C], [B, L, C] and [B, C], layer
# norm (GroupNorm(1, C)), instance norm (G = C), and nn.LayerNorm over the last axis.
CASES = [
    ("group", 3, [2, 3, 4, 6], 1e-5),
    ("group", 2, [3, 5, 4], 1e-5),
    ("group", 2, [4, 8], 1e-5),
    ("group", 1, [2, 3, 3, 5], 1e-5),
    ("group", 4, [2, 2, 3, 4], 1e-3),
    ("group", 32, [2, 2, 2, 64], 1e-5),
    ("layer", None, [3, 7], 1e-5),
    ("layer", None, [2, 3, 2, 5], 1e-5),
]


def flat(t: torch.Tensor) -> list:
    return t.detach().reshape(-1).tolist()


def main() -> None:
    out = []
    for kind, groups, shape, eps in CASES:
        c = shape[-1]
        # Off-centre, scaled inputs so that the statistics matter.
        x_nhwc = (torch.randn(shape, dtype=torch.float64) * 2.5 + 1.5).requires_grad_(True)
        weight = torch.randn(c, dtype=torch.float64) * 0.5 + 1
        bias = torch.randn(c, dtype=torch.float64) * 0.5
        upstream = torch.randn(shape, dtype=torch.float64)
        if kind == "group":
            layer = nn.GroupNorm(groups, c, eps=eps).double()
            # NHWC -> NCHW (channels to axis 1) and back.
            perm = [0, len(shape) - 1] + list(range(1, len(shape) - 1))
            inv = [perm.index(i) for i in range(len(shape))]
        else:
            layer = nn.LayerNorm(c, eps=eps).double()
            perm = inv = list(range(len(shape)))
        with torch.no_grad():
            layer.weight.copy_(weight)
            layer.bias.copy_(bias)
        y = layer(x_nhwc.permute(perm)).permute(inv)
        (y * upstream).sum().backward()
        out.append(
            {
                "kind": kind,
                "groups": groups,
                "shape": shape,
                "eps": eps,
                "input": flat(x_nhwc),
                "weight": flat(weight),
                "bias": flat(bias),
                "upstream": flat(upstream),
                "output": flat(y),
                "gradInput": flat(x_nhwc.grad),
                "gradWeight": flat(layer.weight.grad),
                "gradBias": flat(layer.bias.grad),
            }
        )
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/core/norm-torch.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cases": out}) + "\n")
    print(f"wrote {path} ({len(out)} cases)")


if __name__ == "__main__":
    main()
