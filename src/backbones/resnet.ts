/**
 * ResNets in torchvision's layout (v1.5: the stride of a bottleneck sits on its 3x3
 * convolution), without the final fully connected layer, as used by solo-learn. Parameter
 * names follow torchvision (`conv1`, `bn1`, `layer1.0.conv1`, `layer2.0.downsample.0`, ...).
 */
import { childLayer, Conv2d, GlobalAvgPool, Identity, MaxPool2d, normLayer, Sequential, type NormKind } from '../core/layers.js';
import { Layer } from '../core/module.js';
import type { Rng } from '../core/random.js';
import { tf, type Tensor } from '../core/tf.js';
import { Backbone, type BackboneOptions, type SpatialBackbone } from './base.js';

/** The 1x1 convolution + norm (batch norm by default) that matches the shortcut to a block's output shape. */
function downsample(inPlanes: number, outPlanes: number, stride: number, rng: Rng, norm: NormKind): Sequential {
  return new Sequential(new Conv2d(inPlanes, outPlanes, 1, { stride, rng }), normLayer(norm, outPlanes, true));
}

/** Whether a block needs a projection shortcut. */
function needsDownsample(inPlanes: number, outPlanes: number, stride: number): boolean {
  return stride !== 1 || inPlanes !== outPlanes;
}

/** The shortcut branch of a block: `downsample(x)` if it has one, else `x`. */
function shortcut(block: Layer, hasDownsample: boolean, x: Tensor): Tensor {
  return hasDownsample ? childLayer(block, 'downsample').forward(x) : x;
}

/**
 * Two 3x3 convolutions with a residual connection (ResNet-18/34):
 * `[B, H, W, inPlanes] -> [B, H/stride, W/stride, planes]`. Children `conv1`, `bn1`,
 * `conv2`, `bn2` and, when the shape changes, `downsample` (1x1 conv + batch norm). `norm`
 * (default `'batch'`) picks the normalisation layers (`normLayer`), under the same names.
 */
export class BasicBlock extends Layer {
  static readonly expansion = 1;
  readonly hasDownsample: boolean;

  constructor(inPlanes: number, planes: number, stride: number, rng: Rng, norm: NormKind = 'batch') {
    super();
    this.addModule('conv1', new Conv2d(inPlanes, planes, 3, { stride, padding: 1, rng }));
    this.addModule('bn1', normLayer(norm, planes, true));
    this.addModule('conv2', new Conv2d(planes, planes, 3, { padding: 1, rng }));
    this.addModule('bn2', normLayer(norm, planes, true));
    this.hasDownsample = needsDownsample(inPlanes, planes, stride);
    if (this.hasDownsample) this.addModule('downsample', downsample(inPlanes, planes, stride, rng, norm));
  }

  forward(x: Tensor): Tensor {
    return tf.tidy(() => {
      const apply = (name: string, h: Tensor) => childLayer(this, name).forward(h);
      let out = tf.relu(apply('bn1', apply('conv1', x)));
      out = apply('bn2', apply('conv2', out));
      return tf.relu(tf.add(out, shortcut(this, this.hasDownsample, x)));
    });
  }
}

/**
 * 1x1 reduce, 3x3 (strided), 1x1 expand, with a residual connection (ResNet-50/101):
 * `[B, H, W, inPlanes] -> [B, H/stride, W/stride, 4·planes]`. Children `conv1`..`conv3`,
 * `bn1`..`bn3` and, when the shape changes, `downsample`. `norm` as in {@link BasicBlock}.
 */
export class Bottleneck extends Layer {
  static readonly expansion = 4;
  readonly hasDownsample: boolean;

  constructor(inPlanes: number, planes: number, stride: number, rng: Rng, norm: NormKind = 'batch') {
    super();
    const outPlanes = planes * Bottleneck.expansion;
    this.addModule('conv1', new Conv2d(inPlanes, planes, 1, { rng }));
    this.addModule('bn1', normLayer(norm, planes, true));
    this.addModule('conv2', new Conv2d(planes, planes, 3, { stride, padding: 1, rng }));
    this.addModule('bn2', normLayer(norm, planes, true));
    this.addModule('conv3', new Conv2d(planes, outPlanes, 1, { rng }));
    this.addModule('bn3', normLayer(norm, outPlanes, true));
    this.hasDownsample = needsDownsample(inPlanes, outPlanes, stride);
    if (this.hasDownsample) this.addModule('downsample', downsample(inPlanes, outPlanes, stride, rng, norm));
  }

