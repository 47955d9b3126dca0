"""ResNet-18 with solo-learn's CIFAR stem (3x3 stride-1 conv, padding 2, no max-pool), fc
removed, built from torch.nn only (Debian's python3-torch ships without torchvision)."""

import os
import sys

from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gen_backbone_fixtures import BasicBlock  # noqa: E402  (scripts/, the same block as tiny_resnet's)


def resnet18_cifar(channels):
    layers = [nn.Conv2d(channels, 64, 3, 1, 2, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers)
