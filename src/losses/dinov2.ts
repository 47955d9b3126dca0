/**
 * The DINOv2 loss (Oquab et al. 2023, "DINOv2: Learning Robust Visual Features without
 * Supervision"; facebookresearch/dinov2 `dinov2/train/ssl_meta_arch.py` with
 * `train.centering: sinkhorn_knopp`, `dinov2/loss/dino_clstoken_loss.py`,
 * `ibot_patch_loss.py`, `koleo_loss.py`): DINO's `[CLS]` loss and iBOT's masked-patch loss,
 * both with the teacher's probabilities from Sinkhorn-Knopp over the global batch instead of
 * a centre, plus the KoLeo regulariser of the student's `[CLS]` features.
 */
import { invalidValue } from '../core/errors.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { dinoCrossEntropy } from './dino.js';
import { batchLayout } from './global-batch.js';
import { maskedPatchCrossEntropy, maskedRows } from './ibot.js';
import { koleoLoss } from './koleo.js';
import { checkPair, checkPositive } from './ops.js';
import { sinkhornKnopp } from './sinkhorn.js';

export interface Dinov2Options {
  /** Temperature of the student's softmax, > 0 (DINOv2: 0.1). */
  studentTemperature: number;
  /** ε of Sinkhorn-Knopp, the teacher temperature of this epoch, > 0 (DINOv2: 0.04 to 0.07); `[CLS]` and patches alike. */
  teacherTemperature: number;
  /** Sinkhorn-Knopp iterations, an integer ≥ 1 (DINOv2: 3). */
  sinkhornIterations?: number;
  /** Weight of the masked-patch loss (DINOv2's `ibot.loss_weight`: 1). */
  patchLossWeight?: number;
  /** Weight of KoLeo (DINOv2's `dino.koleo_loss_weight`: 0.1); 0 leaves it out (no collective). */
  koleoWeight?: number;
}

/** DINOv2's defaults (`dinov2/configs/ssl_default_config.yaml`, `sinkhorn_knopp_teacher`'s `n_iterations`). */
export const DINOV2_DEFAULTS = Object.freeze({ sinkhornIterations: 3, patchLossWeight: 1, koleoWeight: 0.1 });

/** The loss and its parts. */
export interface Dinov2Result {
  /** `cls + patchLossWeight · patch + koleoWeight · koleo`, scalar `[]`. */
  loss: Scalar;
  /** DINO's `[CLS]` term with the reference's divisor (this rank's rows), `[]`. */
  cls: Scalar;
  /** The masked-patch term, unweighted (this rank's rows), `[]`. */
  patch: Scalar;
  /** KoLeo summed over the global crops, unweighted (this rank's rows; 0 when its weight is 0), `[]`. */
  koleo: Scalar;
}

/**
 * DINOv2: `loss = cls + λp · patch + λk · Σ_g koleo(features_g)` where
 * - `cls = Σ over pairs (g, v ≠ g) of mean_i −Σ_k q_g[i]_k · log_softmax(S_v[i] / τs)_k /
 *   (G(G − 1) + max(G·L, 1))`, L = V − G local crops: DINO's pair mean when L > 0; with no
 *   local crop the reference's `max(n_local_crops · 2, 1)` still adds 1 to the divisor (2/3 of
 *   the pair mean for G = 2), which is kept. `q_g` are Sinkhorn-Knopp's assignments of the
 *   teacher outputs of both global crops together, `exp(T / τt)` balanced over the global
 *   batch (`sinkhorn_knopp_teacher`: G·N rows).
 * - `patch = mean_g Σ_masked w · (−Σ_k p_k · log_softmax(Sp / τs)_k) / B`, w = 1 / (masked
 *   patches of the row's image) (the reference's `masks_weight`; its `forward_masked` divides
 *   the sum by the 2B images of both crops), p the Sinkhorn-Knopp assignments of the teacher's
 *   outputs of the masked patches of both global crops together over the GLOBAL batch (the
 *   reference all-reduces the count, `n_masked_patches`; each rank holds its own number).
 * - KoLeo ({@link koleoLoss}) of the student's backbone `[CLS]` features of each global crop,
 *   summed over the crops (the reference: `sum(koleo_loss(p) for p in student_cls_tokens.chunk(2))`).
 *
 * Arguments: `studentCls` V ≥ 2 tensors `[B, K]` (the G global crops first); `teacherCls` G
 * tensors `[B, K]` (constants); `studentMasked`, `teacherMasked` G tensors `[M_g, K]` each, the
 * outputs of crop g's masked patches in {@link maskedRows} order (the teacher's constants);
 * `masks` G host arrays `[B·L_p]` (1: masked); `features` G tensors `[B, D]` for KoLeo.
 *
 * `group` (W ranks): `cls` and `patch` are sums over this rank's rows divided by its B, so
 * mean_r loss_r is the global loss; each Sinkhorn-Knopp all-reduces its `[K]` column sums
 * (iterations + 1 collectives each, none in backward; the masked patches' counts may differ
 * between ranks); KoLeo gathers the normalised features with their gradient (one all-gather
 * per global crop), so the nearest neighbours are the global batch's. The reference computes
 * KoLeo per GPU: `koleoGroup` (default `group`) is the group KoLeo alone runs on, a
 * `SingleProcessGroup` for the reference's per-GPU KoLeo (another objective: neighbours among B
 * rows rather than N).
 */
