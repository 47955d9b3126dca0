/**
 * The DINO loss with its teacher centring (Caron et al. 2021; solo-learn's `DINOLoss`).
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout, reduceOverRanks, type BatchLayout } from './global-batch.js';
import { checkPair, checkPositive } from './ops.js';

export interface DinoOptions {
  /** Temperature of the student's softmax, > 0 (solo-learn: 0.1). */
  studentTemperature: number;
  /** Temperature of the teacher's softmax, > 0, this epoch's value of the warm-up schedule (solo-learn: 0.04 to 0.07). */
  teacherTemperature: number;
  /** Momentum m of the centre's moving average, in [0, 1]; default 0.9. */
  centreMomentum?: number;
}

/** The loss and the updated centre. */
export interface DinoResult {
  /** Scalar `[]`. */
  loss: Scalar;
  /** `[K]`: `m · centre + (1 − m) · mean of the teacher outputs over the global batch` (no gradient). */
  centre: tf.Tensor1D;
}

/** solo-learn's default centre momentum. */
export const DINO_CENTRE_MOMENTUM = 0.9;

/**
 * DINO: the cross-entropy between the sharpened, centred teacher distribution of each global
 * crop and the student distribution of every other crop,
 * `mean over pairs (g, v ≠ g) of mean_i −Σ_k softmax((T_g[i] − c) / τt)_k · log_softmax(S_v[i] / τs)_k`,
 * skipping the pairs where student and teacher see the same crop.
 *
 * - `student`: V ≥ 2 tensors `[B, K]`, the student's outputs of every crop, the G global
 *   crops first.
 * - `teacher`: G tensors `[B, K]` (1 ≤ G ≤ V), the teacher's outputs of the global crops,
 *   constants (detached here, gradient exactly 0).
 * - `centre`: `[K]`, the current centre (state of the method; zeros at the start).
 * - Returns the loss (the mean over the G·(V − 1) pairs of the mean over the B local rows)
 *   with the old centre, and the new centre (a new tensor; the caller keeps it and disposes
 *   the old one). With G = V = 2 this is solo-learn's `DINOLoss` (whose `chunk(2)` splits the
 *   student's outputs into the global crops only); with more crops, the original DINO's.
 *
 * `group`: loss_r is the mean over rank r's rows, so mean_r loss_r is the global loss, no
 * collective. The centre's batch mean is over the global batch: the sum of the teacher
 * outputs `[K]` is all-reduced (`reduceOverRanks`, one collective, none in backward), so every
 * rank holds the one-process centre. With one process the centre is computed on the device
 * (float32 tensor ops, no read).
 */
export function dinoLoss(student: tf.Tensor2D[], teacher: tf.Tensor2D[], centre: tf.Tensor1D, options: DinoOptions, group?: ProcessGroup): DinoResult {
  if (!Array.isArray(student) || student.length < 2)
    throw new Error(`dinoLoss: needs the student outputs of at least 2 crops, got ${Array.isArray(student) ? student.length : typeof student}`);
  if (!Array.isArray(teacher) || teacher.length < 1 || teacher.length > student.length) {
    throw new Error(
      `dinoLoss: needs 1 to ${student.length} teacher outputs (one per global crop), got ${Array.isArray(teacher) ? teacher.length : typeof teacher}`,
    );
  }
  student.forEach((s, v) => checkPair('dinoLoss', ['student[0]', `student[${v}]`], student[0]!, s));
  teacher.forEach((t, g) => checkPair('dinoLoss', ['student[0]', `teacher[${g}]`], student[0]!, t));
  const [b, k] = student[0]!.shape;
  if (centre.rank !== 1 || centre.shape[0] !== k || centre.dtype !== 'float32') {
    throw new Error(`dinoLoss: centre must be float32 [${k}], got ${centre.dtype} [${centre.shape.join(', ')}]`);
  }
  const { studentTemperature, teacherTemperature } = options;
  const momentum = options.centreMomentum ?? DINO_CENTRE_MOMENTUM;
  checkPositive('studentTemperature', studentTemperature);
  checkPositive('teacherTemperature', teacherTemperature);
  if (!(Number.isFinite(momentum) && momentum >= 0 && momentum <= 1)) throw invalidValue('centreMomentum', momentum, 'a number in [0, 1]');
  const layout = batchLayout('dinoLoss', b, group);
  const loss = tf.tidy(() => {
    // softmax as exp(logSoftmax): tf.softmax is slow on the CPU backend for wide K.
    const targets = teacher.map((t) => tf.exp(tf.logSoftmax(tf.div(tf.sub(detach(t), detach(centre)), teacherTemperature), 1)) as tf.Tensor2D); // [B, K]
    return dinoCrossEntropy(student, targets, studentTemperature);
  });
  return { loss, centre: updatedCentre(teacher, centre, momentum, layout) };
}

/**
 * DINO's cross-entropy of the teacher's distributions of the global crops against the
 * student's of every other crop: `mean over pairs (g, v ≠ g) of mean_i −Σ_k targets_g[i]_k ·
 * log_softmax(student_v[i] / τs)_k`, the pairs in DINO's order (g outer, v inner). `targets`:
 * G tensors `[B, K]`, probabilities (constants: the caller's centred or Sinkhorn-Knopp teacher
 * outputs); `student`: V tensors `[B, K]`, the G global crops first. Also DINOv2's `[CLS]` loss.
 */
export function dinoCrossEntropy(student: tf.Tensor2D[], targets: tf.Tensor2D[], studentTemperature: number): Scalar {
  return tf.tidy(() => {
    const logStudent = student.map((s) => tf.logSoftmax(tf.div(s, studentTemperature), 1)); // [B, K] each
    const terms: Scalar[] = [];
    targets.forEach((target, g) => {
      logStudent.forEach((logS, v) => {
        if (v !== g) terms.push(tf.neg(tf.mean(tf.sum(tf.mul(target, logS), 1))) as Scalar);
      });
    });
    return tf.div(tf.addN(terms), terms.length) as Scalar;
  });
}

/**
 * `m · centre + (1 − m) · Σ teacher / (G·N)` `[K]` of G teacher outputs `[B, K]`, the sum over
 * every global crop and rank (one all-reduce over `layout`'s group; a constant, on the device).
 * Also iBOT's patch centre, of the teachers' per-image patch means.
 */
export function updatedCentre(teacher: tf.Tensor2D[], centre: tf.Tensor1D, momentum: number, layout: BatchLayout): tf.Tensor1D {
  return tf.tidy(() => {
    const local = tf.sum(
      tf.concat(
        teacher.map((t) => detach(t)),
        0,
      ),
      0,
    ); // [K]
    const sums = reduceOverRanks(local, layout, 'sum');
    const count = teacher.length * layout.globalBatch;
    return tf.add(tf.mul(detach(centre), momentum), tf.mul(sums, (1 - momentum) / count));
  });
}
