#!/usr/bin/env python3
"""Generates `ssl-loss-oracle/1` loss cases with an independent float64 PyTorch implementation.

The TypeScript losses in src/losses are tested against these files (tests/losses), and
`ssl-train verify --case FILE --devices W` reads the same format. Run with Debian's
python3-torch (plain `python3` may be an interpreter without torch):

    /usr/bin/python3 scripts/gen_loss_fixtures.py                 # writes tests/fixtures/losses/*.json
    /usr/bin/python3 scripts/gen_loss_fixtures.py --check tests/fixtures/losses/loss-case-example.json

`--check FILE` recomputes every loss, gradient and per-rank loss of an existing case from
its inputs and hyper-parameters and fails when they differ: it proves that this script and
the file's author follow the same conventions (see docs/loss-case.md).

Everything is written with plain PyTorch building blocks (F.normalize, F.cross_entropy,
F.batch_norm, F.cosine_similarity, autograd), on purpose unlike the TypeScript code.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

FORMAT = "ssl-loss-oracle/1"

CONVENTIONS = {
    "simclr": "rows [z1; z2], positive of i is i+N, self masked, mean over 2N anchors, z L2-normalised inside",
    "barlow": "z normalised per column as (z-mean)/sqrt(var_biased+bt_eps); c = z1n^T z2n / N; "
    "loss = scale*(sum(1-c_ii)^2 + lambd*sum_{i!=j} c_ij^2)",
    "byol": "mean_i [(2-2cos(p1_i,z2_i)) + (2-2cos(p2_i,z1_i))]; z1,z2 detached (their gradients are exactly 0)",
    "vicreg": "sim_w*MSE(z1,z2) + var_w*(mean relu(gamma-std1)+mean relu(gamma-std2))/2 + "
    "cov_w*(offdiag(C1)^2.sum()+offdiag(C2)^2.sum())/D; std=sqrt(var_unbiased+vic_eps); C = zc^T zc/(N-1)",
    "distributed": "rank r holds rows r*B..r*B+B-1; mean_r loss_r = loss; the gradient on rank r's local rows "
    "after every rank backpropagates its own loss_r is W * (global gradient rows)",
    "per_rank_loss": "simclr: mean over rank r's 2B local anchors (against all 2N candidates); barlow: the global "
    "loss on every rank; byol: mean over rank r's B samples; vicreg: sim_w*MSE over rank r's rows + the global "
    "variance and covariance terms",
}

# (file stem, N, D, seed, temperature, Barlow scale, world size recorded in `distributed`)
CASES = [
    ("n12-d8-s1-t0.1-w2", 12, 8, 1, 0.1, 0.1, 2),
    ("n12-d5-s2-t0.5-w3", 12, 5, 2, 0.5, 1.0, 3),
    ("n12-d16-s3-t0.2-w4", 12, 16, 3, 0.2, 0.1, 4),
]


# ----------------------------------------------------------------------------- losses
# Each returns (global loss, per-anchor or per-sample pieces used for the per-rank split, terms).


def simclr_per_anchor(z1, z2, temperature):
    """Cross-entropy of every one of the 2N anchors: [2N]."""
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    logits = z @ z.T / temperature
    self_mask = torch.eye(2 * n, dtype=torch.bool)
    logits = logits.masked_fill(self_mask, float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets, reduction="none")


def barlow_terms(z1, z2, lambd, scale, eps):
    n, d = z1.shape
    # BatchNorm1d without affine, training mode: (z - mean) / sqrt(var_biased + eps).
    z1n = F.batch_norm(z1, None, None, training=True, eps=eps)
    z2n = F.batch_norm(z2, None, None, training=True, eps=eps)
    c = torch.einsum("bi,bj->ij", z1n, z2n) / n
    eye = torch.eye(d, dtype=torch.bool)
    on_diag = (1 - c[eye]).pow(2).sum()
    off_diag = c[~eye].pow(2).sum()
    return scale * (on_diag + lambd * off_diag), on_diag, off_diag


def byol_per_sample(p1, p2, z1, z2):
    """[(2 - 2cos(p1, z2)) + (2 - 2cos(p2, z1))] per sample: [N]; z detached."""
    return (2 - 2 * F.cosine_similarity(p1, z2.detach(), dim=-1)) + (
        2 - 2 * F.cosine_similarity(p2, z1.detach(), dim=-1)
    )


def vicreg_parts(z1, z2, h):
    """(per-element squared difference [N, D], variance term, covariance term)."""
    n, d = z1.shape
    sq = (z1 - z2).pow(2)

    def std(z):
        return torch.sqrt(z.var(dim=0, unbiased=True) + h["vic_eps"])

    def cov(z):
        zc = z - z.mean(dim=0)
        c = zc.T @ zc / (n - 1)
        return c[~torch.eye(d, dtype=torch.bool)].pow(2).sum() / d

    variance = (F.relu(h["gamma"] - std(z1)).mean() + F.relu(h["gamma"] - std(z2)).mean()) / 2
    covariance = cov(z1) + cov(z2)
    return sq, variance, covariance


def compute(inputs, h, world_size):
    """All losses, their gradients and per-rank losses, from float64 inputs."""
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in inputs.items()}
    n = t["z1"].shape[0]
    assert n % world_size == 0, "N must be divisible by the world size"
    b = n // world_size
    out = {}
    per_rank = {}

    def grads(loss, names):
        gs = torch.autograd.grad(loss, [t[k] for k in names], allow_unused=True)
        return {k: (torch.zeros_like(t[k]) if g is None else g).tolist() for k, g in zip(names, gs)}

    def check_rank_split(name, loss, rank_losses, names):
        """mean_r loss_r = loss, and sum_r d loss_r / d x = W * d loss / d x (rows of every rank)."""
        assert abs(sum(float(l) for l in rank_losses) / world_size - float(loss)) < 1e-12, name
        total = torch.stack([l for l in rank_losses]).sum()
        g_sum = torch.autograd.grad(total, [t[k] for k in names], allow_unused=True, retain_graph=True)
        g_one = torch.autograd.grad(loss, [t[k] for k in names], allow_unused=True, retain_graph=True)
        for a, c in zip(g_sum, g_one):
            if a is None or c is None:
                assert a is None and c is None, name
                continue
            assert torch.allclose(a, world_size * c, rtol=1e-10, atol=1e-13), name

    # SimCLR
    pa = simclr_per_anchor(t["z1"], t["z2"], h["temperature"])
    loss = pa.mean()
    ranks = [torch.cat([pa[r * b:(r + 1) * b], pa[n + r * b:n + (r + 1) * b]]).mean() for r in range(world_size)]
    check_rank_split("simclr", loss, ranks, ["z1", "z2"])
    out["simclr"] = {"loss": float(loss), "grad": grads(loss, ["z1", "z2"])}
    per_rank["simclr"] = [float(x) for x in ranks]

    # Barlow Twins
    loss, on, off = barlow_terms(t["z1"], t["z2"], h["lambd"], h["scale"], h["bt_eps"])
    ranks = [loss for _ in range(world_size)]
    check_rank_split("barlow", loss, ranks, ["z1", "z2"])
    out["barlow"] = {
        "loss": float(loss),
        "terms": {"on_diag": float(on), "off_diag": float(off)},
        "grad": grads(loss, ["z1", "z2"]),
    }
    per_rank["barlow"] = [float(x) for x in ranks]

    # BYOL
    ps = byol_per_sample(t["p1"], t["p2"], t["z1"], t["z2"])
    loss = ps.mean()
    ranks = [ps[r * b:(r + 1) * b].mean() for r in range(world_size)]
    check_rank_split("byol", loss, ranks, ["p1", "p2"])
    out["byol"] = {"loss": float(loss), "grad": grads(loss, ["p1", "p2", "z1", "z2"])}
    per_rank["byol"] = [float(x) for x in ranks]

    # VICReg
    sq, variance, covariance = vicreg_parts(t["z1"], t["z2"], h)
    invariance = sq.mean()  # F.mse_loss(z1, z2)
    assert torch.allclose(invariance, F.mse_loss(t["z1"], t["z2"]), rtol=1e-14)
    loss = h["sim_w"] * invariance + h["var_w"] * variance + h["cov_w"] * covariance
    ranks = [
        h["sim_w"] * sq[r * b:(r + 1) * b].mean() + h["var_w"] * variance + h["cov_w"] * covariance
        for r in range(world_size)
    ]
    check_rank_split("vicreg", loss, ranks, ["z1", "z2"])
    out["vicreg"] = {
        "loss": float(loss),
        "terms": {"invariance": float(invariance), "variance": float(variance), "covariance": float(covariance)},
        "grad": grads(loss, ["z1", "z2"]),
    }
    per_rank["vicreg"] = [float(x) for x in ranks]
    return out, per_rank


# ----------------------------------------------------------------------------- cases


def make_inputs(n, d, seed):
    """Two correlated views, predictions near the other view, per-column scales around 1
    (so VICReg's relu(gamma - std) is active on some columns and not on others)."""
    g = torch.Generator().manual_seed(seed)
    col_scale = 0.4 + 1.2 * torch.rand(d, generator=g, dtype=torch.float64)
    base = torch.randn(n, d, generator=g, dtype=torch.float64)
    z1 = (base + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)) * col_scale
    z2 = (base + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)) * col_scale
    z2 = z2 + 0.3  # a non-zero column mean
    p1 = z2 + 0.6 * torch.randn(n, d, generator=g, dtype=torch.float64)
    p2 = z1 + 0.6 * torch.randn(n, d, generator=g, dtype=torch.float64)
    return {"z1": z1.tolist(), "z2": z2.tolist(), "p1": p1.tolist(), "p2": p2.tolist()}


