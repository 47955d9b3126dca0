/**
 * SwAV's Sinkhorn-Knopp assignments (Caron et al. 2020; solo-learn's `SinkhornKnopp`), over
 * the global batch (docs/design.md contract 7).
 */
import { invalidValue } from '../core/errors.js';
import { tf } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { rankGroup, reduceOverRanks } from './global-batch.js';
import { checkPositive } from './ops.js';

export interface SinkhornOptions {
  /** Entropy regularisation ε > 0: the scores are turned into exp(score / ε) (solo-learn: 0.05). */
  epsilon: number;
  /** Number of prototype-then-sample normalisation rounds, an integer ≥ 1 (solo-learn: 3). */
  iterations: number;
  /**
   * Scores `[S, K]` of rows every rank holds identically (SwAV's queue of past embeddings
   * against the prototypes): part of the matrix being normalised, counted once however many
   * ranks there are, and not returned (solo-learn: `sk(cat(p, p_queue))[:B]`).
   */
  queueScores?: tf.Tensor2D;
}

/** solo-learn's SwAV defaults: ε = 0.05, 3 iterations. */
export const SINKHORN_DEFAULTS: Readonly<Omit<SinkhornOptions, 'queueScores'>> = Object.freeze({ epsilon: 0.05, iterations: 3 });

/**
 * Sinkhorn-Knopp: soft assignments of samples to prototypes with equal prototype shares.
 * Starting from `Q = exp(scores / ε)` over the M rows of the global batch (every rank's rows,
 * plus the S queue rows), each iteration divides every prototype column by its sum over all M
 * rows (each prototype's total becomes 1/K) and then every row by its sum (each sample's total
 * becomes 1/M); the result is scaled so that every row sums to 1.
 *
 * - `scores`: `[B, K]` this rank's scores (cosine similarities to the K prototypes). B may
 *   differ between ranks and may be 0 (DINOv2's masked patches: each rank holds its own
 *   count): nothing counts the rows, the column sums are all-reduced and the row normalisation
 *   is local (the reference's division by the global count is a constant factor, cancelled).
 * - Returns `[B, K]` float32, this rank's rows of the one-process Q: a constant (as solo-learn's
 *   `torch.no_grad`): `scores` and `queueScores` get exactly zero gradient through it.
 *
 * Exact over W ranks: the prototype sums `[K]` are all-reduced (sum) at every iteration, and
 * the stabilising per-prototype maximum `[K]` once (max), through the process group
 * (`reduceOverRanks`): iterations + 1 all-reduces, none in backward. A per-rank Sinkhorn
 * (solo-learn with `world_size` 1 under DDP) equalises the prototypes' shares within each
 * rank's batch instead, which changes the assignments.
 *
 * Computed on the device in float32 tensor ops (no read back with one process), with the same
 * result as solo-learn's in exact arithmetic: solo-learn's first division by the total and its
 * divisions by K and M are constant factors that the next normalisation cancels, and so is
 * subtracting each prototype's maximum score before exp (which keeps exp(score / ε) finite
 * for small ε). Q is kept as log Q: the row normalisation is a log-sum-exp, so a row whose
 * scores all lie far below the prototypes' maxima (exp underflows, even in float64, for
 * small ε) still gets its assignments; the column sums are taken of exp(log Q), which cannot
 * all underflow (each prototype keeps an entry ≥ 1/(M·K) after the first round). A score that
 * is not finite gives NaN.
 */
export function sinkhornKnopp(scores: tf.Tensor2D, options: SinkhornOptions = SINKHORN_DEFAULTS, group?: ProcessGroup): tf.Tensor2D {
  const { epsilon, iterations, queueScores } = options;
  checkScores('scores', scores, undefined);
  if (queueScores !== undefined) checkScores('queueScores', queueScores, scores.shape[1]);
  checkPositive('epsilon', epsilon);
  if (!(Number.isInteger(iterations) && iterations >= 1)) throw invalidValue('iterations', iterations, 'an integer >= 1');
  const layout = rankGroup('sinkhornKnopp', group);
  /** `[B, K]` Q from this rank's scores and the queue's, in ops no gradient tape records. */
  const assignments = (local: tf.Tensor2D, queue: tf.Tensor2D | undefined): tf.Tensor2D =>
    tf.tidy(() => {
      // log Q = (s − m_c) / ε, m_c: prototype c's largest score over the global batch and the queue
      // (a rank without rows takes part with −∞: the max of no rows).
      const localMax = local.shape[0] > 0 ? tf.max(local, 0) : tf.fill([local.shape[1]], -Infinity);
      let max = reduceOverRanks(localMax, layout, 'max'); // [K]
      if (queue) max = tf.maximum(max, tf.max(queue, 0));
      let logQ = tf.div(tf.sub(local, max), epsilon); // [B, K]
      let logQueue = queue ? tf.div(tf.sub(queue, max), epsilon) : undefined; // [S, K]
      for (let it = 0; it < iterations; it++) {
        // Prototype columns: Σ over the local rows, all-reduced, plus the queue rows (the same on every rank).
        let sums = reduceOverRanks(tf.sum(tf.exp(logQ), 0), layout, 'sum'); // [K]
        if (logQueue) sums = tf.add(sums, tf.sum(tf.exp(logQueue), 0));
        const logSums = tf.log(sums);
        // Sample rows: local, as log-sum-exp.
        logQ = normaliseRows(tf.sub(logQ, logSums));
        logQueue = logQueue ? normaliseRows(tf.sub(logQueue, logSums)) : undefined;
      }
      return tf.exp(logQ) as tf.Tensor2D;
    });
  // A constant: exactly zero gradient for the scores and the queue's, through one custom-gradient
  // node, so that a gradient tape keeps none of the iterations' [rows, K] intermediates for the
  // backward pass (gigabytes for DINOv2's masked patches at its defaults).
  const inputs = queueScores ? [scores, queueScores] : [scores];
  const constant = tf.customGrad((...args: Array<tf.Tensor | ((save: tf.Tensor[]) => void)>) => {
    const [local, queue] = args.slice(0, inputs.length) as tf.Tensor2D[];
    return { value: assignments(local!, queue), gradFunc: () => inputs.map((x) => tf.zerosLike(x)) };
  });
  return constant(...inputs) as tf.Tensor2D;
}

/**
 * `[rows, K]` log-values minus each row's log-sum-exp (the rows of exp sum to 1). The row's
 * maximum is subtracted first, on its own: far below 0 (a row far from every prototype),
 * subtracting a rounded log-sum-exp would lose the float32 digits of the small differences.
 */
function normaliseRows(logQ: tf.Tensor): tf.Tensor {
  const shifted = tf.sub(logQ, tf.max(logQ, 1, true));
  return tf.sub(shifted, tf.log(tf.sum(tf.exp(shifted), 1, true)));
}

/** Checks a float32 `[rows, K]` score matrix (K = `k` if given). */
function checkScores(name: string, x: tf.Tensor, k: number | undefined): void {
  if (x.rank !== 2 || x.shape[1]! < 1) throw new Error(`sinkhornKnopp: ${name} must be [rows, K], got shape [${x.shape.join(', ')}]`);
  if (x.dtype !== 'float32') throw new Error(`sinkhornKnopp: ${name} must be float32, got ${x.dtype}`);
  if (k !== undefined && x.shape[1] !== k) throw new Error(`sinkhornKnopp: ${name} [${x.shape.join(', ')}] must have K = ${k} columns, as scores`);
}
