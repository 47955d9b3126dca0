#!/usr/bin/env python3
"""Generates `ssl-zoo-loss/1` reference files for the zoo's second set of losses with an independent float64 PyTorch implementation.

One file per case, tests/fixtures/losses/zoo2-<case>.json: SwAV (Sinkhorn-Knopp assignments
and the swapped-prediction loss, without and with a queue), DINO (with the centre update),
MAE, W-MSE, VIbCReg, All4One's feature term and its centroid term; and tests/fixtures/core/linalg-torch.json, the
Cholesky factor and the lower-triangular solve with PyTorch's autograd gradients. The
TypeScript code is tested against them (tests/losses/zoo2-fixtures.test.ts and
tests/core/linalg.test.ts with one process, tests/distributed/zoo2-losses.test.ts with W = 2
and 3 real processes). Run with Debian's python3-torch:

    /usr/bin/python3 scripts/gen_zoo2_loss_fixtures.py                 # writes the files
    /usr/bin/python3 scripts/gen_zoo2_loss_fixtures.py --check tests/fixtures/losses/zoo2-*.json

`--check FILE...` recomputes the loss, the gradients, the per-rank losses and the outputs of
existing zoo2 files from their inputs and hyper-parameters and fails when they differ.

The format is the one of scripts/gen_zoo_loss_fixtures.py (whose helpers this script uses),
plus `outputs`: the values other than the loss that a case produces, computed on the global
batch (the Sinkhorn assignments, sharded by rows like the inputs; DINO's new centre, the same
on every rank). Each loss is written as solo-learn writes it (Sinkhorn-Knopp with all its
normalisations, `swav_loss_func`, `DINOLoss` as the original DINO with a list of crops,
`mae_loss_func` with `patchify`, `Whitening2d` with `torch.triangular_solve` and `conv2d`,
`vibcreg_loss_func`, All4One's `feature_loss`), with autograd, on purpose unlike the
TypeScript code; the rank plumbing is the one of gen_zoo_loss_fixtures.py: rank r holds rows
r*B..r*B+B-1 of every sharded input, an all-reduce is a sum over every rank's slice, a
differentiable gather the cat of every rank's slice.
"""

import json
import os
import warnings

import torch
import torch.nn.functional as F

from gen_zoo_loss_fixtures import (
    FORMAT,
    WORLD_SIZES,
    check_rank_split,
    gather,
    local,
    randn,
    rel,
    report,
    run_cli,
    spec,
    tensors,
    two_views,
    worst_difference,
    write_json,
)

# solo-learn's Whitening2d calls torch.triangular_solve, deprecated in PyTorch 1.13 (same results).
warnings.filterwarnings("ignore", message="torch.triangular_solve is deprecated")

N, K = 12, 10
WMSE_N, WMSE_D = 24, 6

