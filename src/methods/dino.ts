import { detach } from '../core/ops.js';
import { tf, type Tensor, type Tensor1D, type Tensor2D, type Variable } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { dinoLoss } from '../losses/dino.js';
import { batchLayout } from '../losses/global-batch.js';
import { defineArgs, type ArgValues } from './args.js';
import { withoutGradients, type MethodContext, type OptimDefaults, type SslLossOutput, type StepInfo } from './base.js';
import { forwardCrops } from './forward-crops.js';
import { DinoHead } from './heads.js';
import { MomentumMethod } from './momentum.js';
import { StepMean } from './step-mean.js';

/**
 * The student-teacher self-distillation that DINO, iBOT and DINOv2 share: the student (backbone
 * and {@link DinoHead}) and its EMA teacher ({@link MomentumMethod}), the teacher temperature's
 * warm-up, the epoch of the current step, and the gradient clipping and last-layer freeze of
 * {@link adjustGradients}. How the teacher's outputs become targets (a centre, Sinkhorn-Knopp)
 * is the subclass's.
 *
 * - Teacher temperature: linear warm-up from `warmupTeacherTemperature` to
 *   `teacherTemperature` over the first `warmupTeacherTemperatureEpochs` epochs (solo-learn's
 *   `np.linspace` per epoch), then constant; the epoch is read before each step.
 * - {@link adjustGradients}, on the reduced gradients: with `clipGrad` > 0 each backbone
 *   parameter's gradient is scaled to norm at most `clipGrad` (solo-learn's
 *   `dino_clip_gradients`, `clip / (‖g‖ + 1e-6)`); during the first `freezeLastLayerEpochs`
 *   epochs the head's last layer gets no gradient (not updated, no momentum, no weight decay).
 */
export abstract class DinoDistillation extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    baseTau: { ...MomentumMethod.args.baseTau, default: 0.9995 },
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the head (and of its EMA teacher)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'bottleneck width of the head, before its last layer' },
    numPrototypes: { kind: 'int', default: 4096, ge: 1, description: 'output width K of the head (the width of the centre)' },
    studentTemperature: { kind: 'float', default: 0.1, gt: 0, description: 'softmax temperature of the student' },
    teacherTemperature: { kind: 'float', default: 0.07, gt: 0, description: 'softmax temperature of the teacher after the warm-up' },
    warmupTeacherTemperature: { kind: 'float', default: 0.04, gt: 0, description: 'teacher temperature at epoch 0 of the warm-up' },
    warmupTeacherTemperatureEpochs: { kind: 'int', default: 0, ge: 0, description: 'epochs of the linear teacher temperature warm-up' },
    clipGrad: { kind: 'float', default: 0, ge: 0, description: "largest norm of each backbone parameter's gradient (0: no clipping)" },
    freezeLastLayerEpochs: { kind: 'int', default: 1, ge: 0, description: "epochs during which the head's last layer gets no gradient" },
    useBnInHead: { kind: 'bool', default: false, description: "true: batch norm (--norm's kind) after each hidden layer of the head; false: none" },
  });
  declare readonly args: ArgValues<typeof DinoDistillation.args>;

  /** The student's head, `[B, F] -> [B, numPrototypes]`. */
  readonly head: DinoHead;
  /** The teacher's head (EMA copy of {@link head}). */
  readonly momentumHead: DinoHead;
  /** The epoch of the current step (set by {@link onTrainBatchStart}). */
  protected epoch = 0;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, numPrototypes, useBnInHead } = this.args;
    const head = { hiddenDim: projHiddenDim, bottleneckDim: projOutputDim, outputDim: numPrototypes, hiddenNorm: useBnInHead ? this.norm : undefined };
    this.head = this.addModule('head', new DinoHead(this.backbone.featureDim, { ...head, rng: ctx.rng }));
    this.momentumHead = this.addMomentumProjector(this.head, new DinoHead(this.backbone.featureDim, { ...head, rng: ctx.rng }));
  }

  /** The teacher temperature of `epoch`: linear from the warm-up value over the warm-up epochs, then constant. */
  teacherTemperature(epoch: number): number {
    const { warmupTeacherTemperature: start, teacherTemperature: end, warmupTeacherTemperatureEpochs: epochs } = this.args;
    return warmedUp(start, end, epochs, epoch);
  }

  override onTrainBatchStart(info: StepInfo): void {
    this.epoch = info.epoch;
  }

  /**
   * Clips each backbone gradient to norm `clipGrad` (if > 0), then drops the last layer's during
   * the first `freezeLastLayerEpochs` epochs. As DINO's `clip_gradients`: g · min(clip / (‖g‖ + 1e-6), 1),
   * computed on the device (a scalar `[]` coefficient, never read); a factor of 1 leaves g exactly as it was.
   */
  override adjustGradients(grads: Record<string, Tensor>, info: StepInfo): Record<string, Tensor> {
    const clip = this.args.clipGrad;
    const clipped = { ...grads };
    if (clip > 0) {
      for (const v of this.backbone.parameters()) {
        const g = grads[v.name];
        if (!g) continue;
        clipped[v.name] = tf.tidy(() => tf.mul(g, tf.minimum(tf.div(clip, tf.add(tf.norm(g), 1e-6)), 1)));
      }
    }
    return info.epoch < this.args.freezeLastLayerEpochs ? withoutGradients(clipped, this.head.lastLayer) : clipped;
  }
}

