#!/usr/bin/env python3
"""Generates `ssl-zoo-loss/1` reference files for the zoo losses with an independent float64 PyTorch implementation.

One file per loss, tests/fixtures/losses/zoo-<loss>.json: MoCo v2+, MoCo v3, SimSiam, NNCLR,
SupCon, ReSSL, DCL and DCLW. The TypeScript losses in src/losses are tested against them
(tests/losses/zoo-fixtures.test.ts with one process, tests/distributed/zoo-losses.test.ts with
W = 2 and 3 real processes). Run with Debian's python3-torch:

    /usr/bin/python3 scripts/gen_zoo_loss_fixtures.py                 # writes tests/fixtures/losses/zoo-*.json
    /usr/bin/python3 scripts/gen_zoo_loss_fixtures.py --check tests/fixtures/losses/zoo-*.json

`--check FILE...` recomputes the loss, the gradients and the per-rank losses of existing files
from their inputs and hyper-parameters and fails when they differ.

Every loss is written as solo-learn / lightly write it, with plain PyTorch building blocks
(F.normalize, F.cross_entropy, F.cosine_similarity, exp-then-log where solo-learn does it,
boolean-index masking where lightly does it, autograd), on purpose unlike the TypeScript code.

The per-rank losses are computed the way each rank computes them: rank r holds rows
r*B..r*B+B-1 of every sharded input; a differentiable all-gather is `torch.cat` of every
rank's slice (so autograd sums the gradient over ranks, as the gather's reduce-scatter
backward does), a gather without gradient the same cat, detached. Before writing, the script
asserts mean_r loss_r == loss and sum_r d loss_r / dx == W * d loss / dx (check_rank_split).
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

FORMAT = "ssl-zoo-loss/1"
N, D, K = 12, 8, 10
WORLD_SIZES = (2, 3)
SUPCON_VIEWS = 3
SUPCON_CLASSES = 4

CONVENTIONS = {
    "moco": "solo-learn mocov2plus_loss_func: q, k L2-normalised, k detached, queue [K, D] constant (rows as given); "
    "logits [q.k, q.queue^T]/t, cross-entropy with target 0, mean over rows",
    "mocov3": "solo-learn mocov3_loss_func: q, k L2-normalised; keys of all ranks gathered WITHOUT gradient; "
    "logits q.K^T/t, target of global row g is column g; mean cross-entropy * 2t",
    "simsiam": "solo-learn simsiam_loss_func: -mean_i cos(p_i, z_i.detach())",
    "nnclr": "solo-learn nnclr_loss_func: nn, p L2-normalised, nn detached; p gathered WITH gradient; "
    "logits nn.P^T/t, target of global row g is column g, mean cross-entropy",
    "supcon": "solo-learn simclr_loss_func with indexes = labels repeated per view: anchors = all views' rows "
    "(normalised), candidates = every rank's rows (differentiable gather), pos = sum over same-label candidates "
    "except the anchor itself of exp(s/t), neg = sum over other-label candidates; loss = -mean log(pos/(pos+neg))",
    "ressl": "solo-learn ressl_loss_func: q, k L2-normalised, queue constant; "
    "-mean_i sum_j softmax(k.queue^T/tk detached)_ij * log_softmax(q.queue^T/tq)_ij",
    "dcl": "lightly DCLLoss, symmetric 0.5*(l(z1,z2)+l(z2,z1)), candidates of every rank gathered WITH gradient; "
    "l_i = -s(a_i,b_i)/t * w_i + logsumexp over j != i of [s(a_i,a_j)/t, s(a_i,b_j)/t] (one logsumexp over "
    "the 2N-2 negatives); w = 1",
    "dclw": "as dcl with w_i = 2 - N*softmax_i(s(z1_i,z2_i).detach()/sigma), the softmax over the GLOBAL batch "
    "of N (lightly: the local batch)",
    "distributed": "rank r holds rows r*B..r*B+B-1 of the sharded inputs and all of the unsharded ones; "
    "mean_r loss_r = loss; the gradient on rank r's local rows after every rank backpropagates its own loss_r "
    "is W * (global gradient rows)",
    "grads": "d loss / d input for every float32 input (exact zeros for detached and constant inputs); "
    "int32 inputs (labels) have none",
}


# ----------------------------------------------------------------------------- rank plumbing


def local(x, r, w):
    """Rank r's rows of a sharded input."""
    b = x.shape[0] // w
    return x[r * b:(r + 1) * b]


def gather(x, w):
    """Differentiable all-gather as every rank sees it: the cat of every rank's slice."""
    return torch.cat([local(x, q, w) for q in range(w)], 0)


def gather_no_grad(x, w):
    return gather(x, w).detach()