CONVENTIONS = {
    "swav": "assignments_g = Sinkhorn-Knopp of pred_g (g < 2, the global crops) over the GLOBAL batch (solo-learn's "
    "SinkhornKnopp with its sums all-reduced; with queue_g, the rows of cat(pred_g, queue_g) with the queue counted "
    "once, and only the batch rows kept), no gradient; loss = solo-learn swav_loss_func(preds, assignments, "
    "temperature): mean over pairs (g, v != g) of -mean_i sum_k a_g log_softmax(p_v / t)",
    "dino": "original DINOLoss with crops as lists: t_g = softmax((teacher_g - centre) / teacher_t) detached, "
    "s_v = log_softmax(student_v / student_t); mean over pairs (g, v != g) of mean_i -sum t_g s_v; new centre = "
    "m * centre + (1 - m) * (sum of every teacher row of every rank) / (G * N) (solo-learn's update_center)",
    "mae": "solo-learn mae_loss_func with patchify for NHWC images (patch pixels in (row, column, channel) order), "
    "images detached; norm_pix_loss: (t - mean) / sqrt(var_unbiased + 1e-6) per patch; sum over masked patches "
    "of the per-patch mean squared error / the number of masked patches of the GLOBAL batch (rank r: W * its "
    "share)",
    "wmse": "solo-learn WMSE training step over the GLOBAL batch: for each permutation (row t of permutations), "
    "each view's rows perm[s*w:(s+1)*w] whitened by Whitening2d (triangular_solve(eye, cholesky((1-eps) C + "
    "eps I)), C the unbiased covariance of the sub-batch), then mean over view pairs i < j and permutations of "
    "wmse_loss_func(z_i, z_j, simplified=False) = 2 - 2 mean cos; rank r: the mean over its rows",
    "vibcreg": "solo-learn vibcreg_loss_func: sim * mse(z1, z2) (local rows) + var * (mean relu(1 - sqrt(var + 1e-4)) "
    "of each view, summed) + cov * ((offdiag R1)^2.mean() + (offdiag R2)^2.mean()) with R = normalize(z - mean, "
    "dim=0)^T normalize(z - mean, dim=0) over the GLOBAL batch (gathered)",
    "all4one": "solo-learn All4One feature_loss: columns F.normalize(dim=0) over the GLOBAL batch, C1 = m1^T z2, "
    "C2 = m2^T z1, on = sqrt(0.5 (mean (diag C1 - 1)^2 + mean (diag C2 - 1)^2)), off = sqrt(0.5 (mean offdiag "
    "C1^2 + mean offdiag C2^2)), loss = 10 (0.5 on + 0.5 off); momentum projections detached; every rank returns "
    "the global loss",
    "all4one-centroid": "solo-learn All4One att_nnclr_loss = nnclr_loss_func(rich1, strange2) / 2 + "
    "nnclr_loss_func(rich2, strange1) / 2 with its default temperature (hyper temperature): rich_v (centroids, "
    "NOT detached) local, strange_v normalised and gathered (differentiable), logits [B, N] = rich . strange^T / t, "
    "target of local row i = global column r*B + i, mean cross-entropy over the local rows",
    "distributed": "rank r holds rows r*B..r*B+B-1 of the sharded inputs and all of the unsharded ones; "
    "mean_r loss_r = loss; the gradient on rank r's local rows after every rank backpropagates its own loss_r "
    "is W * (global gradient rows); outputs are the global batch's (sharded ones: rank r gets its rows)",
    "grads": "d loss / d input for every float32 input (exact zeros for detached and constant inputs); "
    "int32 inputs (masks, permutations) have none",
}


def gathered(t, name, w):
    return gather(t[name], w)


# ----------------------------------------------------------------------------- SwAV


def sinkhorn_knopp(scores, queue, epsilon, iters):
    """solo-learn's SinkhornKnopp on the global batch (what its all-reduced sums compute), the
    queue rows counted once; returns the batch rows."""
    with torch.no_grad():
        n = scores.shape[0]
        s = scores if queue is None else torch.cat([scores, queue])
        Q = torch.exp(s / epsilon).t()
        B = Q.shape[1]
        K_ = Q.shape[0]
        Q /= torch.sum(Q)
        for _ in range(iters):
            Q /= torch.sum(Q, dim=1, keepdim=True)
            Q /= K_
            Q /= torch.sum(Q, dim=0, keepdim=True)
            Q /= B
        Q *= B
        return Q.t()[:n]


def swav_loss_func(preds, assignments, temperature):
    """solo-learn's swav_loss_func."""
    losses = []
    for v1, a in enumerate(assignments):
        for v2 in [v for v in range(len(preds)) if v != v1]:
            p = preds[v2] / temperature
            losses.append(-torch.mean(torch.sum(a * torch.log_softmax(p, dim=1), dim=1)))
    return sum(losses) / len(losses)


