/**
 * The iBOT loss (Zhou et al. 2022, "iBOT: Image BERT Pre-Training with Online Tokenizer";
 * bytedance/ibot `main_ibot.py` `iBOTLoss`, lightly's `IBOTPatchLoss`): DINO's `[CLS]` loss
 * ({@link dinoLoss}, with its centre) plus the masked-patch self-distillation loss with its own
 * centre.
 */
import { invalidValue } from '../core/errors.js';
import { detach } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { dinoLoss, updatedCentre, DINO_CENTRE_MOMENTUM, type DinoOptions } from './dino.js';
import { batchLayout } from './global-batch.js';
import { checkPositive } from './ops.js';

export interface IbotOptions extends DinoOptions {
  /** Temperature of the teacher's softmax over the patch tokens, > 0, this epoch's value (iBOT: 0.04 to 0.07). */
  teacherPatchTemperature: number;
  /** Momentum of the patch centre's moving average, in [0, 1] (iBOT's `center_momentum2`: 0.9). */
  patchCentreMomentum?: number;
  /** Weight λ2 of the patch loss (iBOT's `lambda2`: 1). */
  patchLossWeight?: number;
}

/** The loss, its two parts and both updated centres. */
export interface IbotResult {
  /** `cls + patchLossWeight · patch`, scalar `[]`. */
  loss: Scalar;
  /** DINO's `[CLS]` loss (this rank's rows), `[]`. */
  cls: Scalar;
  /** The masked-patch loss, unweighted (this rank's rows), `[]`. */
  patch: Scalar;
  /** `[K]`: the new `[CLS]` centre ({@link dinoLoss}'s, over the global batch; no gradient). */
  centre: tf.Tensor1D;
  /** `[K]`: `m2 · patchCentre + (1 − m2) · mean over the global batch's teacher images of their patch mean` (no gradient). */
  patchCentre: tf.Tensor1D;
}

/**
 * The patches an image batch's masks select: `[B·L]` 0/1 masks (1: masked), row-major per image.
 * `rows` are the masked patches' flat indices `b·L + l` in that order; `weights` `[M]` are
 * `1 / (masked patches of the row's image)`, so that `Σ_rows w · x / B` is the mean over the
 * images of each image's mean over its masked patches (an image with none counts as 0).
 */
export function maskedRows(mask: ArrayLike<number>, patches: number): { rows: Int32Array; weights: Float32Array } {
  const images = mask.length / patches;
  const rows: number[] = [];
  const weights: number[] = [];
  for (let b = 0; b < images; b++) {
    const first = rows.length;
    for (let l = 0; l < patches; l++) if (mask[b * patches + l]! > 0) rows.push(b * patches + l);
    for (let i = first; i < rows.length; i++) weights.push(1 / (rows.length - first));
  }
  return { rows: Int32Array.from(rows), weights: Float32Array.from(weights) };
}

/**
 * The masked-patch cross-entropy of iBOT and DINOv2: `mean_g Σ_rows w · (−Σ_k target_k ·
 * log_softmax(student / τs)_k) / B`, for G global crops: `studentMasked[g]` `[M_g, K]` the
 * student's outputs of the masked patches, `targets[g]` `[M_g, K]` the teacher's probabilities
 * of the same patches (constants), `selected[g].weights` `[M_g]` their {@link maskedRows}
 * weights, B the images per crop. A crop with no masked patch adds 0 (with a gradient path).
 */
export function maskedPatchCrossEntropy(
  studentMasked: tf.Tensor2D[],
  targets: tf.Tensor2D[],
  selected: Array<{ weights: Float32Array }>,
  images: number,
  studentTemperature: number,
): Scalar {
  return tf.tidy(() => {
    const perCrop = studentMasked.map((s, i) => {
      const { weights } = selected[i]!;
      if (weights.length === 0) return tf.mul(tf.sum(s), 0) as Scalar; // no masked patch in this crop's batch
      const perRow = tf.neg(tf.sum(tf.mul(targets[i]!, tf.logSoftmax(tf.div(s, studentTemperature), 1)), 1)); // [M]
      return tf.div(tf.sum(tf.mul(perRow, tf.tensor1d(weights))), images) as Scalar;
    });
    return tf.div(tf.addN(perCrop), perCrop.length) as Scalar;
  });
}