/** {@link DinoDistillation}'s arguments, the head's and the temperatures' first, then the gradients'. */
const { clipGrad, freezeLastLayerEpochs, useBnInHead, ...DISTILLATION_HEAD_ARGS } = DinoDistillation.args;

/**
 * DINO (Caron et al. 2021): self-distillation without labels. The student (backbone and
 * {@link DinoHead}) sees every crop, the teacher (their EMA copy, {@link DinoDistillation}) the
 * global crops; each student output `[B, K]` predicts the centred, sharpened teacher
 * distribution of every other global crop ({@link dinoLoss}).
 *
 * - Centre: a `[K]` buffer (checkpointed, compared by `verify`), moved once per optimizer
 *   step, after it ({@link onTrainBatchEnd}), with the teacher outputs' mean over the global
 *   batch (all-reduced inside the loss), so every rank holds the one-process centre. Under
 *   `--accumulate-grad-batches k` every micro-batch's loss uses the step's centre and the
 *   centre then moves with the mean over all k micro-batches ({@link StepMean}), as with one
 *   batch of kN (not k times, once per micro-batch: lightly #2062).
 * - Teacher temperature, clipping and last-layer freeze: {@link DinoDistillation}'s.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/dino.yaml`,
 * `solo/methods/dino.py`): head 2048-2048-256 -> 4096 without batch norm (`useBnInHead` false),
 * tau 0.9995 -> 1, student temperature 0.1, teacher 0.07 (warm-up from 0.04 over 0 epochs),
 * centre momentum 0.9, no clipping, last layer frozen for 1 epoch, LARS lr 0.3, classifier lr
 * 0.1, weight decay 1e-6, the asymmetric `byol` views, 2 global crops (the recipe has no local
 * crops; `--crops` adds them, e.g. DINO's `2x28:0.4-1,6x12:0.05-0.4`).
 */
export class DINO extends DinoDistillation {
  static override readonly args = defineArgs({
    ...DISTILLATION_HEAD_ARGS,
    centreMomentum: { kind: 'float', default: 0.9, ge: 0, le: 1, description: 'momentum of the teacher centre' },
    clipGrad,
    freezeLastLayerEpochs,
    useBnInHead,
  });
  declare readonly args: ArgValues<typeof DINO.args>;
  static override readonly paper: string = 'Caron et al. 2021, "Emerging Properties in Self-Supervised Vision Transformers"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-6 };
  static override readonly viewRecipe = 'byol' as const;
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, localScale: [0.05, 0.4] };

  /** `[numPrototypes]`: the teacher centre (zeros at the start). */
  readonly centre: Variable;
  /** The centres the step's micro-batches would set, applied once after the optimizer step. */
  protected readonly pendingCentre = new StepMean();

  constructor(ctx: MethodContext) {
    super(ctx);
    this.centre = this.addBuffer('centre', tf.zeros([this.args.numPrototypes]));
  }

  /** The student's outputs of every crop, then the teacher's (detached) of the global crops: `[B, K]` each. */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const student = features.map((f) => this.head.forward(f));
    const globalViews = views.slice(0, this.cropPolicy.globalCrops);
    const teacher = forwardCrops(globalViews, (x) => detach(this.momentumHead.forward(this.momentumBackbone.forward(x))));
    return [...student, ...teacher];
  }

  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const split = embeddings.length - this.cropPolicy.globalCrops;
    const [student, teacher] = [embeddings.slice(0, split) as Tensor2D[], embeddings.slice(split) as Tensor2D[]];
    const options = {
      studentTemperature: this.args.studentTemperature,
      teacherTemperature: this.teacherTemperature(this.epoch),
      centreMomentum: this.args.centreMomentum,
    };
    const { loss, centre } = dinoLoss(student, teacher, this.centre as Tensor1D, options);
    // Weighted by the micro-batch's global batch (the scoped group's), so a short micro-batch counts for its rows.
    this.pendingCentre.add(centre, batchLayout('DINO', student[0]!.shape[0], undefined).globalBatch);
    centre.dispose();
    return { loss, embeddings: student[0] };
  }

  override onTrainBatchStart(info: StepInfo): void {
    super.onTrainBatchStart(info);
    this.pendingCentre.clear();
  }

  /** After the optimizer step: the EMA update of the teacher ({@link MomentumMethod}), then the step's centre update. */
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    this.applyPendingCentre();
  }

  /** Moves the centre to the mean of the centres the losses since the last call would set (nothing if none ran). */
  protected applyPendingCentre(): void {
    this.pendingCentre.applyTo(this.centre);
  }

  override dispose(): void {
    this.pendingCentre.clear();
    super.dispose();
  }
}

/**
 * A value warmed up linearly from `start` at epoch 0 to `end` at epoch `epochs` − 1, then
 * constant (solo-learn's and DINO's `np.linspace` per epoch of the teacher temperature).
 */
export function warmedUp(start: number, end: number, epochs: number, epoch: number): number {
  if (epoch >= epochs) return end;
  return epochs === 1 ? start : start + ((end - start) * epoch) / (epochs - 1);
}