# ----------------------------------------------------------------------------- losses
# Each is `loss(t, h, r, w)`: rank r's loss in a job of w ranks (w = 1: the global loss), from
# the full float64 inputs t.


def moco(t, h, r, w):
    query = F.normalize(local(t["query"], r, w), dim=1)
    key = F.normalize(local(t["key"], r, w), dim=1).detach()
    queue = t["queue"].detach().T  # solo-learn keeps the queue as [D, K]
    pos = torch.einsum("nc,nc->n", [query, key]).unsqueeze(-1)
    neg = torch.einsum("nc,ck->nk", [query, queue])
    logits = torch.cat([pos, neg], dim=1) / h["temperature"]
    targets = torch.zeros(query.size(0), dtype=torch.long)
    return F.cross_entropy(logits, targets)


def mocov3(t, h, r, w):
    query = F.normalize(local(t["query"], r, w), dim=1)
    key = gather_no_grad(F.normalize(t["key"], dim=1), w)
    n = query.size(0)
    logits = torch.einsum("nc,mc->nm", [query, key]) / h["temperature"]
    labels = torch.arange(n, dtype=torch.long) + n * r
    return F.cross_entropy(logits, labels) * (2 * h["temperature"])


def simsiam(t, h, r, w):
    return -F.cosine_similarity(local(t["p"], r, w), local(t["z"], r, w).detach(), dim=-1).mean()


def nnclr(t, h, r, w):
    nn = F.normalize(local(t["neighbours"], r, w), dim=-1).detach()
    p = gather(F.normalize(t["predictions"], dim=-1), w)
    logits = nn @ p.T / h["temperature"]
    n = nn.size(0)
    labels = torch.arange(n * r, n * (r + 1))
    return F.cross_entropy(logits, labels)


def supcon(t, h, r, w):
    views = [k for k in sorted(t) if k.startswith("view")]
    # What rank q holds: its views' rows stacked view by view, normalised; labels repeated per view.
    def rank_z(q):
        return F.normalize(torch.cat([local(t[v], q, w) for v in views], 0), dim=-1)

    def rank_idx(q):
        return local(t["labels"], q, w).repeat(len(views))

    z = rank_z(r)
    gathered_z = torch.cat([rank_z(q) for q in range(w)], 0)
    sim = torch.exp(torch.einsum("if, jf -> ij", z, gathered_z) / h["temperature"])
    indexes = rank_idx(r).unsqueeze(0)
    gathered_indexes = torch.cat([rank_idx(q) for q in range(w)], 0).unsqueeze(0)
    pos_mask = indexes.t() == gathered_indexes
    pos_mask[:, z.size(0) * r:].fill_diagonal_(0)
    neg_mask = indexes.t() != gathered_indexes
    pos = torch.sum(sim * pos_mask, 1)
    neg = torch.sum(sim * neg_mask, 1)
    return -(torch.mean(torch.log(pos / (pos + neg))))


def ressl(t, h, r, w):
    q = F.normalize(local(t["q"], r, w), dim=1)
    k = F.normalize(local(t["k"], r, w), dim=1)
    queue = t["queue"].detach()
    logits_q = torch.einsum("nc,kc->nk", [q, queue])
    logits_k = torch.einsum("nc,kc->nk", [k, queue])
    return -torch.sum(
        F.softmax(logits_k.detach() / h["temperatureK"], dim=1)
        * F.log_softmax(logits_q / h["temperatureQ"], dim=1),
        dim=1,
    ).mean()


def dcl_weights(z1n, z2n, sigma, r, w):
    """Negative von Mises-Fisher weights of rank r's rows, the softmax over the global batch."""
    sim = torch.einsum("nm,nm->n", gather_no_grad(z1n, w), gather_no_grad(z2n, w)) / sigma
    n = sim.shape[0]
    return local(2 - n * F.softmax(sim, dim=0), r, w)


def dcl(t, h, r, w):
    z1n = F.normalize(t["z1"], dim=1)
    z2n = F.normalize(t["z2"], dim=1)
    out0, out1 = local(z1n, r, w), local(z2n, r, w)
    out0_all, out1_all = gather(z1n, w), gather(z2n, w)
    b = out0.shape[0]
    diag_mask = torch.zeros(b, b * w, dtype=torch.bool)
    diag_mask[torch.arange(b), torch.arange(b) + r * b] = True  # lightly's eye_rank
    weights = dcl_weights(z1n, z2n, h["sigma"], r, w) if "sigma" in h else None

    def one_side(a, b_, a_all, b_all):
        sim_00 = torch.einsum("nc,mc->nm", a, a_all) / h["temperature"]
        sim_01 = torch.einsum("nc,mc->nm", a, b_all) / h["temperature"]
        positive_loss = -sim_01[diag_mask]
        if weights is not None:
            positive_loss = positive_loss * weights
        sim_00 = sim_00[~diag_mask].view(a.shape[0], -1)
        sim_01 = sim_01[~diag_mask].view(a.shape[0], -1)
        negative_loss = torch.logsumexp(torch.cat([sim_00, sim_01], dim=1), dim=1)
        return (positive_loss + negative_loss).mean()

    return 0.5 * (one_side(out0, out1, out0_all, out1_all) + one_side(out1, out0, out1_all, out0_all))


