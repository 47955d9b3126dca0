#!/usr/bin/env python3
"""Generates tests/fixtures/backbones/tiny-resnet-torch.json: PyTorch's answer (float64) for
the tiny_resnet backbone, which tests/backbones/torch-parity.test.ts checks ssl-zoo against:
a train-mode forward, the gradients of a fixed projection of its output, the running
statistics after that step, and an eval-mode forward with them.

Weights and inputs come from an integer hash that the test reproduces exactly, so the
fixture only holds outputs. Run with Debian's python3-torch (plain `python3` may be an
interpreter without torch):

    /usr/bin/python3 scripts/gen_backbone_fixtures.py
"""
import json
import math
import pathlib

import torch
from torch import nn

M = 0xFFFFFFFF
BATCH, SIZE, CHANNELS = 4, 12, 1


def name_key(name: str) -> int:
    k = 0
    for c in name:
        k = (k * 31 + ord(c)) & M
    return k


def hash_uniform(key: int, n: int) -> torch.Tensor:
    """n values in [-1, 1): murmur3-finalised (index * golden + key), as in the test."""
    out = []
    for i in range(n):
        h = (i * 0x9E3779B1 + key) & M
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & M
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & M
        h ^= h >> 16
        out.append(h / 2**32 * 2 - 1)
    return torch.tensor(out, dtype=torch.float64)


class BasicBlock(nn.Module):
    def __init__(self, inp: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


class TinyResNet(nn.Module):
    def __init__(self, inp: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, 32, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.layer1 = BasicBlock(32, 32, 1)
        self.layer2 = BasicBlock(32, 64, 2)
        self.layer3 = BasicBlock(64, 128, 2)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return h.mean(dim=(2, 3))


def fill(model: nn.Module) -> None:
    """conv: u·sqrt(6 / fanOut) in torch layout [out, in, kh, kw]; bn: γ = 1 + u/4, β = u/4."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            u = hash_uniform(name_key(name), p.numel()).reshape(p.shape)
            if p.dim() == 4:
                fan_out = p.shape[0] * p.shape[2] * p.shape[3]
                p.copy_(u * math.sqrt(6 / fan_out))
            elif name.endswith('weight'):
                p.copy_(1 + u / 4)
            else:
                p.copy_(u / 4)


def nhwc(t: torch.Tensor) -> list:
    return t.permute(0, 2, 3, 1).reshape(-1).tolist()


def main() -> None:
    model = TinyResNet(CHANNELS).double()
    fill(model)
    x_nhwc = hash_uniform(name_key('input'), BATCH * SIZE * SIZE * CHANNELS) * 2
    x = x_nhwc.reshape(BATCH, SIZE, SIZE, CHANNELS).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    r = hash_uniform(name_key('projection'), BATCH * 128).reshape(BATCH, 128)

    model.train()
    out = model(x)
    (out * r).sum().backward()
    params = dict(model.named_parameters())
    conv_layout = lambda g: g.permute(2, 3, 1, 0).reshape(-1).tolist()  # to [kh, kw, in, out]
    model.eval()
    with torch.no_grad():
        eval_out = model(x)

    fixture = {
        'generator': 'scripts/gen_backbone_fixtures.py',
        'torch': torch.__version__,
        'input': [BATCH, SIZE, SIZE, CHANNELS],
        'trainOutput': out.reshape(-1).tolist(),
        'evalOutputAfterStep': eval_out.reshape(-1).tolist(),
        'bn1RunningMean': model.bn1.running_mean.tolist(),
        'bn1RunningVar': model.bn1.running_var.tolist(),
        'grads': {
            'input': nhwc(x.grad),
            'conv1.weight': conv_layout(params['conv1.weight'].grad),
            'layer2.downsample.0.weight': conv_layout(params['layer2.downsample.0.weight'].grad),
            'layer3.bn2.weight': params['layer3.bn2.weight'].grad.tolist(),
            'layer3.bn2.bias': params['layer3.bn2.bias'].grad.tolist(),
        },
    }
    path = pathlib.Path(__file__).resolve().parent.parent / 'tests/fixtures/backbones/tiny-resnet-torch.json'
    path.write_text(json.dumps(fixture, separators=(',', ':')) + '\n')
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
