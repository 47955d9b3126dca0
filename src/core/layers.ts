// Over 400 lines: every layer class (linear, conv, batch/group/layer norm, pooling, containers) with its doc comment; they share the channel checks and the tape helpers.
/**
 * Basic layers in NHWC layout, with PyTorch's semantics and initialisations: the building
 * blocks of the backbones and heads. Every `forward` returns a new tensor owned by the
 * caller and frees its intermediates.
 */
import { fanIn, kaimingNormalFanOut, uniformFanIn } from './init.js';
import { batchNormTraining } from './kernels/batch-norm.js';
import { gelu } from './kernels/gelu.js';
import { groupNorm } from './kernels/group-norm.js';
import { Layer, type Module } from './module.js';
import type { Rng } from './random.js';
import { tf, type Tensor, type Variable } from './tf.js';

/**
 * Runs `fn` with gradient recording paused (PyTorch's `torch.no_grad()`): its ops are not
 * put on the active gradient tape (of `tf.grad`, `tf.variableGrads`, ...), so state updates
 * made inside (e.g. batch norm running statistics) neither receive gradients nor keep
 * tensors alive for a backward pass, and the enclosing gradient treats `fn`'s results as
 * constants. Unlike `torch.no_grad()`, `fn` may compute gradients of its own: they get a
 * fresh tape, freed when they end, and the enclosing tape is restored afterwards.
 */
export function withoutGradientTape<T>(fn: () => T): T {
  const state = tf.engine().state;
  const { activeTape, gradientDepth } = state;
  state.activeTape = null as unknown as typeof activeTape;
  state.gradientDepth = 0;
  try {
    return fn();
  } finally {
    state.activeTape = activeTape;
    state.gradientDepth = gradientDepth;
  }
}

/**
 * The child layer registered on `parent` as `name`. Containers look their children up at
 * call time (rather than keeping references) so that {@link Module.replaceModule}, e.g. a
 * batch norm to synchronised batch norm conversion, takes effect.
 */
export function childLayer(parent: Module, name: string): Layer {
  const found = parent.namedChildren().find(([n]) => n === name);
  if (!found) throw new Error(`${parent.constructor.name} has no submodule '${name}'`);
  return asLayer(parent, name, found[1]);
}

function asLayer(parent: Module, name: string, child: Module): Layer {
  if (!(child instanceof Layer)) throw new Error(`submodule '${name}' of ${parent.constructor.name} is not a Layer`);
  return child;
}

function expectRank(layer: string, x: Tensor, rank: number, layout: string): void {
  if (x.rank !== rank) throw new Error(`${layer} expects a rank-${rank} input ${layout}, got shape [${x.shape}]`);
}

function expectChannels(layer: string, x: Tensor, channels: number): void {
  const last = x.shape[x.rank - 1];
  if (last !== channels) {
    throw new Error(`${layer} expects ${channels} features/channels on the last axis, got shape [${x.shape}]`);
  }
}

export interface LinearOptions {
  /** Add a learned bias (default true). */
  bias?: boolean;
  /** Source of the initial weights. */
  rng: Rng;
}

/**
 * Fully connected layer `y = x W + b`: `[B, inFeatures] -> [B, outFeatures]`.
 * Parameters `weight` `[inFeatures, outFeatures]` and `bias` `[outFeatures]`, both
 * initialised like PyTorch's `nn.Linear`: U(-1/sqrt(inFeatures), 1/sqrt(inFeatures)).
 */
export class Linear extends Layer {
  readonly weight: Variable;
  readonly bias: Variable | undefined;

  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    options: LinearOptions,
  ) {
    super();
    const shape = [inFeatures, outFeatures];
    this.weight = this.addParameter('weight', uniformFanIn(shape, inFeatures, options.rng));
    this.bias = options.bias === false ? undefined : this.addParameter('bias', uniformFanIn([outFeatures], inFeatures, options.rng));
  }

  /** `[B, inFeatures] -> [B, outFeatures]`. */
  forward(x: Tensor): Tensor {
    expectRank('Linear', x, 2, '[B, inFeatures]');
    expectChannels('Linear', x, this.inFeatures);
    return tf.tidy(() => {
      const y = tf.matMul(x, this.weight);
      return this.bias ? tf.add(y, this.bias) : y;
    });
  }
}

/** Spatial padding: PyTorch-style explicit symmetric padding in pixels, or tfjs's modes. */
export type Padding = number | 'valid' | 'same';

/**
 * Convolution weight initialisations: `kaimingNormalFanOut` is torchvision's ResNet init,
 * N(0, 2 / (kh·kw·outC)); `uniformFanIn` is PyTorch's `nn.Conv2d` default,
 * U(-1/sqrt(kh·kw·inC), 1/sqrt(kh·kw·inC)).
 */
