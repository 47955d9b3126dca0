import { asVisionTransformer, VisionTransformer } from '../backbones/vit.js';
import { withoutGradientTape } from '../core/layers.js';
import { tf, type Scalar, type Tensor, type Tensor1D, type Tensor2D, type Variable } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { ibotLoss } from '../losses/ibot.js';
import { batchLayout } from '../losses/global-batch.js';
import { defineArgs, type ArgValues } from './args.js';
import { embeddingStd, type MethodContext, type OptimDefaults, type SampleKeys, type SslLossOutput, type StepInfo, type StepOutput } from './base.js';
import { DINO, warmedUp } from './dino.js';
import { forwardCrops } from './forward-crops.js';
import { BLOCK_MASK_ARGS, checkMaskRatio, clsToken, encodeMaskedCrops, headOfMaskedPatches, headOfTokens, patchTokens } from './masked-tokens.js';
import { StepMean } from './step-mean.js';

/**
 * iBOT (Zhou et al. 2022): DINO ({@link DINO}: its head, `[CLS]` loss, centre, EMA teacher,
 * clipping and last-layer freeze) plus masked image modelling with an online tokenizer. Each
 * global crop's patches are block-masked for the student ({@link encodeMaskedCrops}, keyed per sample
 * by (seed, epoch, index, crop)), the masked patch embeddings replaced by a learnable mask
 * token (`maskToken` `[D]`, a parameter of the method, not of the ViT:
 * {@link VisionTransformer.encodeTokens}); the teacher sees the unmasked crop. The one head
 * (iBOT's `shared_head`) maps the output tokens to K prototypes: the teacher's every token
 * (all patches enter the patch centre; computed off the gradient tape), the student's `[CLS]`
 * and masked patch tokens only (the others do not enter the loss: with iBOT's masks about 15%
 * of the patches, which keeps `verify` at its defaults, batch 256 of 49 patches and K = 8192,
 * within memory); the loss ({@link ibotLoss})
 * is DINO's on the `[CLS]` outputs plus the cross-entropy of the student's masked patches
 * against the teacher's centred, sharpened patch distributions. Local crops give the student
 * `[CLS]` outputs only. The online classifier reads the student's `[CLS]` features of the
 * (masked) global crops, as MAE's does. ViT backbones only.
 *
 * - State: the `[CLS]` centre (DINO's `centre`) and the patch centre `patchCentre` `[K]`, both
 *   buffers (checkpointed, compared by `verify`), each moved once per optimizer step, after it,
 *   by the mean over the step's micro-batches ({@link StepMean}) of the global batch's teacher
 *   means (all-reduced inside the loss), as with one batch of kN under
 *   `--accumulate-grad-batches k`; the EMA teacher likewise once a step.
 * - Teacher temperatures: `[CLS]` and patch each warmed up linearly over
 *   `warmupTeacherTemperatureEpochs` (iBOT's `teacher_temp_schedule`, `teacher_temp2_schedule`).
 *
 * Defaults: bytedance/ibot's ViT-S/16 command (README) where it sets them (out_dim 8192 with a
 * shared head, teacher temperature 0.04 -> 0.07 over 30 epochs, masks `--pred_ratio 0 0.3
 * --pred_ratio_var 0 0.2`: half the images unmasked, the others 0.1-0.5 of their patches),
 * `main_ibot.py`'s argparse defaults otherwise (teacher momentum 0.996 -> 1, patch temperature
 * 0.04 -> 0.07, centre momenta 0.9, λ2 1, clip 3.0, last layer frozen for 1 epoch, AdamW lr
 * 5e-4 per 256, weight decay 0.04 (its start value; ssl-zoo has no weight-decay schedule),
 * student temperature 0.1, local crop scale 0.05-0.4). Differences: the last layer's weight
 * norm is frozen at 1 (DINO's head, `norm_last_layer` true, `main_ibot.py`'s default; the ViT-S
 * command trains it), clipping applies to the backbone only (DINO's, solo-learn's), 2 global
 * crops and no local ones unless `--crops` adds them.
 */
