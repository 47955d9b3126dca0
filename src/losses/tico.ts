/**
 * The TiCo loss with its running covariance (Zhu, Liu & Huang 2022; lightly's `TiCoLoss`).
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout, sumOverRanks } from './global-batch.js';
import { checkPair, l2NormalizeRows } from './ops.js';

export interface TicoOptions {
  /** Momentum β of the running covariance, in [0, 1) (lightly: 0.9). */
  beta: number;
  /** Weight ρ ≥ 0 of the covariance-contrast term (lightly: 20). */
  rho: number;
}

/** lightly's `TiCoLoss` defaults. */
export const TICO_DEFAULTS: Readonly<TicoOptions> = Object.freeze({ beta: 0.9, rho: 20 });

/** The loss and the running covariance after this batch. */
export interface TicoResult {
  /** Scalar `[]`. */
  loss: Scalar;
  /** `[D, D]`: `β · covariance + (1 − β) · B` with B the global batch's `ẑaᵀ ẑa / N` (no gradient). */
  covariance: tf.Tensor2D;
}

/**
 * TiCo: transformation invariance plus covariance contrast,
 * `1 − mean_i ⟨ẑa_i, ẑb_i⟩ + ρ · mean_i ẑa_i C ẑa_iᵀ` with `C = β · covariance + (1 − β) · ẑaᵀ ẑa / N`
 * (ẑ: rows L2-normalised; the gradient flows through C's batch part, as in lightly and the
 * official code, not through the running part).
 *
 * - `za`: `[B, D]` this rank's first-view embeddings (the online branch); `zb`: `[B, D]` the
 *   second view's (lightly's benchmark: the momentum branch, already detached by the caller;
 *   not detached here).
 * - `covariance`: `[D, D]` the running covariance (state; zeros at the start, as lightly's
 *   `C = None`), a constant (gradient exactly 0).
 * - Returns the loss and the new covariance C (a new tensor; the caller keeps it).
 *
 * `group`: `ẑaᵀ ẑa` is summed over ranks (`sumOverRanks`, differentiable: one all-reduce
 * forward, one backward) and divided by the global N, so C is the global batch's on every
 * rank; loss_r averages both terms over rank r's rows, so mean_r loss_r is the global loss.
 * lightly's `TiCoLoss(gather_distributed=False)` (its default) uses each GPU's batch instead.
 */
export function ticoLoss(za: tf.Tensor2D, zb: tf.Tensor2D, covariance: tf.Tensor2D, options: TicoOptions = TICO_DEFAULTS, group?: ProcessGroup): TicoResult {
  checkPair('ticoLoss', ['za', 'zb'], za, zb);
  const d = za.shape[1];
  if (covariance.rank !== 2 || covariance.shape[0] !== d || covariance.shape[1] !== d || covariance.dtype !== 'float32') {
    throw new Error(`ticoLoss: covariance must be float32 [${d}, ${d}], got ${covariance.dtype} [${covariance.shape.join(', ')}]`);
  }
  const { beta, rho } = options;
  if (!(Number.isFinite(beta) && beta >= 0 && beta < 1)) throw invalidValue('beta', beta, 'a number in [0, 1)');
  if (!(Number.isFinite(rho) && rho >= 0)) throw invalidValue('rho', rho, 'a number >= 0');
  const layout = batchLayout('ticoLoss', za.shape[0], group);
  return tf.tidy(() => {
    const a = l2NormalizeRows(za);
    const b = l2NormalizeRows(zb);
    const batchPart = tf.div(sumOverRanks(tf.matMul(a, a, true, false), layout), layout.globalBatch); // [D, D]
    const c = tf.add(tf.mul(detach(covariance), beta), tf.mul(batchPart, 1 - beta)) as tf.Tensor2D;
    const invariance = tf.sub(1, tf.mean(tf.sum(tf.mul(a, b), 1)));
    const contrast = tf.mean(tf.sum(tf.mul(tf.matMul(a, c), a), 1));
    const loss = tf.add(invariance, tf.mul(contrast, rho)) as Scalar;
    return { loss, covariance: detach(c) as tf.Tensor2D };
  });
}