export type ConvInit = 'kaimingNormalFanOut' | 'uniformFanIn';

export interface Conv2dOptions {
  /** Stride along height and width (default 1). */
  stride?: number;
  /**
   * Padding (default 0). An integer p pads every side with p zeros, exactly like
   * PyTorch's `padding=p`, so output sizes match PyTorch for any stride:
   * `floor((H + 2p - k) / stride) + 1`. `'same'` and `'valid'` are TensorFlow's modes
   * (`'same'` with stride > 1 pads asymmetrically and has no PyTorch equivalent).
   */
  padding?: Padding;
  /** Add a learned bias (default false, as in ResNets). */
  bias?: boolean;
  /** Weight initialisation (default `kaimingNormalFanOut`). Biases use `uniformFanIn`. */
  init?: ConvInit;
  /** Source of the initial weights. */
  rng: Rng;
}

/**
 * 2D convolution, square kernel: `[B, H, W, inChannels] -> [B, H', W', outChannels]`.
 * Parameters `weight` `[kernel, kernel, inChannels, outChannels]` and optional `bias`
 * `[outChannels]`.
 */
export class Conv2d extends Layer {
  readonly weight: Variable;
  readonly bias: Variable | undefined;
  readonly stride: number;
  readonly padding: Padding;

  constructor(
    readonly inChannels: number,
    readonly outChannels: number,
    readonly kernel: number,
    options: Conv2dOptions,
  ) {
    super();
    this.stride = options.stride ?? 1;
    this.padding = options.padding ?? 0;
    const shape = [kernel, kernel, inChannels, outChannels];
    const weight = options.init === 'uniformFanIn' ? uniformFanIn(shape, fanIn(shape), options.rng) : kaimingNormalFanOut(shape, options.rng);
    this.weight = this.addParameter('weight', weight);
    this.bias = options.bias ? this.addParameter('bias', uniformFanIn([outChannels], fanIn(shape), options.rng)) : undefined;
  }

  /** `[B, H, W, inChannels] -> [B, H', W', outChannels]`. */
  forward(x: Tensor): Tensor {
    expectRank('Conv2d', x, 4, '[B, H, W, C]');
    expectChannels('Conv2d', x, this.inChannels);
    return tf.tidy(() => {
      const y = tf.conv2d(x as tf.Tensor4D, this.weight as tf.Tensor4D, this.stride, this.padding);
      return this.bias ? tf.add(y, this.bias) : y;
    });
  }
}

export interface BatchNormOptions {
  /** Added to the variance before the square root (default 1e-5). */
  eps?: number;
  /** Weight of the new batch in the running statistics (default 0.1, PyTorch's). */
  momentum?: number;
  /** Learn a per-feature scale `weight` and shift `bias` (default true). */
  affine?: boolean;
}

/** Batch statistics per feature: biased variance, and the number of values per feature. */
export interface BatchMoments {
  /** `[C]` */
  mean: Tensor;
  /** `[C]`, biased (divided by `count`). */
  variance: Tensor;
  /** How many values each statistic is taken over (over all ranks, for a synchronised norm). */
  count: number;
}

/**
 * Batch normalisation over every axis but the last: `[B, C] -> [B, C]` or
 * `[B, H, W, C] -> [B, H, W, C]`, with PyTorch's semantics.
 *
 * - Training mode normalises with the batch statistics from {@link batchMoments}
 *   (gradients flow through them: the true batch-norm gradient) and updates the running
 *   statistics: `running = (1 - momentum) · running + momentum · batch`, with the
 *   *unbiased* batch variance for `runningVar`. The update is not recorded on any gradient
 *   tape. `numBatchesTracked` counts the updates.
 * - Evaluation mode normalises with `runningMean` and `runningVar`.
 *
 * Parameters `weight` (γ, ones) and `bias` (β, zeros), `[C]`; buffers `runningMean`
 * (zeros), `runningVar` (ones), `[C]`, and `numBatchesTracked` (int32 scalar).
 * Subclasses (synchronised batch norm) override only {@link batchMoments}. Without an
 * override, training mode runs the fused {@link batchNormTraining} (same function, fewer
 * kernels).
 */
export class BatchNorm extends Layer {
  readonly eps: number;
  readonly momentum: number;
  readonly weight: Variable | undefined;
  readonly bias: Variable | undefined;
  readonly runningMean: Variable;
  readonly runningVar: Variable;
  readonly numBatchesTracked: Variable;

