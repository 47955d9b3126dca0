#!/usr/bin/env python3
"""Writes `ssl-loss-oracle/2` loss cases: every loss of the zoo, in float64 PyTorch, independent of ssl-zoo.

One file, tests/fixtures/losses/cases.json, holds one case per loss (and per state variant:
SwAV with a queue, DCLW, DeepCluster v2 with lopsided clusters): its inputs, its state
before the step (queues, DINO's centre), its hyper-parameters, and the expected loss, the
gradients with respect to every input, the per-rank losses for W = 2, 3 and 4, the outputs
(SwAV's assignments) and the state after the step (DINO's new centre). docs/loss-case.md
describes the format; `ssl-train verify --case FILE --devices W` checks ssl-zoo against it,
and the loss tests read it. Run it with a Python that has PyTorch (Debian: /usr/bin/python3
with python3-torch):

    /usr/bin/python3 scripts/gen_loss_cases.py                    # writes tests/fixtures/losses/cases.json
    /usr/bin/python3 scripts/gen_loss_cases.py --out my-cases.json --only simclr swav-queue
    /usr/bin/python3 scripts/gen_loss_cases.py --check tests/fixtures/losses/cases.json

`--check FILE...` recomputes every case of existing files (this format, or the first one,
`ssl-loss-oracle/1`) from their inputs, state and hyper-parameters and fails when anything
differs by more than 1e-10 (relative): it proves that this script and the file's author follow
the same conventions.

Every loss is written the way solo-learn / lightly / the papers write it, with plain PyTorch
building blocks (F.normalize, F.cross_entropy, F.batch_norm, torch.linalg.cholesky, autograd),
on purpose unlike the TypeScript code; nothing here imports ssl-zoo.

The distributed contract (docs/design.md): rank r of W holds the slice r*B..r*B+B-1 (B = N/W)
of every input along its `batch_axis`, and all of the inputs without one and all of the state;
each function below computes RANK r's loss from the full tensors, with a differentiable
all-gather written as the cat of every rank's slice (autograd then sums the gradient over
ranks, as the gather's reduce-scatter backward does) and an all-reduce as a sum over the ranks'
slices. Before writing, the script asserts for every W that mean_r loss_r == loss,
sum_r d loss_r / dx == W * d loss / dx, and that every rank's outputs and state after are the
global ones (check_rank_split).
"""

import argparse
import json
import math
import os
import sys
import warnings

import torch
import torch.nn.functional as F

FORMAT = "ssl-loss-oracle/2"
WORLD_SIZES = (2, 3, 4)
N, D, K = 12, 8, 10

# solo-learn's Whitening2d calls torch.triangular_solve, deprecated in PyTorch 1.13 (same results).
warnings.filterwarnings("ignore", message="torch.triangular_solve is deprecated")

DISTRIBUTED = (
    "rank r of W holds the slice r*B..r*B+B-1 (B = N/W) of every input along its batch_axis, all of the inputs "
    "whose batch_axis is null and all of the state; mean_r loss_r = loss; the gradient of rank r's own loss_r on "
    "its slice is W * (the slice of the global gradient), on an input without batch axis the mean over ranks of "
    "their gradients is the global gradient; outputs are the global batch's (rank r: its slice of those with a "
    "batch_axis), state_after the same on every rank; state gets no gradient"
)


# ----------------------------------------------------------------------------- rank plumbing


def local(x, r, w, axis=0):
    """Rank r's slice of a sharded input along `axis`."""
    b = x.shape[axis] // w
    return x.narrow(axis, r * b, b)


def gather(x, w, axis=0):
    """Differentiable all-gather as every rank sees it: the cat of every rank's slice."""
    return torch.cat([local(x, q, w, axis) for q in range(w)], axis)


def gather_no_grad(x, w):
    return gather(x, w).detach()


def numbered(t, prefix):
    names = sorted((k for k in t if k.startswith(prefix) and k[len(prefix):].isdigit()), key=lambda k: int(k[len(prefix):]))
    return [t[k] for k in names]


# ----------------------------------------------------------------------------- losses
# Each is `loss(t, h, r, w) -> (loss_r, outputs, state_after)`: rank r's loss in a job of w
# ranks (w = 1: the global loss) from the full float64 inputs and state t; outputs
# {name: (tensor, batch_axis or None)}, state_after {name: tensor}.


def simclr(t, h, r, w):
    """NT-Xent: rows [z1; z2] L2-normalised, positive of i is i+N, self masked; rank r: mean over its 2B anchors."""
    n = t["z1"].shape[0]
    z = F.normalize(torch.cat([t["z1"], t["z2"]]), dim=1)
    logits = (z @ z.T / h["temperature"]).masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    per_anchor = F.cross_entropy(logits, targets, reduction="none")
    b = n // w
    return torch.cat([per_anchor[r * b:(r + 1) * b], per_anchor[n + r * b:n + (r + 1) * b]]).mean(), {}, {}


def barlow_parts(z1, z2, h):
    n, d = z1.shape
    z1n = F.batch_norm(z1, None, None, training=True, eps=h["eps"])  # (z - mean) / sqrt(var_biased + eps)
    z2n = F.batch_norm(z2, None, None, training=True, eps=h["eps"])
    c = torch.einsum("bi,bj->ij", z1n, z2n) / n
    eye = torch.eye(d, dtype=torch.bool)
    return (1 - c[eye]).pow(2).sum(), c[~eye].pow(2).sum()


def barlow(t, h, r, w):
    """Barlow Twins on the global batch; every rank returns the global loss."""
    on, off = barlow_parts(t["z1"], t["z2"], h)
    return h["scale"] * (on + h["lambd"] * off), {}, {}


def byol(t, h, r, w):
    """mean over rank r's rows of (2 - 2cos(p1, z2)) + (2 - 2cos(p2, z1)); z detached."""
    p1, p2, z1, z2 = (local(t[k], r, w) for k in ("p1", "p2", "z1", "z2"))
    per = (2 - 2 * F.cosine_similarity(p1, z2.detach(), dim=-1)) + (2 - 2 * F.cosine_similarity(p2, z1.detach(), dim=-1))
    return per.mean(), {}, {}


def vicreg_parts(z1, z2, h):
    n, d = z1.shape

    def std(z):
        return torch.sqrt(z.var(dim=0, unbiased=True) + h["eps"])

    def cov(z):
        zc = z - z.mean(dim=0)
        c = zc.T @ zc / (n - 1)
        return c[~torch.eye(d, dtype=torch.bool)].pow(2).sum() / d

    variance = (F.relu(h["gamma"] - std(z1)).mean() + F.relu(h["gamma"] - std(z2)).mean()) / 2
    return variance, cov(z1) + cov(z2)


def vicreg(t, h, r, w):
    """simWeight * MSE over rank r's rows + the variance and covariance terms of the global batch."""
    variance, covariance = vicreg_parts(t["z1"], t["z2"], h)
    mse = F.mse_loss(local(t["z1"], r, w), local(t["z2"], r, w))
    return h["simWeight"] * mse + h["varWeight"] * variance + h["covWeight"] * covariance, {}, {}


def moco(t, h, r, w):
    query = F.normalize(local(t["query"], r, w), dim=1)
    key = F.normalize(local(t["key"], r, w), dim=1).detach()
    queue = t["queue"].detach().T  # solo-learn keeps the queue as [D, K]
    pos = torch.einsum("nc,nc->n", [query, key]).unsqueeze(-1)
    neg = torch.einsum("nc,ck->nk", [query, queue])
    logits = torch.cat([pos, neg], dim=1) / h["temperature"]
    return F.cross_entropy(logits, torch.zeros(query.size(0), dtype=torch.long)), {}, {}


def mocov3(t, h, r, w):
    query = F.normalize(local(t["query"], r, w), dim=1)
    key = gather_no_grad(F.normalize(t["key"], dim=1), w)
    n = query.size(0)
    logits = torch.einsum("nc,mc->nm", [query, key]) / h["temperature"]
    return F.cross_entropy(logits, torch.arange(n, dtype=torch.long) + n * r) * (2 * h["temperature"]), {}, {}


def simsiam(t, h, r, w):
    return -F.cosine_similarity(local(t["p"], r, w), local(t["z"], r, w).detach(), dim=-1).mean(), {}, {}


def nnclr(t, h, r, w):
    nn = F.normalize(local(t["neighbours"], r, w), dim=-1).detach()
    p = gather(F.normalize(t["predictions"], dim=-1), w)
    logits = nn @ p.T / h["temperature"]
    n = nn.size(0)
    return F.cross_entropy(logits, torch.arange(n * r, n * (r + 1))), {}, {}


def supcon(t, h, r, w):
    views = numbered(t, "view")

    def rank_z(q):  # what rank q holds: its views' rows stacked view by view, normalised
        return F.normalize(torch.cat([local(v, q, w) for v in views], 0), dim=-1)

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
    return -(torch.mean(torch.log(pos / (pos + neg)))), {}, {}


def ressl(t, h, r, w):
    q = F.normalize(local(t["q"], r, w), dim=1)
    k = F.normalize(local(t["k"], r, w), dim=1)
    queue = t["queue"].detach()
    logits_q = torch.einsum("nc,kc->nk", [q, queue])
    logits_k = torch.einsum("nc,kc->nk", [k, queue])
    loss = -torch.sum(F.softmax(logits_k.detach() / h["temperatureK"], dim=1) * F.log_softmax(logits_q / h["temperatureQ"], dim=1), dim=1).mean()
    return loss, {}, {}