LOSSES = {
    "moco": moco,
    "mocov3": mocov3,
    "simsiam": simsiam,
    "nnclr": nnclr,
    "supcon": supcon,
    "ressl": ressl,
    "dcl": dcl,
    "dclw": dcl,  # DCLW: the same function, with hyper["sigma"]
}


# ----------------------------------------------------------------------------- evaluation


def tensors(inputs):
    out = {}
    for k, spec in inputs.items():
        if spec["dtype"] == "int32":
            out[k] = torch.tensor(spec["data"], dtype=torch.long).reshape(spec["shape"])
        else:
            out[k] = torch.tensor(spec["data"], dtype=torch.float64).reshape(spec["shape"]).requires_grad_(True)
    return out


def compute(loss_name, inputs, h):
    """(loss, grads, per_rank) of one loss from the file's inputs."""
    fn = LOSSES[loss_name]
    t = tensors(inputs)
    float_names = [k for k in inputs if inputs[k]["dtype"] == "float32"]
    xs = [t[k] for k in float_names]
    loss = fn(t, h, 0, 1)
    g_one = torch.autograd.grad(loss, xs, allow_unused=True, retain_graph=True)
    g_one = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, g_one)]
    per_rank = {}
    for w in WORLD_SIZES:
        ranks = [fn(t, h, r, w) for r in range(w)]
        check_rank_split(f"{loss_name} W={w}", loss, g_one, ranks, xs, w)
        per_rank[str(w)] = [float(x) for x in ranks]
    grads = {k: g.reshape(-1).tolist() for k, g in zip(float_names, g_one)}
    return float(loss), grads, per_rank


def check_rank_split(name, loss, g_one, rank_losses, xs, w):
    """mean_r loss_r = loss, and sum_r d loss_r / dx = W * d loss / dx (the rows of every rank)."""
    mean = sum(float(l) for l in rank_losses) / w
    assert abs(mean - float(loss)) <= 1e-12 * max(1.0, abs(float(loss))), (name, mean, float(loss))
    total = torch.stack(rank_losses).sum()
    g_sum = torch.autograd.grad(total, xs, allow_unused=True, retain_graph=True)
    for x, a, c in zip(xs, g_sum, g_one):
        a = torch.zeros_like(x) if a is None else a
        assert torch.allclose(a, w * c, rtol=1e-10, atol=1e-13), (name, float((a - w * c).abs().max()))


# ----------------------------------------------------------------------------- inputs


def spec(x, sharded, dtype="float32"):
    """An input entry; float32 inputs are rounded to float32 first, so that the reference is the
    float64 loss of exactly the values the TypeScript side reads."""
    if dtype == "float32":
        x = x.float().double()
    return {"shape": list(x.shape), "sharded": sharded, "dtype": dtype, "data": x.reshape(-1).tolist()}


def randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def two_views(g, n=N, d=D, noise=0.5):
    """Two correlated views of n samples with per-column scales and a non-zero mean."""
    col_scale = 0.4 + 1.2 * torch.rand(d, generator=g, dtype=torch.float64)
    base = randn(g, n, d)
    v1 = (base + noise * randn(g, n, d)) * col_scale
    v2 = (base + noise * randn(g, n, d)) * col_scale + 0.3
    return v1, v2