  constructor(
    readonly numFeatures: number,
    options: BatchNormOptions = {},
  ) {
    super();
    this.eps = options.eps ?? 1e-5;
    this.momentum = options.momentum ?? 0.1;
    const affine = options.affine ?? true;
    this.weight = affine ? this.addParameter('weight', tf.ones([numFeatures])) : undefined;
    this.bias = affine ? this.addParameter('bias', tf.zeros([numFeatures])) : undefined;
    this.runningMean = this.addBuffer('runningMean', tf.zeros([numFeatures]));
    this.runningVar = this.addBuffer('runningVar', tf.ones([numFeatures]));
    this.numBatchesTracked = this.addBuffer('numBatchesTracked', tf.scalar(0, 'int32'));
  }

  /** `[..., C] -> [..., C]` (rank 2 to 4). */
  forward(x: Tensor): Tensor {
    if (x.rank < 2 || x.rank > 4) throw new Error(`BatchNorm expects [B, C] or [B, H, W, C], got shape [${x.shape}]`);
    expectChannels('BatchNorm', x, this.numFeatures);
    return tf.tidy(() => {
      if (!this.training) return this.normalize(x, this.runningMean, this.runningVar);
      const reduceAxes = x.shape.slice(0, -1).map((_, i) => i);
      if (this.batchMoments === BatchNorm.prototype.batchMoments) {
        // This batch's own statistics: the fused kernel (two passes each way on the native
        // engine; the same tfjs composition as below otherwise).
        const count = x.size / this.numFeatures;
        this.checkCount(count, x);
        const { y, mean, variance } = batchNormTraining(x, this.weight, this.bias, this.eps);
        this.updateRunningStats(mean, variance, count);
        return y;
      }
      const { mean, variance, count } = this.batchMoments(x, reduceAxes);
      this.checkCount(count, x);
      this.updateRunningStats(mean, variance, count);
      return this.normalize(x, mean, variance);
    });
  }

  private checkCount(count: number, x: Tensor): void {
    if (count < 2) {
      throw new Error(`BatchNorm in training mode needs more than 1 value per channel, got input shape [${x.shape}]`);
    }
  }

  /**
   * Per-feature mean and biased variance of `x` over `reduceAxes` (all axes but the
   * last), differentiable. Override to compute them differently (e.g. over all ranks).
   */
  protected batchMoments(x: Tensor, reduceAxes: number[]): BatchMoments {
    const { mean, variance } = tf.moments(x, reduceAxes);
    const count = reduceAxes.reduce((n, axis) => n * x.shape[axis], 1);
    return { mean, variance, count };
  }

  /** `(x - mean) / sqrt(variance + eps) · weight + bias`, with `[C]` statistics. */
  private normalize(x: Tensor, mean: Tensor, variance: Tensor): Tensor {
    // tfjs's gradient tape fails on a missing batch-norm input: without affine parameters,
    // pass the identity transform explicitly.
    const scale = this.weight ?? tf.onesLike(mean);
    const offset = this.bias ?? tf.zerosLike(mean);
    return tf.batchNorm(x, mean as tf.Tensor1D, variance as tf.Tensor1D, offset as tf.Tensor1D, scale as tf.Tensor1D, this.eps);
  }

  private updateRunningStats(mean: Tensor, variance: Tensor, count: number): void {
    const m = this.momentum;
    withoutGradientTape(() =>
      tf.tidy(() => {
        this.runningMean.assign(tf.add(tf.mul(this.runningMean, 1 - m), tf.mul(mean, m)));
        const unbiased = tf.mul(variance, count / (count - 1));
        this.runningVar.assign(tf.add(tf.mul(this.runningVar, 1 - m), tf.mul(unbiased, m)));
        this.numBatchesTracked.assign(tf.add(this.numBatchesTracked, tf.scalar(1, 'int32')));
      }),
    );
  }
}

/** Rectified linear unit, elementwise: any shape to the same shape. */
export class ReLU extends Layer {
  forward(x: Tensor): Tensor {
    return tf.relu(x);
  }
}

/**
 * Gaussian error linear unit, elementwise (PyTorch's default `nn.GELU()`, the exact erf form):
 * `x * Φ(x) = 0.5 x (1 + erf(x / √2))`, any shape to the same shape.
 */
export class GELU extends Layer {
  forward(x: Tensor): Tensor {
    return gelu(x);
  }
}

export { gelu };

/** Flattens everything but the batch axis: `[B, ...] -> [B, prod(...)]` (NHWC order). */
export class Flatten extends Layer {
  forward(x: Tensor): Tensor {
    return tf.reshape(x, [x.shape[0], -1]);
  }
}

