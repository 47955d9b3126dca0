/**
 * All4One's feature-decorrelation term (Estepa et al. 2023; solo-learn's `All4One`
 * `training_step`, "Feature dimension task"), with global-batch statistics, and its centroid
 * contrastive term. Its third term is the NNCLR loss ({@link nnclrLoss} in src/losses/nnclr.ts).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout, gatherRows, globalBatchInfoNce, sumOverRanks } from './global-batch.js';
import { checkPair, checkPositive, diagonal, l2NormalizeRows, offDiagonalSumOfSquares } from './ops.js';

/** Floor of a column norm (F.normalize's eps). */
const NORM_EPS = 1e-12;

/**
 * All4One's feature term: with every column L2-normalised over the global batch (F.normalize
 * over dim 0, not centred), the cross-correlations `C1 = m̂1ᵀ ẑ2` and `C2 = m̂2ᵀ ẑ1` `[D, D]`
 * between the momentum projections of one view and the online projections of the other, and
 *
 *     on  = sqrt(½ (mean_i (C1_ii − 1)² + mean_i (C2_ii − 1)²))
 *     off = sqrt(½ (mean_{i≠j} C1_ij² + mean_{i≠j} C2_ij²))
 *     loss = 10 · (½ on + ½ off)
 *
 * (solo-learn's `feature_loss`; the method weighs it by ½ in its total).
 *
 * - `momentumZ1`, `momentumZ2`: `[B, D]` momentum projections of views 1 and 2, constants
 *   (detached here, gradient exactly 0); `z1`, `z2`: `[B, D]` online projections. D ≥ 2.
 * - Returns the global loss, the same on every rank: a scalar `[]`.
 *
 * `group` (W ranks): the columns' sums of squares `[4D]` and the cross-products `[2, D, D]`
 * are local partial sums passed through `sumOverRanks` (differentiable all-reduce), so the
 * normalisation and the correlations are those of the global batch, and each rank's gradient
 * on its rows is W × the global gradient's rows (scale convention:
 * src/distributed/collectives.ts). Two collectives forward, two backward.
 */
export function all4oneFeatureLoss(momentumZ1: tf.Tensor2D, momentumZ2: tf.Tensor2D, z1: tf.Tensor2D, z2: tf.Tensor2D, group?: ProcessGroup): Scalar {
  const names = ['momentumZ1', 'momentumZ2', 'z1', 'z2'];
  [momentumZ1, momentumZ2, z1, z2].forEach((x, i) => checkPair('all4oneFeatureLoss', ['momentumZ1', names[i]!], momentumZ1, x));
  const d = z1.shape[1];
  if (d < 2) throw new Error(`all4oneFeatureLoss: needs D >= 2 columns (an off-diagonal), got ${d}`);
  const layout = batchLayout('all4oneFeatureLoss', z1.shape[0], group);
  return tf.tidy(() => {
    const all = tf.concat([detach(momentumZ1), detach(momentumZ2), z1, z2], 1); // [B, 4D]
    const norms = tf.maximum(tf.sqrt(sumOverRanks(tf.sum(tf.square(all), 0), layout)), NORM_EPS); // [4D]
    const [m1, m2, n1, n2] = tf.split(tf.div(all, norms), 4, 1) as tf.Tensor2D[]; // [B, D] each
    const local = tf.stack([tf.matMul(m1!, n2!, true, false), tf.matMul(m2!, n1!, true, false)]); // [2, D, D]
    const [c1, c2] = tf.unstack(sumOverRanks(local, layout)) as tf.Tensor2D[];
    const onDiagonal = (c: tf.Tensor2D) => tf.mean(tf.square(tf.sub(diagonal(c), 1)));
    const offDiagonal = (c: tf.Tensor2D) => tf.div(offDiagonalSumOfSquares(c), d * (d - 1));
    const on = tf.sqrt(tf.mul(0.5, tf.add(onDiagonal(c1!), onDiagonal(c2!))));
    const off = tf.sqrt(tf.mul(0.5, tf.add(offDiagonal(c1!), offDiagonal(c2!))));
    return tf.mul(5, tf.add(on, off)) as Scalar;
  });
}

/**
 * All4One's centroid term (solo-learn's `att_nnclr_loss` half, `nnclr_loss_func(rich_emb1,
 * strange_emb2)`): the transformer's "centroid" of each sample's neighbours against the
 * shifted sequences' embeddings of the other view of the whole global batch, its own the
 * positive. Unlike {@link nnclrLoss} the anchors are *not* constants: the gradient reaches the
 * transformer through both sides.
 *
 * - `centroids`: `[B, D]` anchors; `shifted`: `[B, D]` candidates, gathered from every rank with
 *   the differentiable `gatherRows` (`[N, D]`); both L2-normalised here.
 * - logits `[B, N]` = c · Sᵀ / τ; the target of local row i is global column rank·B + i.
 * - Returns the mean cross-entropy over the B local rows: a scalar `[]` (solo-learn's default
 *   temperature for this term is 0.1).
 *
 * `group` (W > 1): scale convention of src/distributed/collectives.ts (loss_r the mean over rank
 * r's rows; the gather's backward sums every rank's gradient). One collective forward, one backward.
 */
export function all4oneCentroidLoss(centroids: tf.Tensor2D, shifted: tf.Tensor2D, options: { temperature: number }, group?: ProcessGroup): Scalar {
  checkPair('all4oneCentroidLoss', ['centroids', 'shifted'], centroids, shifted);
  checkPositive('temperature', options.temperature);
  const layout = batchLayout('all4oneCentroidLoss', centroids.shape[0], group);
  return tf.tidy(() => globalBatchInfoNce(l2NormalizeRows(centroids), gatherRows(l2NormalizeRows(shifted), layout), options.temperature, layout));
}
