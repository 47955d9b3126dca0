/**
 * The MoCo v2+ loss (He et al. 2020, Chen et al. 2020; solo-learn's `mocov2plus_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { withoutGradientTape } from '../core/layers.js';
import { batchLayout } from './global-batch.js';
import { checkPair, checkPositive, checkQueue, l2NormalizeRows } from './ops.js';

export interface MocoOptions {
  /** Softmax temperature τ > 0 (solo-learn's MoCo v2+ recipes: 0.2). */
  temperature: number;
}

/**
 * MoCo v2+: InfoNCE of each query against its key (the positive) and a queue of negatives.
 *
 * - `query`: `[B, D]` online embeddings of view 1; `key`: `[B, D]` momentum embeddings of
 *   view 2. Both are L2-normalised here. `key` is *detached* (gradient exactly 0).
 * - `queue`: `[K, D]` past keys, a constant (gradient exactly 0), its rows used as given (the
 *   caller's queue holds normalised keys).
 * - logits `[B, 1 + K]` = [q_i·k_i, q_i·queueᵀ] / τ; cross-entropy with target column 0.
 * - Returns the mean over the B local rows: a scalar `[]`.
 *
 * `group`: no global batch is needed (the queue is the same on every rank, the keys are this
 * rank's), so loss_r is the mean over rank r's rows and mean_r loss_r is the global mean;
 * no collective runs at any W (scale convention: src/distributed/collectives.ts).
 */
export function mocoLoss(query: tf.Tensor2D, key: tf.Tensor2D, queue: tf.Tensor2D, options: MocoOptions, group?: ProcessGroup): Scalar {
  checkPair('mocoLoss', ['query', 'key'], query, key);
  checkQueue('mocoLoss', queue, query.shape[1]);
  checkPositive('temperature', options.temperature);
  batchLayout('mocoLoss', query.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => {
    const q = l2NormalizeRows(query);
    const k = l2NormalizeRows(detach(key));
    const positive = tf.sum(tf.mul(q, k), 1, true); // [B, 1]
    const negatives = tf.matMul(q, detach(queue), false, true); // [B, K]
    // log p(positive) = p − logsumexp([p, n_1..n_K]) for the logits p, n / τ. Computed without
    // a [B, 1 + K] concat, and with the stabilising row maximum computed off the gradient tape
    // (the value and the gradient do not depend on it): on the CPU backend, the backward passes
    // of a column concat and of a row max (even a detached one) cost seconds at K = 32768.
    const p = tf.div(positive, options.temperature); // [B, 1]
    const n = tf.div(negatives, options.temperature); // [B, K]
    const top = withoutGradientTape(() => tf.maximum(p, tf.max(n, 1, true))); // [B, 1], a constant
    const lse = tf.add(top, tf.log(tf.add(tf.exp(tf.sub(p, top)), tf.sum(tf.exp(tf.sub(n, top)), 1, true)))); // [B, 1]
    return tf.neg(tf.mean(tf.sub(p, lse))) as Scalar;
  });
}
