/**
 * The problems of the multi-process tiled NT-Xent test, shared by the test and its worker:
 * a seeded global batch of N = W·B rows per view, of which rank r holds rows r·B .. r·B+B−1.
 */
import { Rng } from '../../../src/core/random.js';
import { tf } from '../../../src/core/tf.js';

export interface TiledProblem {
  /** B: rows per view on each rank. */
  localBatch: number;
  dim: number;
  temperature: number;
  tileSize: number;
  seed: number;
}

/** The global views `[N, D]` ×2 of a problem for `worldSize` ranks (view 2 a noisy copy of view 1). */
export function globalViews(p: TiledProblem, worldSize: number): [tf.Tensor2D, tf.Tensor2D] {
  const rng = new Rng(p.seed);
  const n = worldSize * p.localBatch;
  const z1 = rng.normalArray(n * p.dim);
  const noise = rng.normalArray(n * p.dim, 0, 0.7);
  const z2 = z1.map((x, i) => 1.5 * x + noise[i]!);
  return [tf.tensor2d(z1, [n, p.dim]), tf.tensor2d(z2, [n, p.dim])];
}