def swav(t, h, r, w):
    preds = [t[k] for k in sorted(k for k in t if k.startswith("pred"))]
    q_global = [sinkhorn_knopp(preds[g], t.get(f"queue{g}"), h["epsilon"], int(h["iterations"])) for g in range(2)]
    loss = swav_loss_func([local(p, r, w) for p in preds], [local(q, r, w) for q in q_global], h["temperature"])
    return loss, {f"assignments{g}": (q, True) for g, q in enumerate(q_global)}


# ----------------------------------------------------------------------------- DINO


def dino(t, h, r, w):
    students = [t[k] for k in sorted(k for k in t if k.startswith("student"))]
    teachers = [t[k] for k in sorted(k for k in t if k.startswith("teacher"))]
    centre = t["centre"].detach().unsqueeze(0)
    student_out = torch.cat([local(s, r, w) for s in students]) / h["studentTemperature"]
    student_out = student_out.chunk(len(students))
    teacher_output = torch.cat([local(x, r, w) for x in teachers])
    teacher_out = F.softmax((teacher_output - centre) / h["teacherTemperature"], dim=-1)
    teacher_out = teacher_out.detach().chunk(len(teachers))
    total_loss = 0
    n_loss_terms = 0
    for iq, q in enumerate(teacher_out):
        for iv, v in enumerate(student_out):
            if iv == iq:
                continue
            total_loss += torch.sum(-q * F.log_softmax(v, dim=-1), dim=-1).mean()
            n_loss_terms += 1
    total_loss /= n_loss_terms
    with torch.no_grad():
        # update_center: the all-reduced sum of every rank's teacher rows / world size / local rows
        batch_center = sum(torch.sum(torch.cat([local(x, q, w) for x in teachers]), dim=0, keepdim=True) for q in range(w))
        batch_center = batch_center / w / len(teacher_output)
        m = h["centreMomentum"]
        new_centre = centre * m + batch_center * (1 - m)
    return total_loss, {"centre": (new_centre.squeeze(0), False)}


# ----------------------------------------------------------------------------- MAE


def patchify(imgs, patch_size):
    """solo-learn's patchify for NHWC images: [N, H, W, C] -> [N, L, p*p*C] in (p, q, c) order."""
    imgs = imgs.permute(0, 3, 1, 2)  # to solo-learn's NCHW
    h = imgs.size(2) // patch_size
    wd = imgs.size(3) // patch_size
    x = imgs.reshape(shape=(imgs.size(0), imgs.size(1), h, patch_size, wd, patch_size))
    x = torch.einsum("nchpwq->nhwpqc", x)
    return x.reshape(shape=(imgs.size(0), h * wd, patch_size**2 * imgs.size(1)))


def mae(t, h, r, w):
    p = int(h["patchSize"])

    def masked_sum_and_count(q):
        target = patchify(local(t["images"], q, w).detach(), p)
        if h["normPixLoss"]:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = ((local(t["predictions"], q, w) - target) ** 2).mean(dim=-1)
        mask = local(t["mask"], q, w).to(torch.float64)
        return (loss * mask).sum(), mask.sum()

    mine, _ = masked_sum_and_count(r)
    count = sum(masked_sum_and_count(q)[1] for q in range(w))  # the all-reduced number of masked patches
    return w * mine / count, {}


# ----------------------------------------------------------------------------- W-MSE


def whitening2d(x, eps):
    """solo-learn's Whitening2d.forward (float64)."""
    output_dim = x.shape[1]
    x = x.unsqueeze(2).unsqueeze(3)
    m = x.mean(0).view(output_dim, -1).mean(-1).view(1, -1, 1, 1)
    xn = x - m
    T = xn.permute(1, 0, 2, 3).contiguous().view(output_dim, -1)
    f_cov = torch.mm(T, T.permute(1, 0)) / (T.shape[-1] - 1)
    eye = torch.eye(output_dim).type(f_cov.type())
    f_cov_shrinked = (1 - eps) * f_cov + eps * eye
    inv_sqrt = torch.triangular_solve(eye, torch.linalg.cholesky(f_cov_shrinked), upper=False)[0]
    inv_sqrt = inv_sqrt.contiguous().view(output_dim, output_dim, 1, 1)
    decorrelated = F.conv2d(xn, inv_sqrt)
    return decorrelated.squeeze(2).squeeze(2)


