/** The IterNorm problem the SyncIterNorm test and its workers build from a seed. */
import { Rng } from '../../../src/core/random.js';
import { tf, type Tensor } from '../../../src/core/tf.js';

export interface IterNormProblem {
  /** N: rows of the global batch (a multiple of the world size). */
  batch: number;
  features: number;
  seed: number;
}

/** Global input `[N, F]` (correlated, shifted features) and upstream weights `[N, F]`. */
export function iterNormProblem(p: IterNormProblem): { x: Tensor; upstream: Tensor } {
  const rng = new Rng(p.seed);
  const mix = tf.add(tf.eye(p.features), tf.mul(tf.tensor2d(rng.normalArray(p.features * p.features), [p.features, p.features]), 0.5));
  const x = tf.add(tf.matMul(tf.tensor2d(rng.normalArray(p.batch * p.features), [p.batch, p.features]), mix), tf.tensor1d(rng.normalArray(p.features)));
  return { x, upstream: tf.tensor2d(rng.normalArray(p.batch * p.features), [p.batch, p.features]) };
}
