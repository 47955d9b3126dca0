"""Float64 PyTorch reference values of SupCon's two losses for tests/methods/supcon-variant.test.ts.

Written from Khosla et al. 2020 (eqs. 2 and 3), not from src/losses/supcon.ts: for every anchor
i (each view of each sample, L2-normalised) A(i) is every other embedding and P(i) those of A(i)
with i's label;
    L_out_i = -1/|P(i)| * sum_{p in P(i)} log(exp(z_i.z_p/t) / sum_{a in A(i)} exp(z_i.z_a/t))
    L_in_i  = -log(sum_{p in P(i)} exp(z_i.z_p/t) / sum_{a in A(i)} exp(z_i.z_a/t))
and the loss is the mean over anchors. L_in is solo-learn's form, without the paper's 1/|P(i)|
inside the log (log |P(i)| per anchor: the same gradient, another value). Inputs are
float32-representable; gradients are d loss / d views.

    /usr/bin/python3 scripts/supcon_out_reference.py   # writes tests/fixtures/methods/supcon-variants.json
"""
import json
import math
import pathlib

import torch


def reference(views, labels, t):
    """views: list of V [B, D] float64 tensors; labels: [B] ints; returns (L_in, L_out)."""
    z = torch.cat(views, 0)
    z = z / z.norm(dim=1, keepdim=True)
    y = list(labels) * len(views)
    n = z.shape[0]
    l_in, l_out = [], []
    for i in range(n):
        others = [a for a in range(n) if a != i]
        positives = [p for p in others if y[p] == y[i]]
        denominator = torch.stack([torch.exp(z[i] @ z[a] / t) for a in others]).sum()
        log_probs = [torch.log(torch.exp(z[i] @ z[p] / t) / denominator) for p in positives]
        l_out.append(-torch.stack(log_probs).sum() / len(positives))
        l_in.append(-torch.log(torch.stack([torch.exp(z[i] @ z[p] / t) for p in positives]).sum() / denominator))
    return torch.stack(l_in).mean(), torch.stack(l_out).mean()


def case(seed, views, batch, dim, labels, t):
    g = torch.Generator().manual_seed(seed)
    data = [torch.randn(batch, dim, generator=g).float().double().requires_grad_(True) for _ in range(views)]
    out = {"seed": seed, "temperature": t, "labels": labels, "views": [v.detach().tolist() for v in data]}
    for name, loss in zip(("in", "out"), reference(data, labels, t)):
        grads = torch.autograd.grad(loss, data, retain_graph=True)
        out[name] = {"loss": loss.item(), "grads": [gr.tolist() for gr in grads]}
    return out


def main():
    cases = [
        case(1, 2, 6, 5, [0, 1, 0, 2, 1, 0], 0.2),
        case(2, 3, 4, 3, [1, 1, 0, 1], 0.5),
        case(3, 2, 8, 4, [0, 1, 2, 3, 0, 1, 2, 3], 0.1),
    ]
    for c in cases:
        assert all(math.isfinite(c[k]["loss"]) for k in ("in", "out"))
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "methods" / "supcon-variants.json"
    path.write_text(json.dumps({"generator": "scripts/supcon_out_reference.py", "torch": torch.__version__, "cases": cases}) + "\n")
    print(path)


if __name__ == "__main__":
    main()