def wmse_loss_func(z1, z2):
    """solo-learn's wmse_loss_func with simplified=False."""
    z1 = F.normalize(z1, dim=-1)
    z2 = F.normalize(z2, dim=-1)
    return 2 - 2 * (z1 * z2).sum(dim=-1).mean()


def wmse(t, h, r, w):
    views = [gathered(t, k, w) for k in sorted(k for k in t if k.startswith("view"))]
    v = torch.cat(views)
    bs = views[0].shape[0]
    ws = int(h["whiteningSize"])
    num_losses, loss = 0, 0
    for perm in t["permutations"]:
        z = torch.empty_like(v)
        for idx in perm.view(-1, ws):
            for i in range(len(views)):
                z[idx + i * bs] = whitening2d(v[idx + i * bs], h["eps"])
        for i in range(len(views) - 1):
            for j in range(i + 1, len(views)):
                x0 = z[i * bs:(i + 1) * bs]
                x1 = z[j * bs:(j + 1) * bs]
                loss += wmse_loss_func(local(x0, r, w), local(x1, r, w))
                num_losses += 1
    return loss / num_losses, {}


# ----------------------------------------------------------------------------- VIbCReg, All4One


def vibcreg(t, h, r, w):
    z1, z2 = local(t["z1"], r, w), local(t["z2"], r, w)
    sim_loss = F.mse_loss(z1, z2)
    z1, z2 = gathered(t, "z1", w), gathered(t, "z2", w)
    eps = 1e-4
    std_z1 = torch.sqrt(z1.var(dim=0) + eps)
    std_z2 = torch.sqrt(z2.var(dim=0) + eps)
    var_loss = torch.mean(F.relu(1 - std_z1)) + torch.mean(F.relu(1 - std_z2))
    norm_z1 = F.normalize(z1 - z1.mean(dim=0), p=2, dim=0)
    norm_z2 = F.normalize(z2 - z2.mean(dim=0), p=2, dim=0)
    fxf_cov_z1 = torch.mm(norm_z1.T, norm_z1)
    fxf_cov_z2 = torch.mm(norm_z2.T, norm_z2)
    fxf_cov_z1.fill_diagonal_(0.0)
    fxf_cov_z2.fill_diagonal_(0.0)
    cov_loss = (fxf_cov_z1**2).mean() + (fxf_cov_z2**2).mean()
    return h["simWeight"] * sim_loss + h["varWeight"] * var_loss + h["covWeight"] * cov_loss, {}


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def all4one(t, h, r, w):
    p1_norm_feat = F.normalize(gathered(t, "momentumZ1", w).detach(), dim=0)
    p2_norm_feat = F.normalize(gathered(t, "momentumZ2", w).detach(), dim=0)
    z1_norm_feat = F.normalize(gathered(t, "z1", w), dim=0)
    z2_norm_feat = F.normalize(gathered(t, "z2", w), dim=0)
    corr_matrix_1_feat = p1_norm_feat.T @ z2_norm_feat
    corr_matrix_2_feat = p2_norm_feat.T @ z1_norm_feat
    on_diag_feat = (
        (torch.diagonal(corr_matrix_1_feat).add(-1).pow(2).mean() + torch.diagonal(corr_matrix_2_feat).add(-1).pow(2).mean()) * 0.5
    ).sqrt()
    off_diag_feat = ((off_diagonal(corr_matrix_1_feat).pow(2).mean() + off_diagonal(corr_matrix_2_feat).pow(2).mean()) * 0.5).sqrt()
    return (0.5 * on_diag_feat + 0.5 * off_diag_feat) * 10, {}