def queue_of(g, like, k=K):
    """A queue of k normalised past keys: noisy copies of some of `like`'s rows and random rows."""
    past = torch.cat([like[: k // 2] + 0.8 * randn(g, k // 2, like.shape[1]), randn(g, k - k // 2, like.shape[1])], 0)
    return F.normalize(past, dim=1)


def make_inputs(name, seed):
    g = torch.Generator().manual_seed(seed)
    if name in ("moco", "ressl"):
        q, k = two_views(g)
        queue = queue_of(g, k)
        a, b = ("query", "key") if name == "moco" else ("q", "k")
        return {a: spec(q, True), b: spec(k, True), "queue": spec(queue, False)}
    if name == "mocov3":
        q, k = two_views(g)
        return {"query": spec(q, True), "key": spec(k, True)}
    if name == "simsiam":
        z1, z2 = two_views(g)
        p = z2 + 0.6 * randn(g, N, D)  # a prediction of the other view
        return {"p": spec(p, True), "z": spec(z1, True)}
    if name == "nnclr":
        z1, z2 = two_views(g)
        support = torch.cat([z1[: N // 2] + 0.4 * randn(g, N // 2, D), randn(g, 3 * N // 2, D)], 0)
        nearest = (F.normalize(z1, dim=1) @ F.normalize(support, dim=1).T).argmax(dim=1)
        neighbours = support[nearest]  # the support-set nearest neighbour of view 1
        predictions = z2 + 0.6 * randn(g, N, D)
        return {"neighbours": spec(neighbours, True), "predictions": spec(predictions, True)}
    if name == "supcon":
        labels = torch.arange(N) % SUPCON_CLASSES
        labels = labels[torch.randperm(N, generator=g)]
        centres = 0.8 * randn(g, SUPCON_CLASSES, D)
        base = centres[labels] + randn(g, N, D)
        out = {f"view{v}": spec(base + 0.5 * randn(g, N, D), True) for v in range(SUPCON_VIEWS)}
        out["labels"] = spec(labels, True, "int32")
        return out
    if name in ("dcl", "dclw"):
        z1, z2 = two_views(g)
        return {"z1": spec(z1, True), "z2": spec(z2, True)}
    raise KeyError(name)


# (loss, seed, hyper-parameters of the recipes)
CASES = [
    ("moco", 11, {"temperature": 0.2}),
    ("mocov3", 12, {"temperature": 0.2}),
    ("simsiam", 13, {}),
    ("nnclr", 14, {"temperature": 0.2}),
    ("supcon", 15, {"temperature": 0.1}),
    ("ressl", 16, {"temperatureQ": 0.1, "temperatureK": 0.04}),
    ("dcl", 17, {"temperature": 0.1}),
    ("dclw", 18, {"temperature": 0.1, "sigma": 0.5}),
]


def make_case(name, seed, h):
    inputs = make_inputs(name, seed)
    loss, grads, per_rank = compute(name, inputs, h)
    return {
        "format": FORMAT,
        "generated_by": "ssl-zoo scripts/gen_zoo_loss_fixtures.py (float64 PyTorch reference)",
        "torch_version": torch.__version__,
        "loss": name,
        "hyper": h,
        "N": N,
        "seed": seed,
        "conventions": {
            "loss": CONVENTIONS[name],
            "distributed": CONVENTIONS["distributed"],
            "grads": CONVENTIONS["grads"],
        },
        "inputs": inputs,
        "loss_value": loss,
        "grads": grads,
        "per_rank": per_rank,
    }


def rel(a, b):
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return float((ta - tb).abs().max() / max(float(tb.abs().max()), 1e-300))


def worst_difference(path, case, loss, grads, per_rank):
    """The largest relative difference of this script's loss, gradients and per-rank losses from the file's."""
    assert case["format"] == FORMAT, case["format"]
    worst = abs(loss - case["loss_value"]) / abs(case["loss_value"])
    assert sorted(grads) == sorted(case["grads"]), (sorted(grads), sorted(case["grads"]))
    for k, ref in case["grads"].items():
        if any(ref):
            worst = max(worst, rel(grads[k], ref))
        elif any(grads[k]):
            sys.exit(f"{path}: {k}: the file has a zero gradient, this script not")
    assert sorted(per_rank) == sorted(case["per_rank"]), sorted(case["per_rank"])
    for w, ref in case["per_rank"].items():
        worst = max(worst, rel(per_rank[w], ref))
    return worst


def report(path, case, worst):
    print(f"{path}: {case['loss']}: largest relative difference {worst:.3g}")
    if not worst < 1e-10:
        sys.exit(f"{path}: does not match this script's conventions")


def check(path):
    with open(path) as f:
        case = json.load(f)
    loss, grads, per_rank = compute(case["loss"], case["inputs"], case["hyper"])
    report(path, case, worst_difference(path, case, loss, grads, per_rank))


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)
        f.write("\n")


def run_cli(description, prefix, cases, make_case, check):
    """
    `--check FILE...` checks existing files with `check`; otherwise writes
    `<--out>/<prefix>-<name>.json` for each (name, seed, hyper) of `cases`, checks them, and
    returns the output directory.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "losses"))
    ap.add_argument("--check", metavar="FILE", nargs="*", help=f"verify existing {prefix} files instead of writing")
    args = ap.parse_args()
    if args.check is not None:
        for path in args.check:
            check(path)
        return None
    os.makedirs(args.out, exist_ok=True)
    paths = []
    for name, seed, h in cases:
        case = make_case(name, seed, h)
        path = os.path.join(args.out, f"{prefix}-{name}.json")
        write_json(path, case)
        paths.append(path)
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes): loss {case['loss_value']:.6g}")
    for path in paths:
        check(path)
    return args.out


def main():
    run_cli(__doc__.splitlines()[0], "zoo", CASES, make_case, check)


if __name__ == "__main__":
    main()