def dcl(t, h, r, w):
    """lightly's DCLLoss (DCLW with hyper sigma, its weights' softmax over the GLOBAL batch)."""
    z1n = F.normalize(t["z1"], dim=1)
    z2n = F.normalize(t["z2"], dim=1)
    out0, out1 = local(z1n, r, w), local(z2n, r, w)
    out0_all, out1_all = gather(z1n, w), gather(z2n, w)
    b = out0.shape[0]
    diag_mask = torch.zeros(b, b * w, dtype=torch.bool)
    diag_mask[torch.arange(b), torch.arange(b) + r * b] = True  # lightly's eye_rank
    weights = None
    if "sigma" in h:
        sim = torch.einsum("nm,nm->n", gather_no_grad(z1n, w), gather_no_grad(z2n, w)) / h["sigma"]
        weights = local(2 - sim.shape[0] * F.softmax(sim, dim=0), r, w)

    def one_side(a, a_all, b_all):
        sim_00 = torch.einsum("nc,mc->nm", a, a_all) / h["temperature"]
        sim_01 = torch.einsum("nc,mc->nm", a, b_all) / h["temperature"]
        positive_loss = -sim_01[diag_mask]
        if weights is not None:
            positive_loss = positive_loss * weights
        sim_00 = sim_00[~diag_mask].view(a.shape[0], -1)
        sim_01 = sim_01[~diag_mask].view(a.shape[0], -1)
        return (positive_loss + torch.logsumexp(torch.cat([sim_00, sim_01], dim=1), dim=1)).mean()

    return 0.5 * (one_side(out0, out0_all, out1_all) + one_side(out1, out1_all, out0_all)), {}, {}


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


def swav(t, h, r, w):
    """Sinkhorn-Knopp assignments of the 2 global crops (with queue_g when the state has it), solo-learn's swav_loss_func."""
    preds = numbered(t, "pred")
    q_global = [sinkhorn_knopp(preds[g], t.get(f"queue{g}"), h["epsilon"], int(h["iterations"])) for g in range(2)]
    losses = []
    for v1, a in enumerate(q_global):
        for v2 in [v for v in range(len(preds)) if v != v1]:
            p = local(preds[v2], r, w) / h["temperature"]
            losses.append(-torch.mean(torch.sum(local(a, r, w) * torch.log_softmax(p, dim=1), dim=1)))
    return sum(losses) / len(losses), {f"assignments{g}": (q, 0) for g, q in enumerate(q_global)}, {}


def dino(t, h, r, w):
    """The original DINOLoss with lists of crops; the centre update of the global batch (solo-learn's update_center)."""
    students = numbered(t, "student")
    teachers = numbered(t, "teacher")
    centre = t["centre"].detach().unsqueeze(0)
    student_out = [local(s, r, w) / h["studentTemperature"] for s in students]
    teacher_out = [F.softmax((local(x, r, w) - centre) / h["teacherTemperature"], dim=-1).detach() for x in teachers]
    total_loss, n_loss_terms = 0, 0
    for iq, q in enumerate(teacher_out):
        for iv, v in enumerate(student_out):
            if iv == iq:
                continue
            total_loss += torch.sum(-q * F.log_softmax(v, dim=-1), dim=-1).mean()
            n_loss_terms += 1
    total_loss /= n_loss_terms
    with torch.no_grad():
        # the all-reduced sum of every rank's teacher rows / world size / local rows
        batch_center = sum(torch.sum(torch.cat([local(x, q, w) for x in teachers]), dim=0, keepdim=True) for q in range(w))
        batch_center = batch_center / w / (len(teachers) * local(teachers[0], r, w).shape[0])
        m = h["centreMomentum"]
        new_centre = centre * m + batch_center * (1 - m)
    return total_loss, {}, {"centre": new_centre.squeeze(0)}


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
    return w * mine / count, {}, {}


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
    return F.conv2d(xn, inv_sqrt).squeeze(2).squeeze(2)


def wmse(t, h, r, w):
    views = [gather(v, w) for v in numbered(t, "view")]
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
                x0 = F.normalize(local(z[i * bs:(i + 1) * bs], r, w), dim=-1)
                x1 = F.normalize(local(z[j * bs:(j + 1) * bs], r, w), dim=-1)
                loss += 2 - 2 * (x0 * x1).sum(dim=-1).mean()  # wmse_loss_func(simplified=False)
                num_losses += 1
    return loss / num_losses, {}, {}


def vibcreg(t, h, r, w):
    sim_loss = F.mse_loss(local(t["z1"], r, w), local(t["z2"], r, w))
    z1, z2 = gather(t["z1"], w), gather(t["z2"], w)
    eps = 1e-4
    std_z1 = torch.sqrt(z1.var(dim=0) + eps)
    std_z2 = torch.sqrt(z2.var(dim=0) + eps)
    var_loss = torch.mean(F.relu(1 - std_z1)) + torch.mean(F.relu(1 - std_z2))
    norm_z1 = F.normalize(z1 - z1.mean(dim=0), p=2, dim=0)
    norm_z2 = F.normalize(z2 - z2.mean(dim=0), p=2, dim=0)
    c1 = torch.mm(norm_z1.T, norm_z1)
    c2 = torch.mm(norm_z2.T, norm_z2)
    c1.fill_diagonal_(0.0)
    c2.fill_diagonal_(0.0)
    cov_loss = (c1**2).mean() + (c2**2).mean()
    return h["simWeight"] * sim_loss + h["varWeight"] * var_loss + h["covWeight"] * cov_loss, {}, {}


def simdino(t, h, r, w):
    """SimDINO's MCRLoss (expa_type=0, reduce_cov=1): features F.normalize-d; the coding rate of the student's global
    crops from their Gram matrices summed over the ranks (differentiable all-reduce)."""
    students = [F.normalize(s, dim=-1) for s in numbered(t, "student")]
    teachers = [F.normalize(x, dim=-1).detach() for x in numbered(t, "teacher")]
    comp, n_terms = 0, 0
    for ig, tg in enumerate(teachers):
        for iv, sv in enumerate(students):
            if iv != ig:
                comp = comp + F.cosine_similarity(local(tg, r, w), local(sv, r, w), dim=-1).mean()
                n_terms += 1
    comp = comp / n_terms
    m, p = local(students[0], r, w).shape
    n = m * w
    expa = 0
    for sg in students[: len(teachers)]:
        cov = sum(local(sg, q, w).T @ local(sg, q, w) for q in range(w))  # dist_nn.all_reduce(Z^T Z)
        chol = torch.linalg.cholesky(torch.eye(p, dtype=cov.dtype) + p / (n * h["eps"]) * cov)
        expa = expa + chol.diagonal().log().sum()
    expa = expa / len(teachers) * (p + n) / (p * n)
    return -h["alignWeight"] * comp - expa, {}, {}


def lejepa(t, h, r, w):
    """LeJEPA (MINIMAL.md, the lejepa package's SlicingUnivariateTest + EppsPulley): (1 - lambda) * the prediction of
    every view to the mean of the global views + lambda * SIGReg, its ECF over the GLOBAL batch (differentiable
    all-reduce of the cos / sin sums, torch.distributed.nn.all_reduce)."""
    views = numbered(t, "view")
    a = t["projections"].detach()  # drawn under no_grad, the same on every rank
    g = int(h["globalViews"])
    lv = [local(v, r, w) for v in views]
    centre = sum(lv[:g]) / g
    inv = torch.stack([(centre - v).square().mean() for v in lv]).mean()
    knots, t_max = int(h["knots"]), h["tMax"]
    tt = torch.linspace(0, t_max, knots, dtype=torch.float64)
    dt = t_max / (knots - 1)
    weights = torch.full((knots,), 2 * dt, dtype=torch.float64)
    weights[[0, -1]] = dt
    phi = torch.exp(-0.5 * tt.square())
    n = views[0].shape[0]
    stats = []
    for v in views:
        x_t = (v @ a).unsqueeze(-1) * tt  # [N, S, T]
        cos_mean = sum(local(x_t, q, w).cos().sum(0) for q in range(w)) / n  # all-reduced sums / N
        sin_mean = sum(local(x_t, q, w).sin().sum(0) for q in range(w)) / n
        err = (cos_mean - phi).square() + sin_mean.square()
        stats.append((err @ (weights * phi)) * n)
    sigreg = torch.stack(stats).mean()
    lam = h["sigregWeight"]
    return (1 - lam) * inv + lam * sigreg, {}, {}


def ijepa(t, h, r, w):
    """I-JEPA (facebookresearch/ijepa src/train.py): targets F.layer_norm-ed over their features (no affine, eps 1e-5)
    and detached; F.smooth_l1_loss (beta) or F.mse_loss summed over rank r's rows / (D * the target rows of the GLOBAL
    batch), times W (the reference's per-rank mean, all-reduced to their mean, when every rank has as many rows)."""
    def summed(q):
        z = local(t["predictions"], q, w)
        target = F.layer_norm(local(t["targets"], q, w).detach(), (z.shape[1],))
        if h["mse"]:
            return F.mse_loss(z, target, reduction="sum")
        return F.smooth_l1_loss(z, target, reduction="sum", beta=h["beta"])

    rows = sum(local(t["predictions"], q, w).shape[0] for q in range(w))  # the all-reduced count
    return w * summed(r) / (rows * t["predictions"].shape[1]), {}, {}
def msn_sinkhorn(q, iters):
    """MSN's distributed_sinkhorn (msn/src/losses.py) on the GLOBAL batch's rows (what its all-reduced sums compute)."""
    with torch.no_grad():
        Q = q.t()
        B = Q.shape[1]
        K_ = Q.shape[0]
        Q = Q / torch.sum(Q)
        for _ in range(iters):
            Q = Q / torch.sum(Q, dim=1, keepdim=True)
            Q = Q / K_
            Q = Q / torch.sum(Q, dim=0, keepdim=True)
            Q = Q / B
        return (Q * B).t()


