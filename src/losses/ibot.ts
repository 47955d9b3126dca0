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
 * iBOT: `cls + λ2 · patch`, where `cls` is {@link dinoLoss} of the `[CLS]` outputs (every pair
 * of a global teacher crop g and another student crop v) and
 * `patch = mean_g mean_i Σ_l m_gil · (−Σ_k softmax((Tp_gil − c2) / τp)_k · log_softmax(Sp_gil / τs)_k) / max(Σ_l m_gil, 1)`,
 * the cross-entropy of the student's patch outputs of its masked global crop g against the
 * teacher's of the same, unmasked crop, on the masked patches only, averaged per image.
 *
 * - `studentCls`: V ≥ 2 tensors `[B, K]`, the student's `[CLS]` outputs of every crop, the G
 *   global crops first; `teacherCls`: G tensors `[B, K]` (constants, detached here).
 * - `studentPatch`, `teacherPatch`: G tensors `[B, L, K]` each, the patch outputs of the
 *   global crops (the teacher's are constants, detached here).
 * - `masks`: G tensors `[B, L]`, 1 where the student's patch was masked, 0 elsewhere.
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
  studentPatch: tf.Tensor3D[],
  teacherPatch: tf.Tensor3D[],
  masks: tf.Tensor2D[],
  centre: tf.Tensor1D,
  patchCentre: tf.Tensor1D,
  options: IbotOptions,
  group?: ProcessGroup,
): IbotResult {
  const g = Array.isArray(teacherCls) ? teacherCls.length : 0;
  for (const [name, list] of [
    ['studentPatch', studentPatch],
    ['teacherPatch', teacherPatch],
    ['masks', masks],
  ] as const) {
    if (!Array.isArray(list) || list.length !== g) throw new Error(`ibotLoss: ${name} must hold one tensor per global crop (${g})`);
  }
  const [b, k] = studentCls[0]?.shape ?? [0, 0];
  const l = studentPatch[0]?.shape[1] ?? 0;
  studentPatch.forEach((s, i) => {
    for (const [name, t] of [
      [`studentPatch[${i}]`, s],
      [`teacherPatch[${i}]`, teacherPatch[i]!],
    ] as const) {
      if (t.rank !== 3 || t.shape[0] !== b || t.shape[1] !== l || t.shape[2] !== k)
        throw new Error(`ibotLoss: ${name} must be [${b}, ${l}, ${k}], got [${t.shape}]`);
    }
    const m = masks[i]!;
    if (m.rank !== 2 || m.shape[0] !== b || m.shape[1] !== l) throw new Error(`ibotLoss: masks[${i}] must be [${b}, ${l}], got [${m.shape}]`);
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
    const perCrop = studentPatch.map((s, i) => {
      const target = tf.exp(tf.logSoftmax(tf.div(tf.sub(detach(teacherPatch[i]!), detach(patchCentre)), teacherPatchTemperature), 2)); // [B, L, K]
      const perPatch = tf.neg(tf.sum(tf.mul(target, tf.logSoftmax(tf.div(s, studentTemperature), 2)), 2)); // [B, L]
      const mask = masks[i]!;
      const perImage = tf.div(tf.sum(tf.mul(perPatch, mask), 1), tf.maximum(tf.sum(mask, 1), 1)); // [B]
      return tf.mean(perImage) as Scalar;
    });
    const patch = tf.div(tf.addN(perCrop), perCrop.length) as Scalar;
    return { patch, loss: tf.add(dino.loss, tf.mul(patch, weight)) as Scalar };
  });
  const means = teacherPatch.map((t) => tf.mean(t, 1) as tf.Tensor2D); // [B, K] each
  const newPatchCentre = updatedCentre(means, patchCentre, momentum, layout);
  tf.dispose(means);
  return { loss: parts.loss, cls: dino.loss, patch: parts.patch, centre: dino.centre, patchCentre: newPatchCentre };
}