def all4one_centroid(t, h, r, w):
    def nnclr_loss_func(nn, p):
        nn = F.normalize(local(nn, r, w), dim=-1)
        p = gather(F.normalize(p, dim=-1), w)
        b = nn.shape[0]
        logits = nn @ p.T / h["temperature"]
        return F.cross_entropy(logits, torch.arange(b * r, b * (r + 1)))

    return nnclr_loss_func(t["rich1"], t["strange2"]) / 2 + nnclr_loss_func(t["rich2"], t["strange1"]) / 2, {}


LOSSES = {"swav": swav, "swav-queue": swav, "dino": dino, "mae": mae, "wmse": wmse, "vibcreg": vibcreg, "all4one": all4one, "all4one-centroid": all4one_centroid}


# ----------------------------------------------------------------------------- evaluation


def compute(name, inputs, h):
    """(loss, grads, per_rank, outputs) of one case from the file's inputs."""
    fn = LOSSES[name]
    t = tensors(inputs)
    float_names = [k for k in inputs if inputs[k]["dtype"] == "float32"]
    xs = [t[k] for k in float_names]
    loss, outputs = fn(t, h, 0, 1)
    g_one = torch.autograd.grad(loss, xs, allow_unused=True, retain_graph=True)
    g_one = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, g_one)]
    per_rank = {}
    for w in WORLD_SIZES:
        ranks = [fn(t, h, r, w) for r in range(w)]
        check_rank_split(f"{name} W={w}", loss, g_one, [l for l, _ in ranks], xs, w)
        for r, (_, outs) in enumerate(ranks):
            for k, (value, sharded) in outs.items():
                expected = local(outputs[k][0], r, w) if sharded else outputs[k][0]
                assert torch.allclose(local(value, r, w) if sharded else value, expected, rtol=1e-12, atol=0), (name, k, w, r)
        per_rank[str(w)] = [float(l) for l, _ in ranks]
    grads = {k: g.reshape(-1).tolist() for k, g in zip(float_names, g_one)}
    outs = {k: {"shape": list(v.shape), "sharded": s, "data": v.reshape(-1).tolist()} for k, (v, s) in outputs.items()}
    return float(loss), grads, per_rank, outs


# ----------------------------------------------------------------------------- inputs


def scores(g, n, k=K, d=8):
    """Cosine similarities of n embeddings with k unit prototypes (SwAV's prototype scores)."""
    z = F.normalize(randn(g, n, d), dim=1)
    prototypes = F.normalize(randn(g, k, d), dim=1)
    return z @ prototypes.T


def make_inputs(name, seed):
    g = torch.Generator().manual_seed(seed)
    if name.startswith("swav"):
        out = {f"pred{v}": spec(scores(g, N), True) for v in range(4)}  # 2 global, 2 local crops
        if name == "swav-queue":
            out.update({f"queue{q}": spec(scores(g, 6), False) for q in range(2)})
        return out
    if name == "dino":
        base = randn(g, N, K)
        out = {f"student{v}": spec(base + 0.7 * randn(g, N, K), True) for v in range(4)}
        out.update({f"teacher{v}": spec(base + 0.3 * randn(g, N, K) + 0.5, True) for v in range(2)})
        out["centre"] = spec(0.3 * randn(g, K), False)
        return out
    if name == "mae":
        images = torch.rand(N, 4, 4, 3, generator=g, dtype=torch.float64)
        target = patchify(images, 2)  # [N, 4, 12]
        predictions = (target - target.mean(-1, keepdim=True)) / target.std(-1, keepdim=True) + 0.3 * randn(g, N, 4, 12)
        mask = (torch.rand(N, 4, generator=g) < 0.6).to(torch.long)
        mask[0, 0] = 1  # every rank masks at least one patch; the counts differ between ranks
        return {"images": spec(images, True), "predictions": spec(predictions, True), "mask": spec(mask, True, "int32")}
    if name == "wmse":
        # Correlated columns; the sub-batch covariances' condition numbers are 19 to 139 (float32
        # whitening loses about log10(cond) digits, as solo-learn's float32 Whitening2d does).
        mix = randn(g, WMSE_D, WMSE_D) * 0.2 + torch.eye(WMSE_D, dtype=torch.float64)
        base = randn(g, WMSE_N, WMSE_D)
        out = {f"view{v}": spec((base + 0.6 * randn(g, WMSE_N, WMSE_D)) @ mix + 0.2 * v, True) for v in range(3)}
        perms = torch.stack([torch.randperm(WMSE_N, generator=g) for _ in range(2)])
        out["permutations"] = spec(perms, False, "int32")
        return out
    if name == "vibcreg":
        z1, z2 = two_views(g)
        return {"z1": spec(z1, True), "z2": spec(z2, True)}
    if name == "all4one":
        m1, m2 = two_views(g)
        z1 = m1 + 0.4 * randn(g, N, 8)
        z2 = m2 + 0.4 * randn(g, N, 8)
        return {"momentumZ1": spec(m1, True), "momentumZ2": spec(m2, True), "z1": spec(z1, True), "z2": spec(z2, True)}
    if name == "all4one-centroid":
        rich1, strange1 = two_views(g)
        rich2, strange2 = two_views(g)
        return {"rich1": spec(rich1, True), "rich2": spec(rich2, True), "strange1": spec(strange1, True), "strange2": spec(strange2, True)}
    raise KeyError(name)