def msn(t, h, r, w):
    """MSN's init_msn_loss (msn/src/losses.py, lightly MSNLoss): probs = softmax(normalize(a) normalize(P)^T / tau);
    targets sharpened (p ** (1/T), renormalised) and Sinkhorn-balanced over the GLOBAL batch, no gradient;
    cross-entropy over rank r's anchor rows; ME-MAX of the anchors' mean probability over the GLOBAL batch."""
    protos = F.normalize(t["prototypes"], dim=1)
    anchors = numbered(t, "anchor")
    with torch.no_grad():
        p = F.softmax(F.normalize(t["target"], dim=1) @ protos.T / h["temperature"], dim=1)
        q = p ** (1.0 / h["sharpenTemperature"])
        q = q / q.sum(dim=1, keepdim=True)
        if int(h["sinkhornIterations"]) > 0:
            q = msn_sinkhorn(q, int(h["sinkhornIterations"]))
    probs = [F.softmax(F.normalize(a, dim=1) @ protos.T / h["temperature"], dim=1) for a in anchors]
    ce = sum(torch.mean(torch.sum(torch.log(local(pa, r, w) ** (-local(q, r, w))), dim=1)) for pa in probs) / len(probs)
    # AllReduce of every rank's mean (equal batches): the mean over all anchor rows of the global batch
    avg = sum(sum(local(pa, q_, w).sum(0) for pa in probs) for q_ in range(w)) / (len(probs) * anchors[0].shape[0])
    me_max = -torch.sum(torch.log(avg ** (-avg))) + math.log(float(len(avg)))
    return ce + h["meMaxWeight"] * me_max, {}, {}


def vicregl_nn(inp, cand, k):
    """VICRegL's neirest_neighbores_on_l2: each location's nearest candidate (cdist), the k closest kept in location order."""
    b, l, _ = inp.shape
    k = min(k, l)
    with torch.no_grad():
        dist, nn = torch.cdist(inp, cand).min(dim=2)  # [B, L]
        order = torch.sort(dist, dim=1, stable=True).indices[:, :k]
        kept = torch.sort(order, dim=1).values  # [B, k] location order
        nn_kept = torch.gather(nn, 1, kept)
    pick = lambda t, idx: torch.gather(t, 1, idx.unsqueeze(-1).expand(-1, -1, t.shape[2]))
    return pick(inp, kept), pick(cand, nn_kept)


def vicregl_nn_on_location(inp_at, cand_at, inp, cand, k):
    """VICRegL's neirest_neighbores_on_location: the same selection by the squared distance of the positions
    [B, L, 2] (exact in float64: ties go to the lower candidate, then the lower input location)."""
    b, l, _ = inp.shape
    k = min(k, l)
    with torch.no_grad():
        d2 = ((inp_at[:, :, None, :] - cand_at[:, None, :, :]) ** 2).sum(-1)  # [B, L, L']
        nn = torch.argmin(d2, dim=2)  # the first minimum
        dist = torch.gather(d2, 2, nn.unsqueeze(-1)).squeeze(-1)
        order = torch.sort(dist, dim=1, stable=True).indices[:, :k]
        kept = torch.sort(order, dim=1).values
        nn_kept = torch.gather(nn, 1, kept)
    pick = lambda t, idx: torch.gather(t, 1, idx.unsqueeze(-1).expand(-1, -1, t.shape[2]))
    return pick(inp, kept), pick(cand, nn_kept)


def vicregl_matched(x, y, h, r, w):
    """VICRegL's _vicreg_loss on matched [N, M, C] pairs: MSE over rank r's rows; gather_center over the GLOBAL batch."""
    inv = F.mse_loss(local(x, r, w), local(y, r, w))
    def stats(z):
        z = z - z.mean(dim=0)
        std = torch.sqrt(z.var(dim=0) + 0.0001)
        zt = z.permute(1, 0, 2)
        n, c = zt.shape[1], zt.shape[2]
        cov = torch.einsum("...nc,...nd->...cd", zt, zt) / (n - 1)
        off = ~torch.eye(c, dtype=torch.bool)
        return torch.mean(F.relu(1.0 - std)), (cov[..., off].pow(2).sum(-1) / c).mean()
    vx, cx = stats(x)
    vy, cy = stats(y)
    return h["invWeight"] * inv + h["varWeight"] * (vx / 2 + vy / 2) + h["covWeight"] * (cx / 2 + cy / 2)


def vicregl(t, h, r, w):
    """VICRegL global_loss + local_loss (feature matching, and location matching when the case has locations;
    every pair counted): views 0, 1 global."""
    emb = numbered(t, "embedding")
    maps = numbered(t, "map")
    at = numbered(t, "location")
    pairs = [(i, j) for i in range(2) for j in range(len(emb)) if j != i]
    inv = sum(F.mse_loss(local(emb[i], r, w), local(emb[j], r, w)) for i, j in pairs) / len(pairs)
    var, cov = 0, 0
    for e in emb:
        x = e - e.mean(dim=0)
        std = torch.sqrt(x.var(dim=0) + 0.0001)
        var = var + torch.mean(F.relu(1.0 - std))
        c = x.T @ x / (x.shape[0] - 1)
        cov = cov + off_diagonal(c).pow(2).sum() / e.shape[1]
    glob = h["invWeight"] * inv + h["varWeight"] * var / len(emb) + h["covWeight"] * cov / len(emb)
    loc = 0
    k_there, k_back = int(h["matchesThere"]), int(h["matchesBack"])
    every = int(h["l2AllMatches"]) == 1
    for i, j in pairs:
        x1, y1 = vicregl_nn(maps[i], maps[j], maps[i].shape[1] if every else k_there)
        x2, y2 = vicregl_nn(maps[j], maps[i], maps[j].shape[1] if every else k_back)
        loc = loc + (vicregl_matched(x1, y1, h, r, w) + vicregl_matched(x2, y2, h, r, w)) / 2
        if at:
            x1, y1 = vicregl_nn_on_location(at[i], at[j], maps[i], maps[j], k_there)
            x2, y2 = vicregl_nn_on_location(at[j], at[i], maps[j], maps[i], k_back)
            loc = loc + (vicregl_matched(x1, y1, h, r, w) + vicregl_matched(x2, y2, h, r, w)) / 2
    loc = loc / len(pairs)
    return h["alpha"] * glob + (1 - h["alpha"]) * loc, {}, {}


def off_diagonal(x):
    n, m = x.shape
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def all4one(t, h, r, w):
    p1 = F.normalize(gather(t["momentumZ1"], w).detach(), dim=0)
    p2 = F.normalize(gather(t["momentumZ2"], w).detach(), dim=0)
    z1 = F.normalize(gather(t["z1"], w), dim=0)
    z2 = F.normalize(gather(t["z2"], w), dim=0)
    c1 = p1.T @ z2
    c2 = p2.T @ z1
    on = ((torch.diagonal(c1).add(-1).pow(2).mean() + torch.diagonal(c2).add(-1).pow(2).mean()) * 0.5).sqrt()
    off = ((off_diagonal(c1).pow(2).mean() + off_diagonal(c2).pow(2).mean()) * 0.5).sqrt()
    return (0.5 * on + 0.5 * off) * 10, {}, {}


def all4one_centroid(t, h, r, w):
    def nnclr_loss_func(nn, p):
        nn = F.normalize(local(nn, r, w), dim=-1)
        p = gather(F.normalize(p, dim=-1), w)
        b = nn.shape[0]
        return F.cross_entropy(nn @ p.T / h["temperature"], torch.arange(b * r, b * (r + 1)))

    return nnclr_loss_func(t["rich1"], t["strange2"]) / 2 + nnclr_loss_func(t["rich2"], t["strange1"]) / 2, {}, {}


def deepclusterv2(t, h, r, w):
    """solo-learn's deepclusterv2_loss_func: mean over heads of cross_entropy(scores / T, targets, ignore_index=-1)
    over the GLOBAL batch; rank r: W * (its rows' sum) / (the global count of rows with a cluster)."""
    loss = 0
    heads = numbered(t, "scores")
    for hd, scores in enumerate(heads):
        v, _, k = scores.shape
        mine = local(scores, r, w, 1).reshape(-1, k) / h["temperature"]
        targets = local(t["targets"], r, w, 1)[hd].repeat(v)
        count = int((t["targets"][hd] >= 0).sum()) * v
        loss += w * F.cross_entropy(mine, targets, ignore_index=-1, reduction="sum") / max(count, 1)
    return loss / len(heads), {}, {}


def fastsiam(t, h, r, w):
    """lightly's FastSiamModel.training_step: view i's prediction against the mean of the other views' detached projections."""
    ps, zs = numbered(t, "prediction"), numbered(t, "projection")
    loss = 0
    for i, p in enumerate(ps):
        target = torch.stack([local(z, r, w) for j, z in enumerate(zs) if j != i]).mean(dim=0).detach()
        loss = loss + -F.cosine_similarity(local(p, r, w), target, dim=-1).mean() / len(ps)
    return loss, {}, {}


def tico(t, h, r, w):
    """lightly's TiCoLoss with gather_distributed: C from the GLOBAL batch, the terms averaged over rank r's rows."""
    za, zb = F.normalize(t["za"], dim=1), F.normalize(t["zb"], dim=1)
    za_all = gather(za, w)
    B = torch.mm(za_all.T, za_all) / za_all.shape[0]
    C = h["beta"] * t["covariance"].detach() + (1 - h["beta"]) * B
    a, b = local(za, r, w), local(zb, r, w)
    loss = 1 - (a * b).sum(dim=1).mean() + h["rho"] * (torch.mm(a, C) * a).sum(dim=1).mean()
    return loss, {}, {"covariance": C.detach()}