export class IBOT extends DINO {
  static override readonly args = defineArgs({
    ...DINO.args,
    baseTau: { ...DINO.args.baseTau, default: 0.996 },
    numPrototypes: { ...DINO.args.numPrototypes, default: 8192, description: 'output width K of the head, for the [CLS] and the patch tokens' },
    teacherTemperature: { ...DINO.args.teacherTemperature, default: 0.07 },
    warmupTeacherTemperatureEpochs: {
      ...DINO.args.warmupTeacherTemperatureEpochs,
      default: 30,
      description: 'epochs of the linear warm-up of both teacher temperatures',
    },
    clipGrad: { ...DINO.args.clipGrad, default: 3 },
    teacherPatchTemperature: { kind: 'float', default: 0.07, gt: 0, description: "softmax temperature of the teacher's patch tokens after the warm-up" },
    warmupTeacherPatchTemperature: { kind: 'float', default: 0.04, gt: 0, description: "teacher's patch temperature at epoch 0 of the warm-up" },
    patchCentreMomentum: { kind: 'float', default: 0.9, ge: 0, le: 1, description: 'momentum of the patch centre' },
    patchLossWeight: { kind: 'float', default: 1, ge: 0, description: 'weight of the masked-patch loss (lambda2)' },
    ...BLOCK_MASK_ARGS,
  });
  declare readonly args: ArgValues<typeof IBOT.args>;
  static override readonly paper = 'Zhou et al. 2022, "iBOT: Image BERT Pre-Training with Online Tokenizer"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 5e-4, classifierLr: 0.1, weightDecay: 0.04 };
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, localScale: [0.05, 0.4] };
  static override readonly defaultBackbone: string = 'vit_tiny';

  /** The student ViT (the backbone). */
  readonly vit: VisionTransformer;
  /** `[D]`: the embedding of a masked patch (zeros at the start, as iBOT's `masked_embed`). */
  readonly maskToken: Variable;
  /** `[K]`: the teacher's patch centre (zeros at the start). */
  readonly patchCentre: Variable;
  /** The patch centres the step's micro-batches would set, applied once after the optimizer step. */
  private readonly pendingPatchCentre = new StepMean();

  constructor(ctx: MethodContext) {
    super(ctx);
    this.vit = asVisionTransformer(this.backbone, 'ibot');
    checkMaskRatio(this.args.maskRatio, this.args.maskRatioVariation);
    this.maskToken = this.addParameter('maskToken', tf.zeros([this.vit.featureDim]));
    this.patchCentre = this.addBuffer('patchCentre', tf.zeros([this.args.numPrototypes]));
  }

  /** The teacher's patch temperature of `epoch`: linear from the warm-up value over the warm-up epochs, then constant. */
  teacherPatchTemperature(epoch: number): number {
    const { warmupTeacherPatchTemperature: start, teacherPatchTemperature: end, warmupTeacherTemperatureEpochs: epochs } = this.args;
    return warmedUp(start, end, epochs, epoch);
  }

  /** iBOT's step owns the student's (masked) encoder pass, so the gradient cache's split form does not apply. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The iBOT loss of the views (the global crops first, `[B, S, S, C]` each; masks keyed by
   * `samples`), plus the online classifier's cross-entropy on the detached `[CLS]` features
   * of the student's global crops.
   */
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    if (!samples) throw new Error("iBOT.trainingStep needs the batch's sample keys (seed, epoch, indices) to draw its masks");
    const crops = this.cropPolicy.globalCrops;
    const [globalViews, localViews] = [views.slice(0, crops), views.slice(crops)];
    const masking = { ratio: this.args.maskRatio, ratioVariation: this.args.maskRatioVariation, maskProbability: this.args.maskProbability };
    const { masks, tokens: student } = encodeMaskedCrops(this.vit, globalViews, samples, masking, this.maskToken);
    const features = [...student.map(clsToken), ...(localViews.length > 0 ? forwardCrops(localViews, (x) => this.backbone.forward(x)) : [])];
    const studentCls = features.map((f) => this.head.forward(f) as Tensor2D);
    // The head on the masked patches only: the others do not enter the loss.
    const studentMasked = student.map((tokens, g) => headOfMaskedPatches(this.head, tokens, masks[g]!, this.args.numPrototypes));
    // The teacher off the gradient tape: its [B, L, K] outputs are constants, kept only as long as the loss needs them.
    const teacherVit = this.momentumBackbone as VisionTransformer;
    const teacher = withoutGradientTape(() =>
      tf.tidy(() =>
        globalViews.map((view) => {
          const out = headOfTokens(this.momentumHead, teacherVit.encodeTokens(view));
          return { cls: clsToken(out), patch: patchTokens(out) };
        }),
      ),
    );
    const options = {
      studentTemperature: this.args.studentTemperature,
      teacherTemperature: this.teacherTemperature(this.epoch),
      teacherPatchTemperature: this.teacherPatchTemperature(this.epoch),
      centreMomentum: this.args.centreMomentum,
      patchCentreMomentum: this.args.patchCentreMomentum,
      patchLossWeight: this.args.patchLossWeight,
    };
    const out = this.inGroup(() => {
      const result = ibotLoss(
        studentCls,
        teacher.map((t) => t.cls),
        studentMasked,
        teacher.map((t) => t.patch),
        masks,
        this.centre as Tensor1D,
        this.patchCentre as Tensor1D,
        options,
      );
      // Weighted by the micro-batch's global batch (the scoped group's), so a short micro-batch counts for its rows.
      const weight = batchLayout('iBOT', studentCls[0]!.shape[0], undefined).globalBatch;
      this.pendingCentre.add(result.centre, weight);
      this.pendingPatchCentre.add(result.patchCentre, weight);
      tf.dispose([result.centre, result.patchCentre]);
      return result;
    });
    const classifier = this.classifierTerms(features, labels);
    const total = tf.add(out.loss, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = { loss: out.loss, ...classifier, cls: out.cls, patch: out.patch, embedding_std: embeddingStd(studentCls[0]!) };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /** Not used: {@link trainingStep} is iBOT's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('iBOT has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }

  /** Not used: {@link trainingStep} is iBOT's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('iBOT has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }

  override onTrainBatchStart(info: StepInfo): void {
    super.onTrainBatchStart(info);
    this.pendingPatchCentre.clear();
  }

  /** After the optimizer step: DINO's (the EMA teacher, the `[CLS]` centre), then the step's patch centre. */
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    this.applyPendingPatchCentre();
  }

  /** Moves the patch centre to the mean of the patch centres the losses since the last call would set (nothing if none ran). */
  protected applyPendingPatchCentre(): void {
    this.pendingPatchCentre.applyTo(this.patchCentre);
  }

  override dispose(): void {
    this.pendingPatchCentre.clear();
    super.dispose();
  }
}