# (case, seed, hyper-parameters of the recipes)
CASES = [
    ("swav", 21, {"temperature": 0.1, "epsilon": 0.05, "iterations": 3}),
    ("swav-queue", 22, {"temperature": 0.1, "epsilon": 0.05, "iterations": 3}),
    ("dino", 23, {"studentTemperature": 0.1, "teacherTemperature": 0.04, "centreMomentum": 0.9}),
    ("mae", 24, {"patchSize": 2, "normPixLoss": 1}),
    ("wmse", 25, {"whiteningSize": 12, "eps": 0}),
    ("vibcreg", 26, {"simWeight": 25, "varWeight": 25, "covWeight": 200}),
    ("all4one", 27, {}),
    ("all4one-centroid", 29, {"temperature": 0.1}),
]


def make_case(name, seed, h):
    inputs = make_inputs(name, seed)
    loss, grads, per_rank, outputs = compute(name, inputs, h)
    return {
        "format": FORMAT,
        "generated_by": "ssl-zoo scripts/gen_zoo2_loss_fixtures.py (float64 PyTorch reference)",
        "torch_version": torch.__version__,
        "loss": name,
        "hyper": h,
        "N": inputs[next(iter(inputs))]["shape"][0],
        "seed": seed,
        "conventions": {
            "loss": CONVENTIONS.get(name, CONVENTIONS[name.split("-")[0]]),
            "distributed": CONVENTIONS["distributed"],
            "grads": CONVENTIONS["grads"],
        },
        "inputs": inputs,
        "loss_value": loss,
        "grads": grads,
        "per_rank": per_rank,
        "outputs": outputs,
    }


def check(path):
    with open(path) as f:
        case = json.load(f)
    loss, grads, per_rank, outputs = compute(case["loss"], case["inputs"], case["hyper"])
    worst = worst_difference(path, case, loss, grads, per_rank)
    assert sorted(outputs) == sorted(case["outputs"]), sorted(case["outputs"])
    for k, ref in case["outputs"].items():
        worst = max(worst, rel(outputs[k]["data"], ref["data"]))
    report(path, case, worst)


# ----------------------------------------------------------------------------- linear algebra


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
        "generated_by": "ssl-zoo scripts/gen_zoo2_loss_fixtures.py (float64 PyTorch autograd)",
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
    out = run_cli(__doc__.splitlines()[0], "zoo2", CASES, make_case, check)
    if out is not None:
        path = os.path.join(out, "..", "core", "linalg-torch.json")
        write_json(path, linalg_case())
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