/**
 * iBOT: `cls + λ2 · patch`, where `cls` is {@link dinoLoss} of the `[CLS]` outputs (every pair
 * of a global teacher crop g and another student crop v) and
 * `patch = mean_g mean_i Σ_l m_gil · (−Σ_k softmax((Tp_gil − c2) / τp)_k · log_softmax(Sp_gil / τs)_k) / max(Σ_l m_gil, 1)`,
 * the cross-entropy of the student's patch outputs of its masked global crop g against the
 * teacher's of the same, unmasked crop, on the masked patches only, averaged per image.
 *
 * - `studentCls`: V ≥ 2 tensors `[B, K]`, the student's `[CLS]` outputs of every crop, the G
 *   global crops first; `teacherCls`: G tensors `[B, K]` (constants, detached here).
 * - `studentMasked`: G tensors `[M_g, K]`, the student's outputs of the masked patches of
 *   global crop g only, in the order of {@link maskedRows} (the other patches do not enter the
 *   loss, so their head outputs need not exist: M_g is about 15% of B·L with iBOT's masks).
 * - `teacherPatch`: G tensors `[B, L, K]`, the teacher's outputs of every patch (constants,
 *   detached here; all of them enter the patch centre).
 * - `masks`: G host arrays `[B·L]`, 1 where the student's patch was masked, 0 elsewhere.
 * - `centre`, `patchCentre`: `[K]` each, the current centres (state of the method).
 * - Returns the loss with the old centres, its parts and the new centres (new tensors).
 *
 * `group` (W ranks): both parts are means over this rank's images, so mean_r loss_r is the
 * global loss, no collective. Both centres' batch means are over the global batch: each is
 * one all-reduce of a `[K]` sum (none in backward), so every rank holds the one-process
 * centres (iBOT's `update_center` all-reduces both too).
 */
export function ibotLoss(
  studentCls: tf.Tensor2D[],
  teacherCls: tf.Tensor2D[],
  studentMasked: tf.Tensor2D[],
  teacherPatch: tf.Tensor3D[],
  masks: ArrayLike<number>[],
  centre: tf.Tensor1D,
  patchCentre: tf.Tensor1D,
  options: IbotOptions,
  group?: ProcessGroup,
): IbotResult {
  const g = Array.isArray(teacherCls) ? teacherCls.length : 0;
  for (const [name, list] of [
    ['studentMasked', studentMasked],
    ['teacherPatch', teacherPatch],
    ['masks', masks],
  ] as const) {
    if (!Array.isArray(list) || list.length !== g) throw new Error(`ibotLoss: ${name} must hold one entry per global crop (${g})`);
  }
  const [b, k] = studentCls[0]?.shape ?? [0, 0];
  const l = teacherPatch[0]?.shape[1] ?? 0;
  const selected = teacherPatch.map((t, i) => {
    if (t.rank !== 3 || t.shape[0] !== b || t.shape[1] !== l || t.shape[2] !== k)
      throw new Error(`ibotLoss: teacherPatch[${i}] must be [${b}, ${l}, ${k}], got [${t.shape}]`);
    if (masks[i]!.length !== b * l) throw new Error(`ibotLoss: masks[${i}] must hold ${b}x${l} values, got ${masks[i]!.length}`);
    const picked = maskedRows(masks[i]!, l);
    const s = studentMasked[i]!;
    if (s.rank !== 2 || s.shape[0] !== picked.rows.length || s.shape[1] !== k) {
      throw new Error(`ibotLoss: studentMasked[${i}] must be [${picked.rows.length}, ${k}] (the masked patches), got [${s.shape}]`);
    }
    return picked;
  });
  if (patchCentre.rank !== 1 || patchCentre.shape[0] !== k || patchCentre.dtype !== 'float32') {
    throw new Error(`ibotLoss: patchCentre must be float32 [${k}], got ${patchCentre.dtype} [${patchCentre.shape.join(', ')}]`);
  }
  const { studentTemperature, teacherPatchTemperature } = options;
  const momentum = options.patchCentreMomentum ?? DINO_CENTRE_MOMENTUM;
  const weight = options.patchLossWeight ?? 1;
  checkPositive('teacherPatchTemperature', teacherPatchTemperature);
  if (!(Number.isFinite(momentum) && momentum >= 0 && momentum <= 1)) throw invalidValue('patchCentreMomentum', momentum, 'a number in [0, 1]');
  if (!(Number.isFinite(weight) && weight >= 0)) throw invalidValue('patchLossWeight', weight, 'a number >= 0');
  const dino = dinoLoss(studentCls, teacherCls, centre, options, group);
  const layout = batchLayout('ibotLoss', b, group);
  const parts = tf.tidy(() => {
    const targets = studentMasked.map((_, i) => {
      const { rows } = selected[i]!;
      if (rows.length === 0) return tf.zeros([0, k]) as tf.Tensor2D; // no masked patch in this crop's batch
      const teacherRows = tf.gather(tf.reshape(detach(teacherPatch[i]!), [b * l, k]), tf.tensor1d(rows, 'int32')); // [M, K]
      return tf.exp(tf.logSoftmax(tf.div(tf.sub(teacherRows, detach(patchCentre)), teacherPatchTemperature), 1)) as tf.Tensor2D; // [M, K]
    });
    const patch = maskedPatchCrossEntropy(studentMasked, targets, selected, b, studentTemperature);
    return { patch, loss: tf.add(dino.loss, tf.mul(patch, weight)) as Scalar };
  });
  const means = teacherPatch.map((t) => tf.mean(detach(t), 1) as tf.Tensor2D); // [B, K] each
  const newPatchCentre = updatedCentre(means, patchCentre, momentum, layout);
  tf.dispose(means);
  return { loss: parts.loss, cls: dino.loss, patch: parts.patch, centre: dino.centre, patchCentre: newPatchCentre };
}
