/**
 * The MSN loss (Assran et al. 2022, "Masked Siamese Networks for Label-Efficient Learning";
 * the reference implementation's `init_msn_loss` in `msn/src/losses.py`, lightly's `MSNLoss`):
 * the anchors' soft assignments to learnable prototypes predict the target's sharpened ones,
 * plus ME-MAX, the entropy of the mean anchor assignment over the global batch.
 */
import { invalidValue } from '../core/errors.js';
import { detach } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, sumOverRanks } from './global-batch.js';
import { checkPair, checkPositive, l2NormalizeRows } from './ops.js';
import { sinkhornKnopp } from './sinkhorn.js';

export interface MsnOptions {
  /** Temperature τ of the anchors' and the target's softmax over the prototypes (the reference: 0.1). */
  temperature?: number;
  /** Sharpening temperature T of the targets, in (0, 1] (the reference: 0.25). */
  sharpenTemperature?: number;
  /** Sinkhorn-Knopp iterations on the sharpened targets over the global batch; 0: none (the reference: 3, `use_sinkhorn`). */
  sinkhornIterations?: number;
  /** Weight λ of the ME-MAX term (the reference: 1). */
  meMaxWeight?: number;
}

/** The MSN reference implementation's loss hyper-parameters (`configs/pretrain/msn_vits16.yaml`). */
export const MSN_DEFAULTS: Readonly<Required<MsnOptions>> = Object.freeze({
  temperature: 0.1,
  sharpenTemperature: 0.25,
  sinkhornIterations: 3,
  meMaxWeight: 1,
});

/** The loss and its two (unweighted) parts. */
export interface MsnResult {
  /** `crossEntropy + meMaxWeight · meMax`, scalar `[]`. */
  loss: Scalar;
  /** Mean over the anchors (this rank's rows, every anchor view) of `H(target, anchor)`, `[]`. */
  crossEntropy: Scalar;
  /** `log K − H(p̄)`, p̄ the mean anchor probability over the GLOBAL batch (≥ 0; 0 when p̄ is uniform), `[]`. */
  meMax: Scalar;
}

/**
 * MSN: with the rows and the prototypes L2-normalised,
 * `p_a = softmax(a · Pᵀ / τ)` for every anchor row a, the target's
 * `q = sharpen(softmax(t · Pᵀ / τ), T)` (power 1/T, rows renormalised; equal to
 * `softmax(t · Pᵀ / (τ·T))`), optionally Sinkhorn-Knopp-balanced over the global batch, and
 * `loss = mean over anchors of −Σ_k q_k log p_a,k + λ · (Σ_k p̄_k log p̄_k + log K)`,
 * p̄ the mean of p_a over every anchor view and the N rows of the global batch.
 *
 * - `anchors`: A ≥ 1 tensors `[B, D]`, the student's outputs of the masked anchor views of the
 *   B samples (each row's target is the same sample's row of `target`).
 * - `target`: `[B, D]`, the EMA target's output of the unmasked target view: a constant
 *   (detached here, gradient exactly 0).
 * - `prototypes`: `[K, D]`, learnable; the targets use them detached (the reference computes
 *   the targets under `torch.no_grad`), so their gradient comes through the anchors only.
 * - Returns the loss, the cross-entropy and the ME-MAX term (scalars `[]`).
 *
 * `group` (W ranks, N = W·B): the cross-entropy is the mean over this rank's anchor rows; the
 * anchor probabilities summed over this rank's rows `[K]` are summed over ranks with the
 * differentiable {@link sumOverRanks} (one all-reduce forward, one backward), so every rank
 * gets the ME-MAX term of the global batch and W × its gradient on its rows (the scale
 * convention of src/distributed/collectives.ts); the Sinkhorn-Knopp balancing is that of the
 * global batch ({@link sinkhornKnopp}: iterations + 1 all-reduces, none in backward). The
 * reference all-reduces p̄ too (`AllReduce`, forward mean, backward identity, which DDP's
 * averaging makes the global gradient); lightly's `MSNLoss` takes each rank's own mean.
 */
export function msnLoss(anchors: tf.Tensor2D[], target: tf.Tensor2D, prototypes: tf.Tensor2D, options: MsnOptions = {}, group?: ProcessGroup): MsnResult {
  if (!Array.isArray(anchors) || anchors.length < 1)
    throw new Error(`msnLoss: needs the outputs of at least 1 anchor view, got ${Array.isArray(anchors) ? 0 : typeof anchors}`);
  anchors.forEach((a, v) => checkPair('msnLoss', ['target', `anchors[${v}]`], target, a));
  if (prototypes.rank !== 2 || prototypes.shape[1] !== target.shape[1] || prototypes.shape[0] < 1) {
    throw new Error(`msnLoss: prototypes must be [K, ${target.shape[1]}] (K >= 1), got shape [${prototypes.shape.join(', ')}]`);
  }
  const { temperature, sharpenTemperature, sinkhornIterations, meMaxWeight } = { ...MSN_DEFAULTS, ...options };
  checkPositive('temperature', temperature);
  if (!(Number.isFinite(sharpenTemperature) && sharpenTemperature > 0 && sharpenTemperature <= 1)) {
    throw invalidValue('sharpenTemperature', sharpenTemperature, 'a number in (0, 1]');
  }
  if (!(Number.isInteger(sinkhornIterations) && sinkhornIterations >= 0)) throw invalidValue('sinkhornIterations', sinkhornIterations, 'an integer >= 0');
  if (!(Number.isFinite(meMaxWeight) && meMaxWeight >= 0)) throw invalidValue('meMaxWeight', meMaxWeight, 'a number >= 0');
  const layout = batchLayout('msnLoss', target.shape[0], group);
  const k = prototypes.shape[0];
  return tf.tidy(() => {
    const protos = l2NormalizeRows(prototypes); // [K, D]
    // The target's sharpened assignments: log-softmax of t·Pᵀ / (τ T) (a constant).
    const targetLogits = tf.div(tf.matMul(l2NormalizeRows(detach(target)), detach(protos), false, true), temperature * sharpenTemperature) as tf.Tensor2D;
    const sharpened = tf.logSoftmax(targetLogits) as tf.Tensor2D; // [B, K]
    // Sinkhorn-Knopp of Q = the sharpened probabilities: exp(log q / 1).
    const q = sinkhornIterations > 0 ? sinkhornKnopp(sharpened, { epsilon: 1, iterations: sinkhornIterations }, layout.group) : tf.exp(sharpened);
    const logProbs = anchors.map((a) => tf.logSoftmax(tf.div(tf.matMul(l2NormalizeRows(a), protos, false, true), temperature)) as tf.Tensor2D);
    const crossEntropy = tf.div(tf.addN(logProbs.map((lp) => tf.mean(tf.neg(tf.sum(tf.mul(q, lp), 1))))), anchors.length) as Scalar;
    // ME-MAX: p̄ over every anchor row of the global batch.
    const localSum = tf.addN(logProbs.map((lp) => tf.sum(tf.exp(lp), 0))) as tf.Tensor1D; // [K]
    const meanProbs = tf.div(sumOverRanks(localSum, layout), anchors.length * layout.globalBatch);
    const meMax = tf.add(tf.sum(tf.mul(meanProbs, tf.log(meanProbs))), Math.log(k)) as Scalar;
    const loss = tf.add(crossEntropy, tf.mul(meMax, meMaxWeight)) as Scalar;
    return { loss, crossEntropy, meMax };
  });
}
