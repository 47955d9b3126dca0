/**
 * The supervised contrastive loss, SupCon (Khosla et al. 2020), in the paper's two forms:
 * L_in, as solo-learn computes it (`simclr_loss_func` with `indexes` = the labels repeated per
 * view), and L_out, the form the paper recommends.
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherConstantRows, gatherRows } from './global-batch.js';
import { MASKED_LOGIT } from './nt-xent.js';
import { checkPair, checkPositive, l2NormalizeRows, oneHotMask, rangeFrom } from './ops.js';

/**
 * Where SupCon's sum over the positives sits (Khosla et al. 2020, eqs. 2 and 3): `in`side the
 * log, `−log(Σ_p exp(s_p/τ) / Σ_{a≠i} exp(s_a/τ))` (L_in, solo-learn's), or `out`side it,
 * `−(1/|P|) Σ_p log(exp(s_p/τ) / Σ_{a≠i} exp(s_a/τ))` (L_out, the paper's recommendation).
 */
export type SupconVariant = 'in' | 'out';

export interface SupconOptions {
  /** Softmax temperature τ > 0 (the paper's 0.1; solo-learn's CIFAR recipe 0.2). */
  temperature: number;
  /** L_in (`in`, the default, solo-learn's) or L_out (`out`, the paper's recommendation). */
  variant?: SupconVariant;
}

/**
 * SupCon: every embedding is an anchor; its positives P are all other embeddings (any view, any
 * rank) with the same label, its negatives all embeddings with another label. With
 * `variant` `in` (the default, L_in): `−log(pos / (pos + neg))` with
 * pos = Σ_{same label, not itself} exp(s/τ) and neg = Σ_{other label} exp(s/τ), s the cosine
 * similarity. With `out` (L_out): `−(1/|P|) Σ_{p∈P} log(exp(s_p/τ) / (pos + neg))`, the mean of
 * the per-positive log-probabilities. Computed in log space (log-softmax and log-sum-exp over
 * masked logits, see MASKED_LOGIT), never as exp then log. With one positive per anchor (all
 * labels distinct) the two agree.
 *
 * - `views`: V ≥ 2 tensors `[B, D]`, the V views of the same B samples (row i of each).
 *   V ≥ 2 guarantees every anchor a positive (its own sample in another view); one view is
 *   refused.
 * - `labels`: `[B]` int32 class of each sample (shared by its V views).
 * - Anchors: the V·B local rows, L2-normalised; candidates: the V·N rows of every rank.
 * - Returns the mean over the V·B local anchors: a scalar `[]`. With V = 2 and all labels
 *   distinct this is NT-Xent.
 *
 * `group` (W > 1): the local anchors `[V·B, D]` are gathered with the differentiable
 * {@link gatherRows} (backward sums over ranks, so each rank's gradient on its rows is W × the
 * global loss's) and the labels with {@link gatherConstantRows}; loss_r is the mean over rank
 * r's anchors, so mean_r loss_r is the global loss (scale convention:
 * src/distributed/collectives.ts). Two collectives forward (embeddings, labels), one backward.
 */
export function supconLoss(views: tf.Tensor2D[], labels: tf.Tensor1D, options: SupconOptions, group?: ProcessGroup): Scalar {
  if (!Array.isArray(views) || views.length < 2) {
    throw new Error(
      `supconLoss: needs at least 2 views (an anchor's positives include its other views), got ${Array.isArray(views) ? views.length : typeof views}`,
    );
  }
  views.forEach((v, i) => checkPair('supconLoss', ['views[0]', `views[${i}]`], views[0]!, v));
  const b = views[0]!.shape[0];
  if (labels.rank !== 1 || labels.dtype !== 'int32' || labels.shape[0] !== b) {
    throw new Error(`supconLoss: labels must be int32 [${b}] (one per row of each view), got ${labels.dtype} [${labels.shape.join(', ')}]`);
  }
  const { temperature, variant = 'in' } = options;
  checkPositive('temperature', temperature);
  if (variant !== 'in' && variant !== 'out') throw new Error(`supconLoss: variant must be 'in' or 'out', got ${JSON.stringify(variant)}`);
  const layout = batchLayout('supconLoss', b, group);
  const m = views.length * b; // local anchors
  return tf.tidy(() => {
    const anchors = l2NormalizeRows(tf.concat(views, 0)); // [V·B, D], view-major
    const candidates = gatherRows(anchors, layout); // [W·V·B, D], rank-major
    const anchorLabels = tf.tile(labels, [views.length]) as tf.Tensor1D; // [V·B]
    const candidateLabels = gatherConstantRows(anchorLabels, layout); // [W·V·B]
    const logits = tf.div(tf.matMul(anchors, candidates, false, true), temperature); // [V·B, W·V·B]
    const self = oneHotMask(rangeFrom(layout.rank * m, m), layout.worldSize * m);
    const sameLabel = tf.equal(tf.expandDims(anchorLabels, 1), tf.expandDims(candidateLabels, 0));
    const positive = tf.logicalAnd(sameLabel, tf.logicalNot(self));
    const masked = tf.fill(logits.shape, MASKED_LOGIT);
    const logProb = tf.logSoftmax(tf.where(self, masked, logits), 1); // log(exp(s/τ) / (pos + neg))
    if (variant === 'out') {
      const sumLogProb = tf.sum(tf.where(positive, logProb, tf.zerosLike(logProb)), 1); // [V·B]: Σ_p log(exp(s_p/τ) / (pos + neg))
      return tf.neg(tf.mean(tf.div(sumLogProb, tf.sum(tf.cast(positive, 'float32'), 1)))) as Scalar;
    }
    const logPosShare = tf.logSumExp(tf.where(positive, logProb, masked), 1); // [V·B]: log(pos / (pos + neg))
    return tf.neg(tf.mean(logPosShare)) as Scalar;
  });
}