/** Global average pooling over height and width: `[B, H, W, C] -> [B, C]`. */
export class GlobalAvgPool extends Layer {
  forward(x: Tensor): Tensor {
    expectRank('GlobalAvgPool', x, 4, '[B, H, W, C]');
    return tf.mean(x, [1, 2]);
  }
}

/**
 * Max pooling with PyTorch's semantics: `[B, H, W, C] -> [B, H', W', C]`, with
 * `H' = floor((H + 2·padding - kernel) / stride) + 1`. Padded positions never win (they
 * count as -Infinity), as in `nn.MaxPool2d`; e.g. ResNet's `MaxPool2d(3, 2, 1)`.
 */
export class MaxPool2d extends Layer {
  constructor(
    readonly kernel: number,
    readonly stride: number = kernel,
    readonly padding: number = 0,
  ) {
    super();
    if (padding > kernel / 2) {
      throw new Error(`MaxPool2d: padding ${padding} must be at most half the kernel ${kernel}`);
    }
  }

  forward(x: Tensor): Tensor {
    expectRank('MaxPool2d', x, 4, '[B, H, W, C]');
    return tf.maxPool(x as tf.Tensor4D, this.kernel, this.stride, this.padding);
  }
}

/** Returns (a new handle to) its input: any shape to the same shape. */
export class Identity extends Layer {
  forward(x: Tensor): Tensor {
    return tf.clone(x);
  }
}

/**
 * Layers applied in order; children are named `'0'`, `'1'`, ... (as in PyTorch). Input and
 * output shapes are those of the first and last layer.
 */
export class Sequential extends Layer {
  constructor(...layers: Layer[]) {
    super();
    layers.forEach((layer, i) => this.addModule(String(i), layer));
  }

  forward(x: Tensor): Tensor {
    return tf.tidy(() => this.namedChildren().reduce((h, [name, child]) => asLayer(this, name, child).forward(h), x));
  }
}

export interface GroupNormOptions {
  /** Added to the variance before the square root (default 1e-5, PyTorch's). */
  eps?: number;
  /** Learn a per-channel scale `weight` (ones) and shift `bias` (zeros) (default true). */
  affine?: boolean;
}

/**
 * Group normalisation (Wu & He 2018) with PyTorch's `nn.GroupNorm(numGroups, numChannels)`
 * semantics, channels last: `[B, C] -> [B, C]`, `[B, L, C] -> [B, L, C]` or
 * `[B, H, W, C] -> [B, H, W, C]`.
 *
 * The C channels are split into `numGroups` consecutive groups of C/G channels; each sample is
 * normalised per group with the mean and BIASED variance over (H, W, C/G) of that sample
 * alone: `(x − mean) / sqrt(var + eps)`, then scaled and shifted per channel:
 * `· weight[c] + bias[c]`. No running statistics and no train/eval difference, and, unlike
 * batch norm, a sample's output does not depend on the other samples of the batch (so a batch
 * can be processed in chunks, as the gradient cache does).
 *
 * `GroupNorm(1, C)` is the "layer norm" of convolutional networks (statistics over H, W and
 * all C per sample); `GroupNorm(C, C)` is instance norm. Parameters `weight` and `bias` `[C]`.
 */
export class GroupNorm extends Layer {
  readonly eps: number;
  readonly weight: Variable | undefined;
  readonly bias: Variable | undefined;

  constructor(
    readonly numGroups: number,
    readonly numChannels: number,
    options: GroupNormOptions = {},
  ) {
    super();
    if (!(Number.isInteger(numGroups) && numGroups >= 1 && Number.isInteger(numChannels) && numChannels >= 1)) {
      throw new Error(`GroupNorm: numGroups (${numGroups}) and numChannels (${numChannels}) must be positive integers`);
    }
    if (numChannels % numGroups !== 0) {
      throw new Error(`GroupNorm: numChannels (${numChannels}) must be divisible by numGroups (${numGroups})`);
    }
    this.eps = options.eps ?? 1e-5;
    const affine = options.affine ?? true;
    this.weight = affine ? this.addParameter('weight', tf.ones([numChannels])) : undefined;
    this.bias = affine ? this.addParameter('bias', tf.zeros([numChannels])) : undefined;
  }

  /** `[B, ..., C] -> [B, ..., C]` (rank 2 to 4, channels last). */
  forward(x: Tensor): Tensor {
    if (x.rank < 2 || x.rank > 4) throw new Error(`GroupNorm expects [B, C] or [B, H, W, C], got shape [${x.shape}]`);
    expectChannels('GroupNorm', x, this.numChannels);
    return groupNorm(x, this.numGroups, this.weight, this.bias, this.eps);
  }
}

