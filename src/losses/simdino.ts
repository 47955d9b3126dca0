/**
 * The SimDINO loss (Wu et al. 2025, "Simplifying DINO via Coding Rate Regularization"; the
 * reference implementation's `MCRLoss` in `simdino/main_dino.py`): DINO without prototypes,
 * an alignment term between the student's and the teacher's L2-normalised features plus a
 * coding-rate term over the global batch.
 */
import { invalidValue } from '../core/errors.js';
import { cholesky } from '../core/linalg.js';
import { detach } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, sumOverRanks, type BatchLayout } from './global-batch.js';
import { checkPair, checkPositive, l2NormalizeRows } from './ops.js';

export interface SimDinoOptions {
  /** ε of the coding rate `½ logdet(I + K/(N ε) ZᵀZ)`, > 0 (the reference: 0.5). */
  eps?: number;
  /** Weight of the alignment (cosine) term (the reference's `coeff`: 1). */
  alignWeight?: number;
}

/** The loss and its two (unweighted) parts. */
export interface SimDinoResult {
  /** `−alignWeight · alignment − codingRate`, scalar `[]`. */
  loss: Scalar;
  /** Mean cosine similarity of the student to the teacher over the pairs of different crops (this rank's rows), `[]`. */
  alignment: Scalar;
  /** The coding rate of the student's global crops over the global batch, scaled by `(K + N) / (K·N)`, `[]`. */
  codingRate: Scalar;
}

/** The reference's default ε of the coding rate. */
export const SIMDINO_EPS = 0.5;

/**
 * SimDINO: with every row L2-normalised (s = student, t = teacher),
 * `loss = −alignWeight · mean over pairs (g, v ≠ g) of mean_i ⟨t_g[i], s_v[i]⟩ − γ · mean_g R(s_g)`,
 * where `R(Z) = ½ logdet(I + K/(N ε) · ZᵀZ)` is the coding rate of the N rows of the global
 * batch of global crop g (computed as `Σ log diag chol(·)`, {@link cholesky}) and
 * `γ = (K + N) / (K·N)` the reference's balancing factor.
 *
 * - `student`: V ≥ 2 tensors `[B, K]`, the student's head outputs of every crop, the G global
 *   crops first.
 * - `teacher`: G tensors `[B, K]` (1 ≤ G ≤ V), the teacher's outputs of the global crops,
 *   constants (detached here, gradient exactly 0).
 * - Returns the loss, the alignment and the coding-rate term (scalars `[]`).
 *
 * `group` (W ranks, N = W·B): the alignment is the mean over this rank's rows (so mean_r is
 * the global one); the Gram matrices `[G, K, K]` of the student's global crops are summed over
 * ranks with the differentiable {@link sumOverRanks} (one all-reduce forward, one backward),
 * so every rank gets the coding rate of the global batch and, through the backward's sum,
 * W × its gradient on its rows (the scale convention of src/distributed/collectives.ts). The
 * reference all-reduces them only with `reduce_cov=1`; its default (0) takes each rank's own
 * Gram matrix, scaled as if it were the global one.
 */
export function simdinoLoss(student: tf.Tensor2D[], teacher: tf.Tensor2D[], options: SimDinoOptions = {}, group?: ProcessGroup): SimDinoResult {
  if (!Array.isArray(student) || student.length < 2)
    throw new Error(`simdinoLoss: needs the student outputs of at least 2 crops, got ${Array.isArray(student) ? student.length : typeof student}`);
  if (!Array.isArray(teacher) || teacher.length < 1 || teacher.length > student.length) {
    throw new Error(
      `simdinoLoss: needs 1 to ${student.length} teacher outputs (one per global crop), got ${Array.isArray(teacher) ? teacher.length : typeof teacher}`,
    );
  }
  student.forEach((s, v) => checkPair('simdinoLoss', ['student[0]', `student[${v}]`], student[0]!, s));
  teacher.forEach((t, g) => checkPair('simdinoLoss', ['student[0]', `teacher[${g}]`], student[0]!, t));
  const eps = options.eps ?? SIMDINO_EPS;
  const alignWeight = options.alignWeight ?? 1;
  checkPositive('eps', eps);
  if (!(Number.isFinite(alignWeight) && alignWeight >= 0)) throw invalidValue('alignWeight', alignWeight, 'a number >= 0');
  const layout = batchLayout('simdinoLoss', student[0]!.shape[0], group);
  return tf.tidy(() => {
    const s = student.map((x) => l2NormalizeRows(x));
    const t = teacher.map((x) => l2NormalizeRows(detach(x)));
    const terms: Scalar[] = [];
    t.forEach((tg, g) => {
      s.forEach((sv, v) => {
        if (v !== g) terms.push(tf.mean(tf.sum(tf.mul(tg, sv), 1)) as Scalar);
      });
    });
    const alignment = tf.div(tf.addN(terms), terms.length) as Scalar;
    const codingRate = globalCodingRate(s.slice(0, t.length), eps, layout);
    const loss = tf.sub(tf.mul(alignment, -alignWeight), codingRate) as Scalar;
    return { loss, alignment, codingRate };
  });
}

/**
 * `γ · mean_g ½ logdet(I + K/(N ε) Σ_ranks Z_gᵀ Z_g)` of G tensors `[B, K]` (the global batch's
 * Gram matrices, summed over ranks differentiably), `γ = (K + N) / (K·N)`: a scalar `[]`.
 */
function globalCodingRate(z: tf.Tensor2D[], eps: number, layout: BatchLayout): Scalar {
  const k = z[0]!.shape[1];
  const n = layout.globalBatch;
  const grams = sumOverRanks(tf.stack(z.map((zg) => tf.matMul(zg, zg, true, false))) as tf.Tensor3D, layout); // [G, K, K]
  const eye = tf.eye(k);
  const factors = cholesky(tf.add(eye, tf.mul(grams, k / (n * eps))) as tf.Tensor3D); // [G, K, K]
  const halfLogdets = tf.sum(tf.log(tf.sum(tf.mul(factors, eye), 2)), 1); // [G]
  return tf.mul(tf.mean(halfLogdets), (k + n) / (k * n)) as Scalar;
}
