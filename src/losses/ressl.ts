/**
 * The ReSSL loss (Zheng et al. 2021; solo-learn's `ressl_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout } from './global-batch.js';
import { checkPair, checkPositive, checkQueue, l2NormalizeRows } from './ops.js';

export interface ResslOptions {
  /** Temperature of the query's distribution over the queue, > 0 (solo-learn: 0.1). */
  temperatureQ: number;
  /** Temperature of the key's (target) distribution, > 0 and sharper (solo-learn: 0.04). */
  temperatureK: number;
}

/**
 * ReSSL: the cross-entropy between the key's and the query's relation distributions over a
 * queue, `−mean_i Σ_j softmax(k_i·queue_jᵀ / τk) · log_softmax(q_i·queue_jᵀ / τq)`.
 *
 * - `q`: `[B, D]` online embeddings of one view; `k`: `[B, D]` momentum embeddings of the
 *   other view, *detached* (gradient exactly 0). Both are L2-normalised here.
 * - `queue`: `[K, D]` past keys, a constant (gradient exactly 0), its rows used as given.
 * - Returns the mean over the B local rows: a scalar `[]`.
 *
 * `group`: no global batch is needed (same queue on every rank), so loss_r is the mean over
 * rank r's rows and the mean over ranks is the global mean; no collective runs at any W
 * (scale convention: src/distributed/collectives.ts).
 */
export function resslLoss(q: tf.Tensor2D, k: tf.Tensor2D, queue: tf.Tensor2D, options: ResslOptions, group?: ProcessGroup): Scalar {
  checkPair('resslLoss', ['q', 'k'], q, k);
  checkQueue('resslLoss', queue, q.shape[1]);
  checkPositive('temperatureQ', options.temperatureQ);
  checkPositive('temperatureK', options.temperatureK);
  batchLayout('resslLoss', q.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => {
    const constQueue = detach(queue);
    const logitsQ = tf.div(tf.matMul(l2NormalizeRows(q), constQueue, false, true), options.temperatureQ); // [B, K]
    const logitsK = tf.div(tf.matMul(l2NormalizeRows(detach(k)), constQueue, false, true), options.temperatureK); // [B, K]
    // The teacher's softmax as exp(logSoftmax): tf.softmax on the CPU backend takes seconds at K = 65536.
    const perRow = tf.sum(tf.mul(tf.exp(tf.logSoftmax(logitsK, 1)), tf.logSoftmax(logitsQ, 1)), 1); // [B]
    return tf.neg(tf.mean(perRow)) as Scalar;
  });
}