def make_case(n, d, seed, temperature, scale, world_size):
    h = {
        "temperature": temperature,
        "lambd": 0.0051,
        "scale": scale,
        "bt_eps": 1e-05,
        "sim_w": 25.0,
        "var_w": 25.0,
        "cov_w": 1.0,
        "gamma": 1.0,
        "vic_eps": 0.0001,
    }
    inputs = make_inputs(n, d, seed)
    losses, per_rank = compute(inputs, h, world_size)
    return {
        "format": FORMAT,
        "generated_by": "ssl-zoo scripts/gen_loss_fixtures.py (float64 PyTorch reference)",
        "torch_version": torch.__version__,
        "dtype": "float64",
        "layout": "row-major, shape [N][D]",
        "N": n,
        "D": d,
        "seed": seed,
        "hyper": h,
        "conventions": CONVENTIONS,
        "inputs": inputs,
        "losses": losses,
        "distributed": {"world_size": world_size, "rows_per_rank": n // world_size, "per_rank_loss": per_rank},
    }


def max_rel_diff(a, b):
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return float((ta - tb).abs().max() / max(float(tb.abs().max()), 1e-300))


def check(path):
    with open(path) as f:
        case = json.load(f)
    assert case["format"] == FORMAT, case["format"]
    w = case.get("distributed", {}).get("world_size", 1)
    inputs = {k: v for k, v in case["inputs"].items()}
    losses, per_rank = compute(inputs, case["hyper"], w)
    worst = 0.0
    for name, ref in case["losses"].items():
        mine = losses[name]
        worst = max(worst, abs(mine["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-300))
        for k, g in ref["grad"].items():
            if any(any(row) for row in g):
                worst = max(worst, max_rel_diff(mine["grad"][k], g))
            else:
                assert not any(any(row) for row in mine["grad"][k]), (name, k)
        for k, v in ref.get("terms", {}).items():
            worst = max(worst, abs(mine["terms"][k] - v) / max(abs(v), 1e-300))
        for mine_r, ref_r in zip(per_rank[name], case["distributed"]["per_rank_loss"][name]):
            worst = max(worst, abs(mine_r - ref_r) / max(abs(ref_r), 1e-300))
    print(f"{path}: largest relative difference {worst:.3g}")
    if not worst < 1e-10:
        sys.exit(f"{path}: does not match this script's conventions")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "losses"))
    ap.add_argument("--check", metavar="FILE", nargs="*", help="verify existing case files instead of writing")
    args = ap.parse_args()
    if args.check is not None:
        for path in args.check:
            check(path)
        return
    os.makedirs(args.out, exist_ok=True)
    for stem, n, d, seed, temperature, scale, w in CASES:
        case = make_case(n, d, seed, temperature, scale, w)
        path = os.path.join(args.out, f"case-{stem}.json")
        with open(path, "w") as f:
            json.dump(case, f)
            f.write("\n")
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")
    for stem, *_ in CASES:
        check(os.path.join(args.out, f"case-{stem}.json"))


if __name__ == "__main__":
    main()