export function dinov2Loss(
  studentCls: tf.Tensor2D[],
  teacherCls: tf.Tensor2D[],
  studentMasked: tf.Tensor2D[],
  teacherMasked: tf.Tensor2D[],
  masks: ArrayLike<number>[],
  features: tf.Tensor2D[],
  options: Dinov2Options,
  group?: ProcessGroup,
  koleoGroup?: ProcessGroup,
): Dinov2Result {
  if (!Array.isArray(studentCls) || studentCls.length < 2) throw new Error('dinov2Loss: needs the student outputs of at least 2 crops');
  const g = Array.isArray(teacherCls) ? teacherCls.length : 0;
  if (g < 1 || g > studentCls.length) throw new Error(`dinov2Loss: needs 1 to ${studentCls.length} teacher outputs (one per global crop), got ${g}`);
  for (const [name, list] of [
    ['studentMasked', studentMasked],
    ['teacherMasked', teacherMasked],
    ['masks', masks],
    ['features', features],
  ] as const) {
    if (!Array.isArray(list) || list.length !== g) throw new Error(`dinov2Loss: ${name} must hold one entry per global crop (${g})`);
  }
  studentCls.forEach((s, v) => checkPair('dinov2Loss', ['studentCls[0]', `studentCls[${v}]`], studentCls[0]!, s));
  teacherCls.forEach((t, i) => checkPair('dinov2Loss', ['studentCls[0]', `teacherCls[${i}]`], studentCls[0]!, t));
  const [b, k] = studentCls[0]!.shape;
  const selected = masks.map((mask, i) => {
    if (mask.length === 0 || mask.length % b !== 0) throw new Error(`dinov2Loss: masks[${i}] must hold ${b} x (patches) values, got ${mask.length}`);
    const picked = maskedRows(mask, mask.length / b);
    for (const [name, x] of [
      ['studentMasked', studentMasked[i]!],
      ['teacherMasked', teacherMasked[i]!],
    ] as const) {
      if (x.rank !== 2 || x.shape[0] !== picked.rows.length || x.shape[1] !== k) {
        throw new Error(`dinov2Loss: ${name}[${i}] must be [${picked.rows.length}, ${k}] (the masked patches), got [${x.shape}]`);
      }
    }
    if (features[i]!.rank !== 2 || features[i]!.shape[0] !== b) throw new Error(`dinov2Loss: features[${i}] must be [${b}, D], got [${features[i]!.shape}]`);
    return picked;
  });
  const { studentTemperature, teacherTemperature } = options;
  const { sinkhornIterations, patchLossWeight, koleoWeight } = { ...DINOV2_DEFAULTS, ...options };
  checkPositive('studentTemperature', studentTemperature);
  checkPositive('teacherTemperature', teacherTemperature);
  if (!(Number.isInteger(sinkhornIterations) && sinkhornIterations >= 1)) throw invalidValue('sinkhornIterations', sinkhornIterations, 'an integer >= 1');
  if (!(Number.isFinite(patchLossWeight) && patchLossWeight >= 0)) throw invalidValue('patchLossWeight', patchLossWeight, 'a number >= 0');
  if (!(Number.isFinite(koleoWeight) && koleoWeight >= 0)) throw invalidValue('koleoWeight', koleoWeight, 'a number >= 0');
  const layout = batchLayout('dinov2Loss', b, group);
  const sinkhorn = { epsilon: teacherTemperature, iterations: sinkhornIterations };
  return tf.tidy(() => {
    // [CLS]: Sinkhorn-Knopp of both global crops' teacher rows at once, split back per crop.
    const clsTargets = tf.split(sinkhornKnopp(tf.concat(teacherCls, 0) as tf.Tensor2D, sinkhorn, layout.group), g, 0) as tf.Tensor2D[];
    const pairs = g * (studentCls.length - 1);
    const [globalTerms, localTerms] = [g * (g - 1), g * (studentCls.length - g)];
    const cls = tf.mul(dinoCrossEntropy(studentCls, clsTargets, studentTemperature), pairs / (globalTerms + Math.max(localTerms, 1))) as Scalar;
    // Patches: Sinkhorn-Knopp of every masked patch of both crops at once, this rank's count of rows.
    const counts = selected.map((s) => s.rows.length);
    const patchTargets = splitRows(sinkhornKnopp(tf.concat(teacherMasked, 0) as tf.Tensor2D, sinkhorn, layout.group), counts);
    const patch = maskedPatchCrossEntropy(studentMasked, patchTargets, selected, b, studentTemperature);
    const koleo = koleoWeight > 0 ? (tf.addN(features.map((f) => koleoLoss(f, {}, koleoGroup ?? layout.group))) as Scalar) : tf.scalar(0);
    const loss = tf.addN([cls, tf.mul(patch, patchLossWeight), tf.mul(koleo, koleoWeight)]) as Scalar;
    return { loss, cls, patch, koleo };
  });
}

/** `[Σ counts, K]` -> one `[count, K]` slice per count, in order (0-row slices included). */
function splitRows(x: tf.Tensor2D, counts: number[]): tf.Tensor2D[] {
  let start = 0;
  return counts.map((count) => {
    const part = tf.slice(x, [start, 0], [count, x.shape[1]]);
    start += count;
    return part;
  });
}