def mmcr(t, h, r, w):
    """The official MMCR_Loss with its centroids over the GLOBAL batch (differentiable gather); the local term over rank r's rows."""
    z = torch.stack([F.normalize(v, dim=1) for v in numbered(t, "view")], dim=2)  # [N, D, V]
    loss = -torch.linalg.svdvals(gather(z.mean(dim=2), w)).sum()
    if h["lambda"] != 0:
        mine = local(z, r, w)
        loss = loss + h["lambda"] * torch.linalg.svdvals(mine).sum() / mine.shape[0]
    return loss, {}, {}


def ibot(t, h, r, w):
    """bytedance/ibot iBOTLoss (main_ibot.py) with lists of crops: the DINO [CLS] loss over the pairs v != q, the
    masked-patch loss for v == q; update_center of both centres over the global batch."""
    students, teachers = numbered(t, "student"), numbered(t, "teacher")
    student_patches, teacher_patches = numbered(t, "studentPatch"), numbered(t, "teacherPatch")
    masks = numbered(t, "mask")
    centre, centre2 = t["centre"].detach().unsqueeze(0), t["patchCentre"].detach().view(1, 1, -1)
    s_cls = [local(s, r, w) / h["studentTemperature"] for s in students]
    s_patch = [local(s, r, w) / h["studentTemperature"] for s in student_patches]
    t_cls = [F.softmax((local(x, r, w) - centre) / h["teacherTemperature"], dim=-1).detach() for x in teachers]
    t_patch = [F.softmax((local(x, r, w) - centre2) / h["teacherPatchTemperature"], dim=-1).detach() for x in teacher_patches]
    loss1, n1, loss2, n2 = 0, 0, 0, 0
    for q in range(len(t_cls)):
        for v in range(len(s_cls)):
            if v == q:
                per_patch = torch.sum(-t_patch[q] * F.log_softmax(s_patch[v], dim=-1), dim=-1)
                mask = local(masks[v], r, w).double()
                loss2 += (torch.sum(per_patch * mask, dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()
                n2 += 1
            else:
                loss1 += torch.sum(-t_cls[q] * F.log_softmax(s_cls[v], dim=-1), dim=-1).mean()
                n1 += 1
    loss = loss1 / n1 + h["patchLossWeight"] * (loss2 / n2)
    with torch.no_grad():
        b = local(teachers[0], r, w).shape[0]
        cls_sum = sum(torch.sum(torch.cat([local(x, q, w) for x in teachers]), dim=0, keepdim=True) for q in range(w))
        new_centre = centre * h["centreMomentum"] + cls_sum / (len(teachers) * b * w) * (1 - h["centreMomentum"])
        patch_sum = sum(torch.sum(torch.cat([local(x, q, w).mean(1) for x in teacher_patches]), dim=0, keepdim=True) for q in range(w))
        m2 = h["patchCentreMomentum"]
        new_centre2 = centre2 * m2 + patch_sum / (len(teachers) * b * w) * (1 - m2)
    return loss, {}, {"centre": new_centre.squeeze(0), "patchCentre": new_centre2.reshape(-1)}


def koleo(t, h, r, w):
    """DINOv2's KoLeoLoss with the nearest neighbour over the GLOBAL batch (differentiable gather of the normalised rows)."""
    eps = h["eps"]
    z = F.normalize(t["x"], eps=eps, p=2, dim=-1)
    every, mine = gather(z, w), local(z, r, w)
    b = mine.shape[0]
    dots = (mine @ every.T).detach().clone()
    dots[torch.arange(b), r * b + torch.arange(b)] = -1  # pairwise_NNs_inner's diagonal fill, for rank r's rows
    _, nearest = torch.max(dots, dim=1)
    distances = F.pairwise_distance(mine, every[nearest], p=2, eps=eps)
    return -torch.log(distances + eps).mean(), {}, {}


def dinov2_sinkhorn(teacher_output, teacher_temp, n_iterations):
    """DINOv2's sinkhorn_knopp_teacher on the GLOBAL batch's rows (what its all-reduced sums and count compute)."""
    with torch.no_grad():
        Q = torch.exp(teacher_output / teacher_temp).t()
        B = Q.shape[1]
        K_ = Q.shape[0]
        Q /= torch.sum(Q)
        for _ in range(n_iterations):
            Q /= torch.sum(Q, dim=1, keepdim=True)
            Q /= K_
            Q /= torch.sum(Q, dim=0, keepdim=True)
            Q /= B
        Q *= B
        return Q.t()


def dinov2_koleo(x, eps, r, w):
    """KoLeo of x's rows with the nearest neighbours over the GLOBAL batch (as koleo)."""
    z = F.normalize(x, eps=eps, p=2, dim=-1)
    every, mine = gather(z, w), local(z, r, w)
    b = mine.shape[0]
    dots = (mine @ every.T).detach().clone()
    dots[torch.arange(b), r * b + torch.arange(b)] = -1
    _, nearest = torch.max(dots, dim=1)
    return -torch.log(F.pairwise_distance(mine, every[nearest], p=2, eps=eps) + eps).mean()


def dinov2(t, h, r, w):
    """DINOv2's SSLMetaArch.forward_backward with centering sinkhorn_knopp (2 global crops, the others local): DINOLoss of
    the [CLS] outputs against Sinkhorn-Knopp of both global crops' teacher rows over the GLOBAL batch, the reference's
    loss scales; iBOTPatchLoss.forward_masked with masks_weight against Sinkhorn-Knopp of the masked teacher patches of
    the GLOBAL batch; koleo_loss_weight * the sum over the global crops of KoLeo (nearest neighbours over the GLOBAL
    batch; the reference: per GPU)."""
    students, teachers = numbered(t, "student"), numbered(t, "teacher")
    student_patches, teacher_patches = numbered(t, "studentPatch"), numbered(t, "teacherPatch")
    masks, features = [m.bool() for m in numbered(t, "mask")], numbered(t, "feature")
    temp, iters = h["teacherTemperature"], int(h["sinkhornIterations"])
    n, n_global, n_local = teachers[0].shape[0], len(teachers), len(students) - len(teachers)
    # Teacher [CLS]: Sinkhorn-Knopp of both crops at once over the global batch, then rank r's rows of each crop.
    q = dinov2_sinkhorn(torch.cat(teachers), temp, iters).view(n_global, n, -1)
    q_local = [local(q[g], r, w) for g in range(n_global)]
    # Teacher patches: Sinkhorn-Knopp of every masked patch of both crops over the global batch, scattered back.
    every_mask = torch.stack(masks)  # [G, N, L]
    masked_teacher = torch.stack(teacher_patches)[every_mask]  # [M, K]
    assigned = torch.zeros_like(torch.stack(teacher_patches))
    assigned[every_mask] = dinov2_sinkhorn(masked_teacher, temp, iters)
    # Rank r: the reference's forward_backward on its slices.
    def dino_loss(student_list, teacher_list):
        total = 0
        for s in student_list:
            lsm = F.log_softmax(s / h["studentTemperature"], dim=-1)
            for q_ in teacher_list:
                total -= torch.sum(q_ * lsm, dim=-1).mean()
        return total
    n_local_terms = max(n_local * n_global, 1)
    n_global_terms = (n_global - 1) * n_global
    s_local = [local(s, r, w) for s in students]
    loss = 0
    if n_local > 0:
        loss += dino_loss(s_local[n_global:], q_local) / (n_global_terms + n_local_terms)
    swapped = torch.cat([q_local[1], q_local[0]])
    loss += dino_loss([torch.cat(s_local[:n_global])], [swapped]) * 2 / (n_global_terms + n_local_terms)
    loss += h["koleoWeight"] * sum(dinov2_koleo(f, 1e-8, r, w) for f in features)
    collated = torch.cat([local(m, r, w) for m in masks])  # [2B, L]
    masks_weight = (1 / collated.sum(-1).clamp(min=1.0)).unsqueeze(-1).expand_as(collated)[collated]
    s_masked = torch.cat([local(sp, r, w) for sp in student_patches])[collated]
    t_masked = torch.cat([local(a, r, w) for a in assigned])[collated]
    patch = -(torch.sum(t_masked * F.log_softmax(s_masked / h["studentTemperature"], dim=-1), dim=-1) * masks_weight).sum() / collated.shape[0]
    loss += h["patchLossWeight"] * patch * 2 * (1.0 / n_global)
    return loss, {}, {}


LOSSES = {
    "simclr": simclr, "barlow": barlow, "byol": byol, "vicreg": vicreg, "moco": moco, "mocov3": mocov3,
    "simsiam": simsiam, "nnclr": nnclr, "supcon": supcon, "ressl": ressl, "dcl": dcl, "swav": swav, "dino": dino,
    "mae": mae, "wmse": wmse, "vibcreg": vibcreg, "all4one": all4one, "all4one-centroid": all4one_centroid,
    "deepclusterv2": deepclusterv2,
    "fastsiam": fastsiam,
    "tico": tico,
    "mmcr": mmcr,
    "simdino": simdino,
    "lejepa": lejepa,
    "ijepa": ijepa,
    "msn": msn,
    "vicregl": vicregl,
    "ibot": ibot,
    "koleo": koleo,
    "dinov2": dinov2,
}

CONVENTIONS = {
    "simclr": "NT-Xent: rows [z1; z2] L2-normalised, positive of row i is row i+N (and back), self-similarity masked, "
    "cross-entropy of similarities / temperature; rank r: mean over its 2B anchors against all 2N candidates",
    "barlow": "z standardised per column over the GLOBAL batch, (z - mean) / sqrt(var_biased + eps); c = z1n^T z2n / N; "
    "scale * (sum (1 - c_ii)^2 + lambd * sum_{i!=j} c_ij^2); every rank returns the global loss",
    "byol": "mean over rank r's rows of (2 - 2 cos(p1, z2)) + (2 - 2 cos(p2, z1)); z1, z2 detached",
    "vicreg": "simWeight * MSE(z1, z2) over rank r's rows + varWeight * (mean relu(gamma - std1) + mean relu(gamma - "
    "std2)) / 2 + covWeight * (sum_{i!=j} C1_ij^2 + sum_{i!=j} C2_ij^2) / D over the GLOBAL batch, "
    "std = sqrt(var_unbiased + eps), C = zc^T zc / (N - 1)",
    "moco": "solo-learn mocov2plus_loss_func: query, key L2-normalised, key detached, state queue [K, D] constant; "
    "logits [q.k, q.queue^T] / temperature, cross-entropy with target 0, mean over rank r's rows",
    "mocov3": "solo-learn mocov3_loss_func: query, key L2-normalised; keys of all ranks gathered WITHOUT gradient; "
    "logits q.K^T / temperature, target of global row g is column g; mean cross-entropy * 2 * temperature",
    "simsiam": "solo-learn simsiam_loss_func: -mean_i cos(p_i, z_i.detach())",
    "nnclr": "solo-learn nnclr_loss_func: neighbours (the support-set nearest neighbours) and predictions L2-normalised, "
    "neighbours detached; predictions gathered WITH gradient; logits nn.P^T / temperature, target of global row g "
    "is column g, mean cross-entropy",
    "supcon": "solo-learn simclr_loss_func with indexes = labels repeated per view: anchors = all views' rows of rank r "
    "(normalised), candidates = every rank's rows (differentiable gather), pos = sum over same-label candidates but "
    "the anchor of exp(s / temperature), neg = sum over other-label candidates; -mean log(pos / (pos + neg))",
    "ressl": "solo-learn ressl_loss_func: q, k L2-normalised, state queue constant; -mean_i sum_j "
    "softmax(k.queue^T / temperatureK, detached)_ij * log_softmax(q.queue^T / temperatureQ)_ij",
    "dcl": "lightly DCLLoss, symmetric 0.5 * (l(z1, z2) + l(z2, z1)), candidates of every rank gathered WITH gradient; "
    "l_i = -w_i s(a_i, b_i) / temperature + logsumexp over j != i of [s(a_i, a_j), s(a_i, b_j)] / temperature; "
    "w = 1, or with hyper sigma (DCLW) w_i = 2 - N softmax_i(s(z1_i, z2_i).detach() / sigma) over the GLOBAL batch",
    "swav": "assignments_g = Sinkhorn-Knopp of pred_g (g < 2, the global crops) over the GLOBAL batch (solo-learn's "
    "SinkhornKnopp with its sums all-reduced; with state queue_g, the rows of cat(pred_g, queue_g) with the queue "
    "counted once, only the batch rows kept), no gradient; solo-learn swav_loss_func: mean over pairs (g, v != g) of "
    "-mean_i sum_k a_g log_softmax(pred_v / temperature)",
    "dino": "original DINOLoss with crops as lists: t_g = softmax((teacher_g - centre) / teacherTemperature) detached, "
    "s_v = log_softmax(student_v / studentTemperature); mean over pairs (g, v != g) of mean_i -sum t_g s_v; "
    "state_after centre = centreMomentum * centre + (1 - centreMomentum) * (mean of every teacher row of the GLOBAL batch)",
    "mae": "solo-learn mae_loss_func with patchify for NHWC images (patch pixels in (row, column, channel) order), images "
    "detached; normPixLoss: (t - mean) / sqrt(var_unbiased + 1e-6) per patch; sum over masked patches of the per-patch "
    "mean squared error / the number of masked patches of the GLOBAL batch (rank r: W * its share)",
    "wmse": "solo-learn W-MSE step over the GLOBAL batch: for each row of permutations, each view's rows "
    "perm[s*w:(s+1)*w] (w = whiteningSize) whitened by Whitening2d (triangular_solve(eye, cholesky((1 - eps) C + eps I)), "
    "C the unbiased covariance of the sub-batch); mean over view pairs i < j and permutations of 2 - 2 mean cos; "
    "rank r: the mean over its rows",
    "vibcreg": "solo-learn vibcreg_loss_func: simWeight * mse(z1, z2) (rank r's rows) + varWeight * (mean relu(1 - "
    "sqrt(var + 1e-4)) of each view, summed) + covWeight * ((offdiag R1)^2.mean() + (offdiag R2)^2.mean()), "
    "R = normalize(z - mean, dim=0)^T normalize(z - mean, dim=0) over the GLOBAL batch",
    "all4one": "solo-learn All4One feature_loss: columns F.normalize(dim=0) over the GLOBAL batch, C1 = m1^T z2, "
    "C2 = m2^T z1, on = sqrt(0.5 (mean (diag C1 - 1)^2 + mean (diag C2 - 1)^2)), off = sqrt(0.5 (mean offdiag C1^2 + "
    "mean offdiag C2^2)), 10 (0.5 on + 0.5 off); momentum projections detached; every rank returns the global loss",
    "all4one-centroid": "solo-learn All4One att_nnclr_loss = nnclr_loss_func(rich1, strange2) / 2 + "
    "nnclr_loss_func(rich2, strange1) / 2: rich_v local and NOT detached, strange_v normalised and gathered "
    "(differentiable), logits [B, N] = rich . strange^T / temperature, target of local row i = global column r*B + i",
    "deepclusterv2": "solo-learn deepclusterv2_loss_func: scores_h [V, N, K] (views, batch, prototypes), targets [H, N] "
    "(-1: no cluster); mean over heads of cross_entropy(scores_h / temperature over its V*N rows, targets_h repeated "
    "per view, ignore_index=-1) over the GLOBAL batch; rank r: W * (its rows' sum) / (the global count)",
    "fastsiam": "lightly FastSiamModel: (1/V) sum_i -mean_b cos(prediction_i, mean_{j != i} projection_j.detach()), "
    "the mean over rank r's rows",
    "tico": "lightly TiCoLoss: za, zb L2-normalised; C = beta * covariance + (1 - beta) * za^T za / N over the GLOBAL batch "
    "(differentiable gather); 1 - mean_i <za_i, zb_i> + rho * mean_i za_i C za_i^T over rank r's rows; state_after "
    "covariance = C detached",
    "mmcr": "official MMCR_Loss: views L2-normalised, Z_i [D, V] sample i's views, centroids C [N, D] their means over the "
    "GLOBAL batch; -sum svdvals(C) + lambda * mean over rank r's rows of sum svdvals(Z_i)",
    "simdino": "SimDINO MCRLoss (expa_type=0, reduce_cov=1): rows F.normalize-d, teacher detached; alignment = mean over "
    "pairs (g, v != g) of mean_i cos(teacher_g, student_v) (rank r's rows); coding rate = mean over the global crops g of "
    "sum log diag cholesky(I + K / (N eps) * sum_ranks Z_g^T Z_g) * (K + N) / (K N) over the GLOBAL batch; "
    "loss = -alignWeight * alignment - coding rate",
    "lejepa": "LeJEPA (MINIMAL.md; the lejepa package's SlicingUnivariateTest + EppsPulley): c = mean of the first "
    "globalViews views (per sample); prediction = mean over views of mean (c - view)^2 (rank r's rows); for each view and "
    "column a_s of projections (constant, no gradient) the Epps-Pulley statistic N * sum_j w_j ((mean cos(t_j x) - phi_j)^2 "
    "+ (mean sin(t_j x))^2) of x = view @ a_s over the GLOBAL batch (cos / sin sums all-reduced WITH gradient), "
    "t on [0, tMax] (knots points), phi = exp(-t^2 / 2), w = trapezoid weights doubled times phi; sigreg = mean over views "
    "and projections; loss = (1 - sigregWeight) * prediction + sigregWeight * sigreg",
    "ijepa": "I-JEPA (src/train.py): targets F.layer_norm-ed over their D features (no affine, eps 1e-5) and detached; "
    "smooth_l1 (beta; hyper mse = 0) or squared error (mse = 1) summed over rank r's rows, divided by D times the number of "
    "target rows of the GLOBAL batch, times W",
    "msn": "MSN init_msn_loss / lightly MSNLoss: anchors, target, prototypes F.normalize-d; anchor probs softmax(a P^T / "
    "temperature); targets softmax(t P^T / temperature) ** (1 / sharpenTemperature) renormalised, then (sinkhornIterations > 0) "
    "MSN's distributed_sinkhorn over the GLOBAL batch, no gradient (prototypes included); cross-entropy mean over the anchor "
    "views of mean_i -sum q log p (rank r's rows); ME-MAX sum pbar log pbar + log K, pbar the mean anchor probability over "
    "every anchor view and the GLOBAL batch; loss = cross-entropy + meMaxWeight * ME-MAX",
    "vicregl": "VICRegL global_loss + local_loss (main_vicregl.py): views 0, 1 global, "
    "pairs (i < 2, j != i); global = invWeight * mean_pairs mse(e_i, e_j) (rank r's rows) + varWeight * mean_v mean "
    "relu(1 - sqrt(var + 1e-4)) + covWeight * mean_v sum offdiag(C_v)^2 / D over the GLOBAL batch; local = mean_pairs of "
    "(T(nn(m_i -> m_j, matchesThere)) + T(nn(m_j -> m_i, matchesBack))) / 2, nn: each location's nearest (cdist) location "
    "of the same sample, the k closest kept in location order (every location when l2AllMatches = 1), plus, with inputs "
    "location#, the same with the nearest by squared position distance (argmin: the first on ties; stable sort), always "
    "matchesThere / matchesBack kept; T = _vicreg_loss: invWeight * mse (rank r's rows) + "
    "varWeight * (hinge_x + hinge_y) / 2 + covWeight * (cov_x + cov_y) / 2, per-location statistics over the GLOBAL "
    "batch (gather_center); loss = alpha * global + (1 - alpha) * local",
    "ibot": "bytedance/ibot iBOTLoss: t_q = softmax((teacher_q - centre) / teacherTemperature), tp_q = softmax((teacherPatch_q "
    "- patchCentre) / teacherPatchTemperature), detached; cls = mean over pairs (q, v != q) of mean_i -sum t_q "
    "log_softmax(student_v / studentTemperature); patch = mean over q of mean_i sum_l mask_qil (-sum_k tp_q log_softmax("
    "studentPatch_q / studentTemperature)) / max(sum_l mask_qil, 1); loss = cls + patchLossWeight * patch; state_after "
    "centre (as dino) and patchCentre = m2 * patchCentre + (1 - m2) * (mean over every teacher image of the GLOBAL batch "
    "of its patch mean)",
    "koleo": "DINOv2 KoLeoLoss: z = F.normalize(x, eps); each of rank r's rows' nearest neighbour (largest cosine, own row "
    "set to -1, first maximum) among the rows of the GLOBAL batch (differentiable gather); -mean over rank r's rows of "
    "log(PairwiseDistance(eps)(z_i, z_nn) + eps) (DINOv2 computes it per GPU)",
    "dinov2": "DINOv2 SSLMetaArch (centering sinkhorn_knopp), student0.. the crops (2 global first), teacher0, teacher1 the "
    "global crops' teacher [CLS] outputs: q = sinkhorn_knopp_teacher(cat(teacher0, teacher1), teacherTemperature, "
    "sinkhornIterations) over the GLOBAL batch; cls = (sum over local crops v and q_g of -mean_i sum q_g log_softmax(student_v / "
    "studentTemperature) + 2 * DINOLoss(cat(student0, student1), cat(q_1, q_0))) / (2 + max(2 * locals, 1)) (rank r's rows); "
    "patch = -sum over rank r's masked patches of both crops of masks_weight * sum_k p log_softmax(studentPatch / "
    "studentTemperature) / (2B), masks_weight = 1 / (masked patches of the image), p = sinkhorn_knopp_teacher of the masked "
    "teacherPatch rows of both crops over the GLOBAL batch (unequal counts per rank); koleo = sum over the global crops of "
    "KoLeo(feature_g, eps 1e-8) with nearest neighbours over the GLOBAL batch (DINOv2: per GPU); "
    "loss = cls + patchLossWeight * patch + koleoWeight * koleo",
}


def terms_of(loss, t, h):
    """Named parts of a loss (what ssl-zoo logs), for the loss tests; verify does not check them."""
    if loss == "barlow":
        on, off = barlow_parts(t["z1"], t["z2"], h)
        return {"on_diag": float(on), "off_diag": float(off)}
    if loss == "vicreg":
        variance, covariance = vicreg_parts(t["z1"], t["z2"], h)
        return {"invariance": float(F.mse_loss(t["z1"], t["z2"])), "variance": float(variance), "covariance": float(covariance)}
    return None


# ----------------------------------------------------------------------------- evaluation


def tensors(case):
    out = {}
    for k, spec in {**case["inputs"], **case.get("state", {})}.items():
        x = torch.tensor(spec["data"], dtype=torch.long if spec["dtype"] == "int32" else torch.float64).reshape(spec["shape"])
        out[k] = x if spec["dtype"] == "int32" else x.requires_grad_(True)
    return out


def grads_of(loss, xs):
    gs = torch.autograd.grad(loss, xs, allow_unused=True, retain_graph=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(xs, gs)]


def compute(case):
    """The `expected` block of a case from its inputs, state and hyper-parameters."""
    fn, h = LOSSES[case["loss"]], case["hyper"]
    t = tensors(case)
    float_inputs = [k for k, s in case["inputs"].items() if s["dtype"] == "float32"]
    float_state = [k for k, s in case.get("state", {}).items() if s["dtype"] == "float32"]
    xs = [t[k] for k in float_inputs + float_state]
    loss, outputs, state_after = fn(t, h, 0, 1)
    g_one = grads_of(loss, xs)
    for k, g in zip(float_state, g_one[len(float_inputs):]):
        assert not g.any(), (case["name"], k, "state must get no gradient")
    per_rank = {}
    for w in (w for w in WORLD_SIZES if case["N"] % w == 0):
        ranks = [fn(t, h, r, w) for r in range(w)]
        check_rank_split(case, w, loss, g_one, ranks, xs, outputs, state_after)
        per_rank[str(w)] = [float(x[0]) for x in ranks]
    expected = {
        "loss": float(loss),
        "grad": {k: g.reshape(-1).tolist() for k, g in zip(float_inputs, g_one)},
        "per_rank": per_rank,
    }
    if outputs:
        expected["outputs"] = {k: {"shape": list(v.shape), "batch_axis": a, "data": v.reshape(-1).tolist()} for k, (v, a) in outputs.items()}
    if state_after:
        expected["state_after"] = {k: {"shape": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in state_after.items()}
    terms = terms_of(case["loss"], t, h)
    if terms:
        expected["terms"] = terms
    return expected


def check_rank_split(case, w, loss, g_one, ranks, xs, outputs, state_after):
    """mean_r loss_r = loss, sum_r d loss_r / dx = W * d loss / dx, every rank's outputs and state after the global ones."""
    name = f"{case['name']} W={w}"
    mean = sum(float(x[0]) for x in ranks) / w
    assert abs(mean - float(loss)) <= 1e-12 * max(1.0, abs(float(loss))), (name, mean, float(loss))
    g_sum = grads_of(torch.stack([x[0] for x in ranks]).sum(), xs)
    for x, a, c in zip(xs, g_sum, g_one):
        assert torch.allclose(a, w * c, rtol=1e-10, atol=1e-13), (name, float((a - w * c).abs().max()))
    for r, (_, outs, after) in enumerate(ranks):
        for k, (value, axis) in outs.items():
            ref = outputs[k][0]
            mine, expected = (value, ref) if axis is None else (local(value, r, w, axis), local(ref, r, w, axis))
            assert torch.allclose(mine, expected, rtol=1e-12, atol=0), (name, k, r)
        for k, value in after.items():
            assert torch.allclose(value, state_after[k], rtol=1e-12, atol=0), (name, k, r)


# ----------------------------------------------------------------------------- inputs


def entry(x, batch_axis=0, dtype="float32"):
    """An input (batch_axis: the axis split over ranks, None: the same on every rank). float32 values are
    rounded to float32 first, so that the reference is the float64 loss of exactly what ssl-zoo reads."""
    if dtype == "float32":
        x = x.float().double()
    return {"shape": list(x.shape), "dtype": dtype, "batch_axis": batch_axis, "data": x.reshape(-1).tolist()}


def state_entry(x, dtype="float32"):
    e = entry(x, None, dtype)
    del e["batch_axis"]
    return e


def randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def two_views(g, n=N, d=D, noise=0.5):
    """Two correlated views of n samples with per-column scales around 1 and a non-zero mean."""
    col_scale = 0.4 + 1.2 * torch.rand(d, generator=g, dtype=torch.float64)
    base = randn(g, n, d)
    v1 = (base + noise * randn(g, n, d)) * col_scale
    v2 = (base + noise * randn(g, n, d)) * col_scale + 0.3
    return v1, v2


def queue_of(g, like, k=K):
    """k normalised past keys: noisy copies of some of `like`'s rows and random rows."""
    past = torch.cat([like[: k // 2] + 0.8 * randn(g, k // 2, like.shape[1]), randn(g, k - k // 2, like.shape[1])], 0)
    return F.normalize(past, dim=1)


def prototype_scores(g, n, k=K, d=8):
    """Cosine similarities of n embeddings with k unit prototypes (SwAV's scores)."""
    return F.normalize(randn(g, n, d), dim=1) @ F.normalize(randn(g, k, d), dim=1).T


def make_inputs(name, g):
    """(inputs, state) of a case."""
    if name in ("simclr", "barlow", "vicreg", "dcl", "dclw", "vibcreg"):
        z1, z2 = two_views(g)
        return {"z1": entry(z1), "z2": entry(z2)}, {}
    if name == "byol":
        z1, z2 = two_views(g)
        p1, p2 = z2 + 0.6 * randn(g, N, D), z1 + 0.6 * randn(g, N, D)
        return {"p1": entry(p1), "p2": entry(p2), "z1": entry(z1), "z2": entry(z2)}, {}
    if name in ("moco", "ressl"):
        q, k = two_views(g)
        a, b = ("query", "key") if name == "moco" else ("q", "k")
        return {a: entry(q), b: entry(k)}, {"queue": state_entry(queue_of(g, k))}
    if name == "mocov3":
        q, k = two_views(g)
        return {"query": entry(q), "key": entry(k)}, {}
    if name == "simsiam":
        z1, z2 = two_views(g)
        return {"p": entry(z2 + 0.6 * randn(g, N, D)), "z": entry(z1)}, {}
    if name == "nnclr":
        z1, z2 = two_views(g)
        support = torch.cat([z1[: N // 2] + 0.4 * randn(g, N // 2, D), randn(g, 3 * N // 2, D)], 0)
        neighbours = support[(F.normalize(z1, dim=1) @ F.normalize(support, dim=1).T).argmax(dim=1)]
        return {"neighbours": entry(neighbours), "predictions": entry(z2 + 0.6 * randn(g, N, D))}, {}
    if name == "supcon":
        classes = 4
        labels = (torch.arange(N) % classes)[torch.randperm(N, generator=g)]
        base = (0.8 * randn(g, classes, D))[labels] + randn(g, N, D)
        out = {f"view{v}": entry(base + 0.5 * randn(g, N, D)) for v in range(3)}
        out["labels"] = entry(labels, 0, "int32")
        return out, {}
    if name.startswith("swav"):
        out = {f"pred{v}": entry(prototype_scores(g, N)) for v in range(4)}  # 2 global, 2 local crops
        state = {f"queue{q}": state_entry(prototype_scores(g, 6)) for q in range(2)} if name == "swav-queue" else {}
        return out, state
    if name == "dino":
        base = randn(g, N, K)
        out = {f"student{v}": entry(base + 0.7 * randn(g, N, K)) for v in range(4)}
        out.update({f"teacher{v}": entry(base + 0.3 * randn(g, N, K) + 0.5) for v in range(2)})
        return out, {"centre": state_entry(0.3 * randn(g, K))}
    if name == "mae":
        images = torch.rand(N, 4, 4, 3, generator=g, dtype=torch.float64)
        target = patchify(images, 2)  # [N, 4, 12]
        predictions = (target - target.mean(-1, keepdim=True)) / target.std(-1, keepdim=True) + 0.3 * randn(g, N, 4, 12)
        mask = (torch.rand(N, 4, generator=g) < 0.6).to(torch.long)
        mask[0, 0] = 1  # rank 0 masks at least one patch; the counts differ between ranks
        return {"images": entry(images), "predictions": entry(predictions), "mask": entry(mask, 0, "int32")}, {}
    if name == "wmse":
        # Correlated columns; the sub-batch covariances' condition numbers are 19 to 139.
        n, d = 24, 6
        mix = randn(g, d, d) * 0.2 + torch.eye(d, dtype=torch.float64)
        base = randn(g, n, d)
        out = {f"view{v}": entry((base + 0.6 * randn(g, n, d)) @ mix + 0.2 * v) for v in range(3)}
        out["permutations"] = entry(torch.stack([torch.randperm(n, generator=g) for _ in range(2)]), None, "int32")
        return out, {}
    if name == "all4one":
        m1, m2 = two_views(g)
        return {"momentumZ1": entry(m1), "momentumZ2": entry(m2), "z1": entry(m1 + 0.4 * randn(g, N, D)), "z2": entry(m2 + 0.4 * randn(g, N, D))}, {}
    if name == "all4one-centroid":
        rich1, strange1 = two_views(g)
        rich2, strange2 = two_views(g)
        return {"rich1": entry(rich1), "rich2": entry(rich2), "strange1": entry(strange1), "strange2": entry(strange2)}, {}
    if name.startswith("deepclusterv2"):
        heads, views, k = 3, 2, 5
        scores = F.normalize(randn(g, heads, views, N, k), dim=-1)
        targets = torch.randint(0, k, (heads, N), generator=g)
        targets[:, torch.randperm(N, generator=g)[:3]] = -1
        if name == "deepclusterv2-lopsided":
            targets[1, : N // 2] = -1  # head 1: no cluster on the first half (rank 0 of 2)
        out = {f"scores{hd}": entry(scores[hd], 1) for hd in range(heads)}
        out["targets"] = entry(targets, 1, "int32")
        return out, {}
    if name == "fastsiam":
        base = randn(g, N, D)
        projections = [base + 0.5 * randn(g, N, D) + 0.2 * v for v in range(4)]
        out = {f"projection{v}": entry(z) for v, z in enumerate(projections)}
        out.update({f"prediction{v}": entry(base + 0.6 * randn(g, N, D)) for v in range(4)})
        return out, {}
    if name == "tico":
        za, zb = two_views(g)
        past = randn(g, 20, D) @ (torch.eye(D, dtype=torch.float64) + 0.3 * randn(g, D, D))
        past = F.normalize(past, dim=1)
        return {"za": entry(za), "zb": entry(zb)}, {"covariance": state_entry(past.T @ past / 20)}
    if name == "mmcr":
        base = randn(g, N, D) + 0.5
        return {f"view{v}": entry(base + 0.7 * randn(g, N, D)) for v in range(4)}, {}
    if name == "simdino":
        base = randn(g, N, D)
        out = {f"student{v}": entry(base + 0.7 * randn(g, N, D) + 0.2) for v in range(4)}  # 2 global, 2 local crops
        out.update({f"teacher{v}": entry(base + 0.3 * randn(g, N, D) + 0.2) for v in range(2)})
        return out, {}
    if name == "ibot":
        # 2 global crops (patch outputs of L = 5 patches each) and 1 local crop; K = 10 prototypes.
        n, L = N, 5
        base, pbase = randn(g, n, K), randn(g, n, L, K)
        out = {f"student{v}": entry(base + 0.7 * randn(g, n, K)) for v in range(3)}
        out.update({f"teacher{v}": entry(base + 0.3 * randn(g, n, K) + 0.5) for v in range(2)})
        out.update({f"studentPatch{v}": entry(pbase + 0.7 * randn(g, n, L, K)) for v in range(2)})
        out.update({f"teacherPatch{v}": entry(pbase + 0.3 * randn(g, n, L, K) - 0.3) for v in range(2)})
        masks = (torch.rand(2, n, L, generator=g) < 0.4).to(torch.long)
        masks[0, 0] = 0  # an unmasked image (its patch term is 0, still counted in the mean)
        out.update({f"mask{v}": entry(masks[v], 0, "int32") for v in range(2)})
        return out, {"centre": state_entry(0.3 * randn(g, K)), "patchCentre": state_entry(0.2 * randn(g, K))}
    if name == "dinov2":
        # 2 global crops (patch outputs of L = 5 patches each) and 1 local crop; K = 10 prototypes; [CLS] features D = 8.
        n, L = N, 5
        base, pbase = randn(g, n, K), randn(g, n, L, K)
        out = {f"student{v}": entry(base + 0.7 * randn(g, n, K)) for v in range(3)}
        out.update({f"teacher{v}": entry(2 * base + 0.3 * randn(g, n, K) + 0.5) for v in range(2)})
        out.update({f"studentPatch{v}": entry(pbase + 0.7 * randn(g, n, L, K)) for v in range(2)})
        out.update({f"teacherPatch{v}": entry(2 * pbase + 0.3 * randn(g, n, L, K) - 0.3) for v in range(2)})
        masks = (torch.rand(2, n, L, generator=g) < 0.4).to(torch.long)
        # No masked patch on the last 3 images (counted in the mean as 0): rank 3 of 4 holds none (its Sinkhorn has 0
        # rows); the other ranks' counts differ.
        masks[:, n - 3:] = 0
        out.update({f"mask{v}": entry(masks[v], 0, "int32") for v in range(2)})
        centres = randn(g, 4, D)
        out.update({f"feature{v}": entry(centres[torch.arange(n) % 4] + 0.4 * randn(g, n, D)) for v in range(2)})
        return out, {}
    if name == "koleo":
        # 4 clusters of 3 rows, the clusters spread over the ranks: nearest neighbours cross the ranks' slices.
        centres = randn(g, 4, D)
        return {"x": entry(centres[torch.arange(N) % 4] + 0.4 * randn(g, N, D))}, {}
    if name == "lejepa":
        # Embeddings near N(0, I) after a random mixing, 3 global views and 1 local one; 5 unit directions.
        n, k, s = 12, 6, 5
        base = randn(g, n, k)
        out = {f"view{v}": entry((base + 0.5 * randn(g, n, k)) * 0.9 + 0.1 * v) for v in range(4)}
        a = randn(g, k, s)
        out["projections"] = entry(a / a.norm(dim=0), None)
        return out, {}
    if name == "ijepa":
        # Target patch tokens off-centre and scaled (the LayerNorm matters); predictions near the normalised targets
        # with errors on both sides of beta = 1.
        targets = 1.5 * randn(g, N, D) + 0.7
        normalised = F.layer_norm(targets, (D,))
        return {"predictions": entry(normalised + 0.9 * randn(g, N, D)), "targets": entry(targets)}, {}
    if name == "msn":
        # 3 anchor views (1 global, 2 focal) and the target of 12 samples, 10 prototypes of D = 8.
        base = randn(g, N, D)
        out = {f"anchor{v}": entry(base + 0.6 * randn(g, N, D)) for v in range(3)}
        out["target"] = entry(base + 0.3 * randn(g, N, D))
        out["prototypes"] = entry(torch.cat([base[:4] + 0.5 * randn(g, 4, D), randn(g, K - 4, D)]), None)
        return out, {}
    if name.startswith("vicregl"):
        # 3 views (2 global, 1 local) of 12 samples: embeddings D = 8, maps of 3x3, 3x3 and 2x2 locations with C = 4.
        n, c = N, 4
        base = randn(g, n, D)
        out = {f"embedding{v}": entry(base + 0.6 * randn(g, n, D) + 0.1 * v) for v in range(3)}
        grid = randn(g, n, 9, c)
        out["map0"] = entry(grid + 0.5 * randn(g, n, 9, c))
        out["map1"] = entry(grid[:, torch.randperm(9, generator=g)] + 0.5 * randn(g, n, 9, c))
        out["map2"] = entry(grid[:, :4] + 0.7 * randn(g, n, 4, c))
        if name == "vicregl":
            # Each map's positions in a 32 x 32 source image: cell centres of a random crop box, mirrored when flipped
            # (src/methods/vicregl.ts mapLocations).
            for v, side in enumerate([3, 3, 2]):
                at = torch.zeros(n, side * side, 2, dtype=torch.float64)
                for s_ in range(n):
                    hh, ww = (int(x) for x in torch.randint(8, 33, (2,), generator=g))
                    top, left = int(torch.randint(0, 33 - hh, (1,), generator=g)), int(torch.randint(0, 33 - ww, (1,), generator=g))
                    flipped = bool(torch.rand(1, generator=g) < 0.5)
                    for rr in range(side):
                        for cc in range(side):
                            col = side - 1 - cc if flipped else cc
                            at[s_, rr * side + cc, 0] = top + (rr + 0.5) * hh / side
                            at[s_, rr * side + cc, 1] = left + (col + 0.5) * ww / side
                out[f"location{v}"] = entry(at)
        return out, {}
    raise KeyError(name)


# (case name, loss, seed, hyper-parameters: those of the recipes)
CASES = [
    ("simclr", "simclr", 1, {"temperature": 0.2}),
    ("barlow", "barlow", 2, {"lambd": 0.0051, "scale": 0.1, "eps": 1e-5}),
    ("byol", "byol", 3, {}),
    ("vicreg", "vicreg", 4, {"simWeight": 25.0, "varWeight": 25.0, "covWeight": 1.0, "gamma": 1.0, "eps": 1e-4}),
    ("moco", "moco", 11, {"temperature": 0.2}),
    ("mocov3", "mocov3", 12, {"temperature": 0.2}),
    ("simsiam", "simsiam", 13, {}),
    ("nnclr", "nnclr", 14, {"temperature": 0.2}),
    ("supcon", "supcon", 15, {"temperature": 0.1}),
    ("ressl", "ressl", 16, {"temperatureQ": 0.1, "temperatureK": 0.04}),
    ("dcl", "dcl", 17, {"temperature": 0.1}),
    ("dclw", "dcl", 18, {"temperature": 0.1, "sigma": 0.5}),
    ("swav", "swav", 21, {"temperature": 0.1, "epsilon": 0.05, "iterations": 3}),
    ("swav-queue", "swav", 22, {"temperature": 0.1, "epsilon": 0.05, "iterations": 3}),
    ("dino", "dino", 23, {"studentTemperature": 0.1, "teacherTemperature": 0.04, "centreMomentum": 0.9}),
    ("mae", "mae", 24, {"patchSize": 2, "normPixLoss": 1}),
    ("wmse", "wmse", 25, {"whiteningSize": 12, "eps": 0}),
    ("vibcreg", "vibcreg", 26, {"simWeight": 25, "varWeight": 25, "covWeight": 200}),
    ("all4one", "all4one", 27, {}),
    ("all4one-centroid", "all4one-centroid", 29, {"temperature": 0.1}),
    ("deepclusterv2", "deepclusterv2", 31, {"temperature": 0.1}),
    ("deepclusterv2-lopsided", "deepclusterv2", 32, {"temperature": 0.1}),
    ("fastsiam", "fastsiam", 41, {}),
    ("tico", "tico", 42, {"beta": 0.9, "rho": 20.0}),
    ("mmcr", "mmcr", 43, {"lambda": 0.005}),
    ("simdino", "simdino", 33, {"eps": 0.5, "alignWeight": 1.0}),
    ("lejepa", "lejepa", 34, {"sigregWeight": 0.02, "globalViews": 3, "tMax": 3.0, "knots": 17}),
    ("ijepa", "ijepa", 35, {"beta": 1.0, "mse": 0}),
    ("msn", "msn", 35, {"temperature": 0.1, "sharpenTemperature": 0.25, "sinkhornIterations": 3, "meMaxWeight": 1.0}),
    ("vicregl", "vicregl", 36, {"alpha": 0.75, "invWeight": 25.0, "varWeight": 25.0, "covWeight": 1.0, "matchesThere": 5, "matchesBack": 3, "l2AllMatches": 1}),
    ("vicregl-features", "vicregl", 36, {"alpha": 0.75, "invWeight": 25.0, "varWeight": 25.0, "covWeight": 1.0, "matchesThere": 5, "matchesBack": 3, "l2AllMatches": 0}),
    ("ibot", "ibot", 35, {"studentTemperature": 0.1, "teacherTemperature": 0.04, "teacherPatchTemperature": 0.07,
                          "centreMomentum": 0.9, "patchCentreMomentum": 0.9, "patchLossWeight": 1.0}),
    ("koleo", "koleo", 36, {"eps": 1e-8}),
    ("dinov2", "dinov2", 37, {"studentTemperature": 0.1, "teacherTemperature": 0.07, "sinkhornIterations": 3,
                              "patchLossWeight": 1.0, "koleoWeight": 0.1}),
]


def make_case(name, loss, seed, h):
    inputs, state = make_inputs(name, torch.Generator().manual_seed(seed))
    first = next(s for s in inputs.values() if s["batch_axis"] is not None)
    case = {"name": name, "loss": loss, "N": first["shape"][first["batch_axis"]], "seed": seed, "hyper": h,
            "convention": CONVENTIONS[loss], "inputs": inputs}
    if state:
        case["state"] = state
    case["expected"] = compute(case)
    return case


def make_file(cases):
    return {
        "format": FORMAT,
        "generated_by": "ssl-zoo scripts/gen_loss_cases.py (float64 PyTorch reference)",
        "torch_version": torch.__version__,
        "dtype": "float64",
        "layout": "flat row-major data with an explicit shape",
        "distributed": DISTRIBUTED,
        "cases": cases,
    }


# ----------------------------------------------------------------------------- checking


def rel(a, b):
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    scale = float(tb.abs().max()) if tb.numel() else 0.0
    diff = float((ta - tb).abs().max()) if tb.numel() else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def worst_difference(case):
    mine, ref = compute(case), case["expected"]
    mine["per_rank"]["1"] = [mine["loss"]]
    mine["per_rank"] = {w: v for w, v in mine["per_rank"].items() if w in ref.get("per_rank", {})}
    worst = abs(mine["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-300)
    for block in ("grad", "per_rank", "outputs", "state_after", "terms"):
        if sorted(mine.get(block, {})) != sorted(ref.get(block, {})):
            sys.exit(f"{case['name']}: expected.{block}: keys {sorted(ref.get(block, {}))}, this script {sorted(mine.get(block, {}))}")
    pairs = [(mine["grad"][k], v) for k, v in ref["grad"].items()] + [(mine["per_rank"][k], v) for k, v in ref["per_rank"].items()]
    for block in ("outputs", "state_after"):
        pairs += [(mine[block][k]["data"], v["data"]) for k, v in ref.get(block, {}).items()]
    pairs += [([mine["terms"][k]], [v]) for k, v in ref.get("terms", {}).items()]
    for a, b in pairs:
        worst = max(worst, rel(a, b))
    return worst


V1_HYPER = {
    "simclr": {"temperature": "temperature"},
    "barlow": {"lambd": "lambd", "scale": "scale", "eps": "bt_eps"},
    "byol": {},
    "vicreg": {"simWeight": "sim_w", "varWeight": "var_w", "covWeight": "cov_w", "gamma": "gamma", "eps": "vic_eps"},
}


def upgrade_v1(data):
    """The cases of an `ssl-loss-oracle/1` file (one [N][D] batch; SimCLR, Barlow Twins, BYOL, VICReg) in this format."""
    n = data["N"]
    per_rank = data.get("distributed", {}).get("per_rank_loss", {})
    w = data.get("distributed", {}).get("world_size")
    cases = []
    for name, ref in data["losses"].items():
        if name not in V1_HYPER:
            continue
        inputs = {k: {"shape": [n, data["D"]], "dtype": "float32", "batch_axis": 0, "data": sum(data["inputs"][k], [])} for k in ref["grad"]}
        expected = {"loss": ref["loss"], "grad": {k: sum(g, []) for k, g in ref["grad"].items()}, "per_rank": {str(w): per_rank[name]} if name in per_rank else {}}
        if "terms" in ref:
            expected["terms"] = ref["terms"]
        hyper = {now: data["hyper"][then] for now, then in V1_HYPER[name].items()}
        cases.append({"name": name, "loss": name, "N": n, "hyper": hyper, "inputs": inputs, "expected": expected})
    return {"format": FORMAT, "cases": cases}


def check(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("format") == "ssl-loss-oracle/1":
        data = upgrade_v1(data)
    if data.get("format") != FORMAT:
        sys.exit(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    failed = False
    for case in data["cases"]:
        if case["loss"] not in LOSSES:
            print(f"{path}: {case['name']}: loss {case['loss']!r} unknown to this script, skipped")
            continue
        worst = worst_difference(case)
        print(f"{os.path.relpath(path)}: {case['name']}: largest relative difference {worst:.3g}")
        failed = failed or not worst < 1e-10
    if failed:
        sys.exit(f"{path}: does not match this script's conventions")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "losses", "cases.json"))
    ap.add_argument("--only", metavar="CASE", nargs="*", help=f"only these cases (of {', '.join(c[0] for c in CASES)})")
    ap.add_argument("--check", metavar="FILE", nargs="*", help="verify existing files instead of writing")
    args = ap.parse_args()
    if args.check is not None:
        for path in args.check:
            check(path)
        return
    unknown = sorted(set(args.only or []) - {c[0] for c in CASES})
    if unknown:
        sys.exit(f"--only: unknown case(s) {', '.join(unknown)}")
    cases = [make_case(*c) for c in CASES if not args.only or c[0] in args.only]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(make_file(cases), f)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out)} ({os.path.getsize(args.out)} bytes): {len(cases)} cases")
    check(args.out)


if __name__ == "__main__":
    main()
