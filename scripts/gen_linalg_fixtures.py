#!/usr/bin/env python3
"""Writes tests/fixtures/core/linalg-torch.json: the Cholesky factor and the lower-triangular solve with PyTorch's float64 autograd gradients.

W-MSE's whitening (src/core/linalg.ts) is tested against it (tests/core/linalg.test.ts). Run
with a Python that has PyTorch (Debian: /usr/bin/python3 with python3-torch):

    /usr/bin/python3 scripts/gen_linalg_fixtures.py
"""

import json
import os
import warnings

import torch

# torch.triangular_solve is deprecated in PyTorch 1.13 (same results).
warnings.filterwarnings("ignore", message="torch.triangular_solve is deprecated")


def randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def linalg_case(seed=28, batch=2, k=5, m=3):
    """A batch of SPD matrices A, their Cholesky factors and the solve L X = B, with PyTorch's
    autograd gradients for given incoming gradients (torch.linalg.cholesky, torch.triangular_solve)."""
    g = torch.Generator().manual_seed(seed)
    root = randn(g, batch, k, k)
    a = (root @ root.transpose(1, 2) / k + 0.3 * torch.eye(k, dtype=torch.float64)).float().double()
    b = randn(g, batch, k, m).float().double()
    grad_l = randn(g, batch, k, k).float().double()
    grad_x = randn(g, batch, k, m).float().double()
    a.requires_grad_(True)
    b.requires_grad_(True)
    l = torch.linalg.cholesky(a)
    (grad_a,) = torch.autograd.grad(l, a, grad_l)
    l_in = l.detach().float().double().requires_grad_(True)  # the factor as the TypeScript side reads it
    x = torch.triangular_solve(b, l_in, upper=False)[0]
    grad_l_solve, grad_b = torch.autograd.grad(x, [l_in, b], grad_x)

    def flat(t):
        return {"shape": list(t.shape), "data": t.detach().reshape(-1).tolist()}

    return {
        "format": "ssl-zoo-linalg/1",
        "generated_by": "ssl-zoo scripts/gen_linalg_fixtures.py (float64 PyTorch autograd)",
        "torch_version": torch.__version__,
        "conventions": "cholesky: L = torch.linalg.cholesky(A), grad_A = autograd of L with incoming grad_L (symmetric); "
        "solve: X = torch.triangular_solve(B, L, upper=False) (L X = B) with L = the float32-rounded factor, "
        "grad_L_solve and grad_B = autograd with incoming grad_X",
        "A": flat(a),
        "L": flat(l),
        "grad_L": flat(grad_l),
        "grad_A": flat(grad_a),
        "B": flat(b),
        "L_solve": flat(l_in),
        "X": flat(x),
        "grad_X": flat(grad_x),
        "grad_L_solve": flat(grad_l_solve),
        "grad_B": flat(grad_b),
    }


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "core", "linalg-torch.json")
    with open(path, "w") as f:
        json.dump(linalg_case(), f)
        f.write("\n")
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
