#!/usr/bin/env python3
"""Generates tests/fixtures/backbones/vit-torch.json: PyTorch's answer (float64) for a small
Vision Transformer with ssl-zoo's (timm's) layout, which tests/backbones/vit-parity.test.ts
checks `VisionTransformer` against: outputs and the gradients of a fixed projection of them
with respect to every parameter and the input, for 16x16x3 images (the 4x4 patch grid the
position embeddings are made for) and 8x8x3 images (2x2 patches: bicubically resized
position embeddings). Also PyTorch's bicubic resize matrices, and two negative controls:
the 16 px output of a post-norm network and the 8 px output with bilinear resizing.

The network is written here independently of timm (same maths: pre-norm blocks, LayerNorm
eps 1e-6, qkv attention, exact GELU, [CLS] token, final LayerNorm; position embeddings
resized with F.interpolate(mode='bicubic', align_corners=False) to the patch grid of the
input, as timm's resample_abs_pos_embed without antialiasing). Weights and inputs come from
the integer hash of scripts/gen_backbone_fixtures.py, which the test reproduces. Run with
Debian's python3-torch:

    /usr/bin/python3 scripts/gen_vit_fixtures.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F
from torch import nn

from gen_backbone_fixtures import hash_uniform, name_key

DIM, DEPTH, HEADS, MLP_RATIO, PATCH, CHANNELS, BATCH = 32, 2, 2, 4, 4, 3, 2
IMAGE = 16  # the size the position embeddings are made for
SIZES = [16, 8]
RESIZES = [(4, 2), (4, 3), (4, 6), (7, 3), (8, 3)]


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, pre_norm=True, mlp_ratio=MLP_RATIO):
        super().__init__()
        self.pre_norm = pre_norm
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, dim * mlp_ratio)

    def forward(self, x):
        if not self.pre_norm:  # negative control: the original Transformer's post-norm
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.mlp(x))
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, channels, dim, patch):
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    """[B, C, H, W] -> [B, dim]; defaults: the fixture's network (bench:step builds vit_tiny)."""

    def __init__(self, pre_norm=True, resize_mode='bicubic', dim=DIM, depth=DEPTH, heads=HEADS, mlp_ratio=MLP_RATIO, patch=PATCH, channels=CHANNELS, image=IMAGE):
        super().__init__()
        self.dim, self.patch = dim, patch
        self.grid = image // patch
        self.resize_mode = resize_mode
        self.patch_embed = PatchEmbed(channels, dim, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.grid**2, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, pre_norm, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def position_embedding(self, h, w):
        if h == self.grid and w == self.grid:
            return self.pos_embed
        g = self.grid
        grid = self.pos_embed[:, 1:].reshape(1, g, g, self.dim).permute(0, 3, 1, 2)
        resized = F.interpolate(grid, size=(h, w), mode=self.resize_mode, align_corners=False)
        return torch.cat([self.pos_embed[:, :1], resized.permute(0, 2, 3, 1).reshape(1, h * w, self.dim)], dim=1)

    def forward(self, x):
        h, w = x.shape[2] // self.patch, x.shape[3] // self.patch
        tokens = self.patch_embed(x)
        tokens = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), tokens], dim=1) + self.position_embedding(h, w)
        for block in self.blocks:
            tokens = block(tokens)
        return self.norm(tokens[:, 0])


def fill(model):
    """Linear and conv weights u·sqrt(3 / fanIn) in torch layout, their biases u/10; LayerNorm
    γ = 1 + u/4, β = u/4; cls_token and pos_embed u/2 (u: the hash, in [-1, 1))."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            u = hash_uniform(name_key(name), p.numel()).reshape(p.shape)
            if p.dim() in (2, 4):
                p.copy_(u * math.sqrt(3 / (p.numel() / p.shape[0])))
            elif name in ('cls_token', 'pos_embed'):
                p.copy_(u / 2)
            elif 'norm' in name:
                p.copy_(1 + u / 4 if name.endswith('weight') else u / 4)
            else:
                p.copy_(u / 10)


def ours(name, g):
    """A gradient in ssl-zoo's layout: Linear [in, out], conv [kh, kw, in, out]."""
    if g.dim() == 2:
        g = g.t()
    elif g.dim() == 4:
        g = g.permute(2, 3, 1, 0)
    return rounded(g)


def rounded(t):
    return [float(f'{v:.8g}') for v in t.reshape(-1).tolist()]


def inputs(size):
    x_nhwc = hash_uniform(name_key(f'input{size}'), BATCH * size * size * CHANNELS).reshape(BATCH, size, size, CHANNELS)
    return x_nhwc.permute(0, 3, 1, 2).contiguous().requires_grad_(True)


def projection():
    return hash_uniform(name_key('projection'), BATCH * DIM).reshape(BATCH, DIM)


def case(model, size):
    model.zero_grad()
    x = inputs(size)
    out = model(x)
    (out * projection()).sum().backward()
    grads = {name: ours(name, p.grad) for name, p in model.named_parameters()}
    grads['input'] = rounded(x.grad.permute(0, 2, 3, 1))
    return {'size': size, 'output': rounded(out.detach()), 'grads': grads}


def control(model, size):
    fill(model)
    with torch.no_grad():
        return rounded(model(inputs(size)))


def resize_matrix(n_in, n_out):
    """F.interpolate's bicubic map on an identity: the [out, in] matrix."""
    eye = torch.eye(n_in, dtype=torch.float64).reshape(n_in, 1, n_in, 1)
    return rounded(F.interpolate(eye, size=(n_out, 1), mode='bicubic', align_corners=False).reshape(n_in, n_out).t())


def main():
    torch.set_default_dtype(torch.float64)
    model = ViT()
    fill(model)
    fixture = {
        'generator': 'scripts/gen_vit_fixtures.py',
        'torch': torch.__version__,
        'config': {'embedDim': DIM, 'depth': DEPTH, 'numHeads': HEADS, 'mlpRatio': MLP_RATIO, 'patchSize': PATCH},
        'imageSize': IMAGE,
        'channels': CHANNELS,
        'batch': BATCH,
        'cases': [case(model, size) for size in SIZES],
        'resizeMatrices': [{'in': i, 'out': o, 'matrix': resize_matrix(i, o)} for i, o in RESIZES],
        'postNormOutput16': control(ViT(pre_norm=False), 16),
        'bilinearOutput8': control(ViT(resize_mode='bilinear'), 8),
    }
    path = pathlib.Path(__file__).resolve().parent.parent / 'tests/fixtures/backbones/vit-torch.json'
    path.write_text(json.dumps(fixture, separators=(',', ':')) + '\n')
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
