import { Layer } from '../core/module.js';
import type { NormKind } from '../core/layers.js';
import type { Rng } from '../core/random.js';
import type { Tensor } from '../core/tf.js';

/**
 * A feature extractor: images `[B, H, W, C]` (NHWC) to features `[B, featureDim]`.
 * Methods put projectors and classifiers on top of it.
 */
export abstract class Backbone extends Layer {
  /** Size of the feature vector of one image. */
  abstract readonly featureDim: number;
  /**
   * The one input side it takes (S for `[B, S, S, C]`), or undefined when it takes any size
   * (convolutions and global average pooling: crops smaller than the image, multi-crop).
   */
  readonly inputSize: number | undefined = undefined;
}

/**
 * A backbone whose features are the global average of a spatial map (the ResNets): it also
 * gives the map before that pooling, for losses on local features (VICRegL).
 */
export interface SpatialBackbone {
  /** `[B, H, W, C] -> [B, h, w, featureDim]`: the last stage's output before the global average pooling. */
  featureMap(x: Tensor): Tensor;
}

/** Whether `backbone` gives its feature maps ({@link SpatialBackbone}). */
export function hasFeatureMaps(backbone: Backbone): backbone is Backbone & SpatialBackbone {
  return typeof (backbone as Partial<SpatialBackbone>).featureMap === 'function';
}

/** What every backbone factory receives. */
export interface BackboneOptions {
  /** Channels of the input images (1 for grayscale, 3 for RGB). */
  inChannels: number;
  /** Height and width of the (square) input images. */
  imageSize: number;
  /** ResNets: 3x3 stride-1 first convolution and no max-pool, for 32x32 images (solo-learn's CIFAR stem). */
  cifarStem?: boolean;
  /** Source of the initial weights. */
  rng: Rng;
  /** `mlp`: widths of the hidden layers (default [256, 256]). */
  mlpHidden?: number[];
  /**
   * Normalisation layers (default `'batch'`), under the same child names (`bn1`, `bn2`, ...,
   * `downsample.1`, as torchvision names them whatever its `norm_layer`):
   * - `'batch'`: batch norm (couples the samples of a batch in training mode);
   * - `'group'`: group norm with `defaultNumGroups(C)` groups (32 for every width of the
   *   built-in ResNets; the largest divisor of C up to 32, and for the `mlp`'s feature vectors
   *   at least two channels per group);
   * - `'layer'`: `GroupNorm(1, C)` (per sample over H, W, C) in convolutional nets, `LayerNorm(C)`
   *   in the `mlp`.
   * Group and layer norm make every sample's output independent of the rest of the batch,
   * which the gradient cache needs (a chunked forward then equals the full one).
   */
  norm?: NormKind;
  /** Vision Transformers: side of the square patches in pixels (default 4, for 28-32 px images). */
  patchSize?: number;
}
