import type { Rng } from './random.js';
import { tf, type Tensor } from './tf.js';

/** Fan-in of a weight: `[in, out]` dense or `[kh, kw, in, out]` convolution (tfjs layouts). */
export function fanIn(shape: readonly number[]): number {
  return shape.length === 2 ? shape[0] : shape.slice(0, -1).reduce((a, b) => a * b, 1);
}

/** Fan-out of a weight: `[in, out]` dense or `[kh, kw, in, out]` convolution. */
export function fanOut(shape: readonly number[]): number {
  return shape.length === 2 ? shape[1] : shape[0] * shape[1] * shape[shape.length - 1];
}

/** He normal, fan-out mode, ReLU gain (torchvision's ResNet conv init): N(0, 2 / fanOut). */
export function kaimingNormalFanOut(shape: number[], rng: Rng): Tensor {
  const std = Math.sqrt(2 / fanOut(shape));
  return tf.tensor(rng.normalArray(sizeOf(shape), 0, std), shape);
}

/** PyTorch's default for Linear/Conv weights and biases: U(-1/sqrt(fanIn), 1/sqrt(fanIn)). */
export function uniformFanIn(shape: number[], fan: number, rng: Rng): Tensor {
  const bound = 1 / Math.sqrt(fan);
  return tf.tensor(rng.uniformArray(sizeOf(shape), -bound, bound), shape);
}

function sizeOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/**
 * timm's `trunc_normal_(std=std)` (ViT linear weights, position embeddings, DINO's head): N(0, std²) with
 * draws outside the ABSOLUTE bounds [lo, hi] (default ±2, timm's) redrawn.
 */
export function truncNormal(shape: number[], std: number, rng: Rng, lo = -2, hi = 2): Tensor {
  const values = new Float32Array(sizeOf(shape));
  for (let i = 0; i < values.length; i++) {
    let v = std * rng.normal();
    while (v < lo || v > hi) v = std * rng.normal();
    values[i] = v;
  }
  return tf.tensor(values, shape);
}
