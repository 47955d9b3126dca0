import { Layer } from '../core/module.js';
import type { Rng } from '../core/random.js';

/**
 * A feature extractor: images `[B, H, W, C]` (NHWC) to features `[B, featureDim]`.
 * Methods put projectors and classifiers on top of it.
 */
export abstract class Backbone extends Layer {
  /** Size of the feature vector of one image. */
  abstract readonly featureDim: number;
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
}