export interface LayerNormOptions {
  /** Added to the variance before the square root (default 1e-5, PyTorch's). */
  eps?: number;
  /** Learn a per-feature scale `weight` (ones) and shift `bias` (zeros) (default true). */
  affine?: boolean;
}

/**
 * Layer normalisation over the LAST axis, PyTorch's `nn.LayerNorm(normalizedShape)` with an
 * integer shape: `[..., C] -> [..., C]`. Each row (each position, for a `[B, H, W, C]` input)
 * is normalised with its own mean and biased variance over its C features, then
 * `· weight + bias` per feature. For `[B, C]` it equals `GroupNorm(1, C)`; for convolutional
 * feature maps the usual "layer norm" over (H, W, C) is `GroupNorm(1, C)`, not this (this one
 * is per pixel, as in ConvNeXt). Parameters `weight` and `bias` `[C]`.
 */
export class LayerNorm extends Layer {
  readonly eps: number;
  readonly weight: Variable | undefined;
  readonly bias: Variable | undefined;

  constructor(
    readonly normalizedShape: number,
    options: LayerNormOptions = {},
  ) {
    super();
    if (!(Number.isInteger(normalizedShape) && normalizedShape >= 1)) {
      throw new Error(`LayerNorm: normalizedShape (${normalizedShape}) must be a positive integer`);
    }
    this.eps = options.eps ?? 1e-5;
    const affine = options.affine ?? true;
    this.weight = affine ? this.addParameter('weight', tf.ones([normalizedShape])) : undefined;
    this.bias = affine ? this.addParameter('bias', tf.zeros([normalizedShape])) : undefined;
  }

  /** `[..., C] -> [..., C]` (rank >= 1). */
  forward(x: Tensor): Tensor {
    if (x.rank < 1) throw new Error(`LayerNorm expects [..., ${this.normalizedShape}], got a scalar`);
    expectChannels('LayerNorm', x, this.normalizedShape);
    // Every position is a sample with one group of C features.
    return tf.tidy(() => tf.reshape(groupNorm(tf.reshape(x, [-1, this.normalizedShape]), 1, this.weight, this.bias, this.eps), x.shape));
  }
}

/** Which normalisation layer a network uses: batch norm, group norm, or layer norm. */
export type NormKind = 'batch' | 'group' | 'layer';

/** Accepted values of {@link NormKind}, e.g. for `--norm`. */
export const NORM_KINDS: readonly NormKind[] = Object.freeze(['batch', 'group', 'layer'] as const);

/** The number of groups group norm uses by default: 32, as in Wu & He (2018), when it fits. */
export const DEFAULT_NORM_GROUPS = 32;

/**
 * The number of groups of a default group norm over `channels` channels: the largest divisor
 * G of `channels` with G ≤ 32 and at least `minChannelsPerGroup` channels per group.
 * So 32 for every multiple of 32 (all widths of the built-in ResNets: 32..2048), e.g. 25 for
 * 100, 16 for 16, 1 for a prime above 32. Feature vectors (`[B, C]`, no spatial extent) ask for
 * `minChannelsPerGroup = 2`, since a group of one value normalises to 0: 16 groups for 32.
 */
export function defaultNumGroups(channels: number, minChannelsPerGroup = 1): number {
  for (let g = Math.min(DEFAULT_NORM_GROUPS, Math.floor(channels / minChannelsPerGroup)); g > 1; g--) {
    if (channels % g === 0) return g;
  }
  return 1;
}

/**
 * A normalisation layer over `channels` channels of the given kind:
 * - `'batch'`: {@link BatchNorm};
 * - `'group'`: {@link GroupNorm} with {@link defaultNumGroups} groups (`spatial` false: at least
 *   two channels per group);
 * - `'layer'`: for feature maps (`spatial`, `[B, H, W, C]`) `GroupNorm(1, C)`, statistics over
 *   (H, W, C) per sample; for feature vectors (`[B, C]`) {@link LayerNorm} over C.
 * `spatial`: whether the layer sees `[B, H, W, C]` feature maps (true) or `[B, C]` vectors.
 */
export function normLayer(kind: NormKind, channels: number, spatial: boolean): Layer {
  switch (kind) {
    case 'batch':
      return new BatchNorm(channels);
    case 'group':
      return new GroupNorm(defaultNumGroups(channels, spatial ? 1 : 2), channels);
    case 'layer':
      return spatial ? new GroupNorm(1, channels) : new LayerNorm(channels);
    default:
      throw new Error(`unknown normalisation '${String(kind)}'; expected ${NORM_KINDS.join(' | ')}`);
  }
}
