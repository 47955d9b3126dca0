#!/usr/bin/env python3
"""Generates tests/fixtures/losses/deepclusterv2-torch.json: DeepCluster v2's loss in float64 PyTorch.

The loss is solo-learn's `deepclusterv2_loss_func` (solo/losses/deepclusterv2.py), written
here as solo-learn writes it: for each head h, `F.cross_entropy(scores_h / T, targets_h
repeated per view, ignore_index=-1)`, averaged over the heads; gradients by autograd. The
inputs are the GLOBAL batch of N samples: per head, scores `[V*N, K]` (view blocks of N rows)
and targets `[N]` (-1: no cluster), with a few -1 in every case; one case also has a head
whose targets are all -1 on the rows of one rank (W = 2), so per-rank means would differ from
the global one. The TypeScript loss is checked against these values with one process and
with W = 2 and 3 ranks, rank r holding rows r*N/W..(r+1)*N/W-1 of every view block
(tests/losses/deepclusterv2.test.ts, tests/distributed/deepclusterv2.test.ts). Run with
Debian's python3-torch:

    /usr/bin/python3 scripts/gen_deepclusterv2_fixtures.py
"""

import json
import os

import torch
import torch.nn.functional as F

N, V, K, HEADS = 12, 2, 5, 3
TEMPERATURE = 0.1


def deepclusterv2_loss_func(outputs, assignments, temperature):
    """solo-learn's loss: outputs [P, V, N, C], assignments [P, N]."""
    loss = 0
    for h in range(outputs.size(0)):
        scores = outputs[h].view(-1, outputs.size(-1)) / temperature
        targets = assignments[h].repeat(outputs.size(1))
        loss += F.cross_entropy(scores, targets, ignore_index=-1)
    return loss / outputs.size(0)


def case(name, seed, lopsided):
    g = torch.Generator().manual_seed(seed)
    scores = torch.nn.functional.normalize(torch.randn(HEADS, V, N, K, generator=g, dtype=torch.float64), dim=-1)
    scores.requires_grad_(True)
    targets = torch.randint(0, K, (HEADS, N), generator=g)
    targets[:, torch.randperm(N, generator=g)[:3]] = -1
    if lopsided:
        targets[1, : N // 2] = -1  # head 1: no cluster on rank 0's rows (W = 2)
    loss = deepclusterv2_loss_func(scores, targets, TEMPERATURE)
    (grad,) = torch.autograd.grad(loss, scores)
    flat = lambda t: t.reshape(-1).tolist()
    return {
        "name": name,
        "n": N,
        "views": V,
        "k": K,
        "heads": HEADS,
        "temperature": TEMPERATURE,
        "scores": [flat(scores[h].detach()) for h in range(HEADS)],
        "targets": [targets[h].tolist() for h in range(HEADS)],
        "loss": loss.item(),
        "grads": [flat(grad[h]) for h in range(HEADS)],
    }


def main():
    out = {
        "format": "ssl-zoo-deepclusterv2/1",
        "convention": "per head h: scores[h] is [V*N, K] row-major (view blocks of N rows), targets[h] [N] (-1: ignored); "
        "loss = mean over heads of cross_entropy(scores_h / T, targets_h repeated V times, ignore_index=-1); "
        "grads[h] = d loss / d scores[h]",
        "cases": [case("random", 1, False), case("lopsided", 2, True)],
    }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "losses", "deepclusterv2-torch.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