  forward(x: Tensor): Tensor {
    return tf.tidy(() => {
      const apply = (name: string, h: Tensor) => childLayer(this, name).forward(h);
      let out = tf.relu(apply('bn1', apply('conv1', x)));
      out = tf.relu(apply('bn2', apply('conv2', out)));
      out = apply('bn3', apply('conv3', out));
      return tf.relu(tf.add(out, shortcut(this, this.hasDownsample, x)));
    });
  }
}

/** A residual block class: {@link BasicBlock} or {@link Bottleneck}. */
export interface BlockType {
  readonly expansion: number;
  new (inPlanes: number, planes: number, stride: number, rng: Rng, norm?: NormKind): Layer;
}

/**
 * A torchvision ResNet without `fc`: `[B, H, W, inChannels] -> [B, 512·expansion]`.
 *
 * Stem: `conv1` 7x7 stride 2 (padding 3), `bn1`, ReLU, `maxpool` 3x3 stride 2 (padding 1).
 * With `cifarStem`, as in solo-learn for CIFAR: `conv1` is 3x3 stride 1 with padding 2
 * (so 32x32 images give 34x34 maps, exactly as solo-learn) and PyTorch's default conv
 * init (solo-learn swaps it in after torchvision's init), and `maxpool` is an identity.
 * Then `layer1`..`layer4` (widths 64, 128, 256, 512; strides 1, 2, 2, 2) and global
 * average pooling. Convolutions use He normal fan-out init; batch norms start at γ=1, β=0.
 * `norm` (BackboneOptions) swaps every batch norm for group norm (32 groups) or layer norm
 * (`GroupNorm(1, C)`), same names, same γ=1, β=0.
 */
export class ResNet extends Backbone implements SpatialBackbone {
  readonly featureDim: number;
  /** Children applied after the stem's conv1, bn1 and ReLU, in order. */
  private readonly stages: string[] = ['maxpool'];

  constructor(block: BlockType, blocksPerStage: readonly number[], options: BackboneOptions) {
    super();
    const { inChannels, rng } = options;
    const norm = options.norm ?? 'batch';
    const stem = options.cifarStem
      ? new Conv2d(inChannels, 64, 3, { stride: 1, padding: 2, init: 'uniformFanIn', rng })
      : new Conv2d(inChannels, 64, 7, { stride: 2, padding: 3, rng });
    this.addModule('conv1', stem);
    this.addModule('bn1', normLayer(norm, 64, true));
    this.addModule('maxpool', options.cifarStem ? new Identity() : new MaxPool2d(3, 2, 1));
    let inPlanes = 64;
    blocksPerStage.forEach((count, stage) => {
      const planes = 64 * 2 ** stage;
      const blocks: Layer[] = [];
      for (let i = 0; i < count; i++) {
        blocks.push(new block(inPlanes, planes, i === 0 && stage > 0 ? 2 : 1, rng, norm));
        inPlanes = planes * block.expansion;
      }
      this.addModule(`layer${stage + 1}`, new Sequential(...blocks));
      this.stages.push(`layer${stage + 1}`);
    });
    this.addModule('avgpool', new GlobalAvgPool());
    this.stages.push('avgpool');
    this.featureDim = inPlanes;
  }

  /** `[B, H, W, inChannels] -> [B, featureDim]`. */
  forward(x: Tensor): Tensor {
    return tf.tidy(() => {
      const stem = tf.relu(childLayer(this, 'bn1').forward(childLayer(this, 'conv1').forward(x)));
      return this.stages.reduce((h, name) => childLayer(this, name).forward(h), stem);
    });
  }

  /** `[B, H, W, inChannels] -> [B, h, w, featureDim]`: the last stage's output, the map {@link forward} averages. */
  featureMap(x: Tensor): Tensor {
    return tf.tidy(() => {
      const stem = tf.relu(childLayer(this, 'bn1').forward(childLayer(this, 'conv1').forward(x)));
      return this.stages.slice(0, -1).reduce((h, name) => childLayer(this, name).forward(h), stem);
    });
  }
}

/** ResNet-18: basic blocks [2, 2, 2, 2], 512 features (11,176,512 parameters for RGB). */
export function resnet18(options: BackboneOptions): ResNet {
  return new ResNet(BasicBlock, [2, 2, 2, 2], options);
}

/** ResNet-50: bottlenecks [3, 4, 6, 3], 2048 features (23,508,032 parameters for RGB). */
export function resnet50(options: BackboneOptions): ResNet {
  return new ResNet(Bottleneck, [3, 4, 6, 3], options);
}
