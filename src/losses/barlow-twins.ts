/**
 * The Barlow Twins loss (Zbontar et al. 2021; solo-learn's `barlow_loss_func`), with
 * global-batch statistics (docs/design.md contract 4).
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, sumOverRanks, type BatchLayout } from './global-batch.js';
import { checkPair, diagonal, offDiagonalSumOfSquares } from './ops.js';

export interface BarlowTwinsOptions {
  /** Weight λ of the off-diagonal (redundancy-reduction) term. */
  lambd: number;
  /** Factor applied to the whole loss. */
  scale: number;
  /** Added to the batch variance before the square root; default 1e-5 (BatchNorm1d's). */
  eps?: number;
}

/** solo-learn's defaults: λ = 0.0051, scale 0.1, eps 1e-5. */
export const BARLOW_TWINS_DEFAULTS: Readonly<Required<BarlowTwinsOptions>> = Object.freeze({
  lambd: 0.0051,
  scale: 0.1,
  eps: 1e-5,
});

/** The loss and its two unweighted parts (for logging). All scalars `[]`. */
export interface BarlowTwinsTerms {
  /** `scale * (onDiag + lambd * offDiag)`. */
  loss: Scalar;
  /** Σ_i (1 − c_ii)². */
  onDiag: Scalar;
  /** Σ_{i≠j} c_ij². */
  offDiag: Scalar;
}

/**
 * Barlow Twins: `scale * (Σ_i (1 − c_ii)² + λ Σ_{i≠j} c_ij²)` with the cross-correlation
 * `c = z1nᵀ z2n / N` `[D, D]`, where each view is standardised per column over the global
 * batch, `zn = (z − mean) / sqrt(var_biased + eps)` (BatchNorm1d without affine).
 *
 * - `z1`, `z2`: `[B, D]` embeddings of the two views. Returns a scalar `[]`, the global loss
 *   (the same value on every rank).
 * - `group` (W ranks, B local rows each, N = W·B): the column sums for the mean, the centred
 *   sums of squares for the variance and the cross-product `z1nᵀ z2n` are partial sums over
 *   local rows passed through `sumOverRanks` (differentiable all-reduce SUM), so the
 *   statistics are those of the global batch and the gradient is exact. Every rank returns
 *   the global loss; each rank's gradient on its rows is then W × the global gradient's rows,
 *   which DDP's averaging divides back out (scale convention: src/distributed/collectives.ts).
 *   Three collectives forward, three backward.
 */
export function barlowTwinsLoss(z1: tf.Tensor2D, z2: tf.Tensor2D, options: BarlowTwinsOptions = BARLOW_TWINS_DEFAULTS, group?: ProcessGroup): Scalar {
  const terms = barlowTwinsLossWithTerms(z1, z2, options, group);
  tf.dispose([terms.onDiag, terms.offDiag]);
  return terms.loss;
}

/** {@link barlowTwinsLoss} with its unweighted on- and off-diagonal sums. */
export function barlowTwinsLossWithTerms(
  z1: tf.Tensor2D,
  z2: tf.Tensor2D,
  options: BarlowTwinsOptions = BARLOW_TWINS_DEFAULTS,
  group?: ProcessGroup,
): BarlowTwinsTerms {
  checkPair('barlowTwinsLoss', ['z1', 'z2'], z1, z2);
  const { lambd, scale } = options;
  const eps = options.eps ?? BARLOW_TWINS_DEFAULTS.eps;
  if (!(Number.isFinite(lambd) && lambd >= 0)) throw invalidValue('lambd', lambd, 'a number >= 0');
  if (!Number.isFinite(scale)) throw invalidValue('scale', scale, 'a finite number');
  if (!(Number.isFinite(eps) && eps >= 0)) throw invalidValue('eps', eps, 'a number >= 0');
  const layout = batchLayout('barlowTwinsLoss', z1.shape[0], group);
  return tf.tidy(() => {
    const n = layout.globalBatch;
    const d = z1.shape[1];
    // Columns are standardised independently: both views at once, one collective per pass.
    const [z1n, z2n] = tf.split(standardizeColumns(tf.concat([z1, z2], 1), eps, layout), [d, d], 1) as [tf.Tensor2D, tf.Tensor2D];
    const c = tf.div(sumOverRanks(tf.matMul(z1n, z2n, true, false), layout), n) as tf.Tensor2D; // [D, D]
    const onDiag = tf.sum(tf.square(tf.sub(1, diagonal(c)))) as Scalar;
    const offDiag = offDiagonalSumOfSquares(c);
    const loss = tf.mul(scale, tf.add(onDiag, tf.mul(lambd, offDiag))) as Scalar;
    return { loss, onDiag, offDiag };
  });
}

/**
 * `(z − mean) / sqrt(var_biased + eps)` per column over the global batch: `[B, D] -> [B, D]`.
 * Two passes (mean, then centred sum of squares), each a local partial sum over rows
 * combined with `sumOverRanks`.
 */
export function standardizeColumns(z: tf.Tensor2D, eps: number, layout: BatchLayout): tf.Tensor2D {
  const n = layout.globalBatch;
  const mean = tf.div(sumOverRanks(tf.sum(z, 0), layout), n); // [D]
  const centred = tf.sub(z, mean); // [B, D]
  const variance = tf.div(sumOverRanks(tf.sum(tf.square(centred), 0), layout), n); // [D], biased
  return tf.mul(centred, tf.rsqrt(tf.add(variance, eps)));
}
