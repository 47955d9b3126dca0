import { asVisionTransformer, VisionTransformer } from '../backbones/vit.js';
import { withoutGradientTape } from '../core/layers.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar, type Tensor, type Tensor2D, type Variable } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { dinov2Loss, DINOV2_DEFAULTS } from '../losses/dinov2.js';
import { defineArgs, type ArgValues } from './args.js';
import { embeddingStd, type MethodContext, type OptimDefaults, type SampleKeys, type SslLossOutput, type StepOutput } from './base.js';
import { DinoDistillation } from './dino.js';
import { forwardCrops } from './forward-crops.js';
import { BLOCK_MASK_ARGS, checkMaskRatio, clsToken, encodeMaskedCrops, headOfMaskedPatches } from './masked-tokens.js';

/**
 * DINOv2 (Oquab et al. 2023; facebookresearch/dinov2 `ssl_meta_arch.py` with
 * `train.centering: sinkhorn_knopp`): iBOT's student-teacher pair without centres. The
 * student ViT sees each global crop block-masked ({@link encodeMaskedCrops}, keyed per sample
 * by (seed, epoch, index, crop); the masked patch embeddings replaced by the learnable mask
 * token `maskToken` `[D]`, as iBOT's) and every local crop; the EMA teacher sees the unmasked
 * global crops. One head (the reference's default `ibot.separate_head: false`) maps the
 * student's `[CLS]` and masked patch tokens, and the teacher's `[CLS]` and the same masked
 * patch tokens (computed off the gradient tape), to K prototypes. The loss ({@link dinov2Loss})
 * is DINO's on the `[CLS]` outputs plus iBOT's on the masked patches, each against the
 * teacher's Sinkhorn-Knopp assignments (ε = the teacher temperature) over the GLOBAL batch,
 * plus KoLeo (weight 0.1) of the student's backbone `[CLS]` features of each global crop over
 * the GLOBAL batch (the reference computes KoLeo per GPU). The online classifier reads the
 * student's `[CLS]` features of the (masked) global crops. ViT backbones only.
 *
 * - State: the EMA teacher only (no centre: Sinkhorn-Knopp replaces it), moved once per
 *   optimizer step, after it. Under `--accumulate-grad-batches k` the Sinkhorn-Knopp balancing
 *   and KoLeo's neighbours are those of each micro-batch's global batch (they couple the rows
 *   of one micro-batch, as SwAV's and MSN's Sinkhorn-Knopp), every micro-batch sees the
 *   step's teacher.
 * - Teacher temperature: 0.04 -> 0.07 over 30 epochs (DINOv2's `teacher` config), the `[CLS]`
 *   and the patches alike.
 *
 * Defaults: DINOv2's `ssl_default_config.yaml` for the loss (student temperature 0.1, KoLeo
 * 0.1, iBOT weight 1, masks `mask_ratio_min_max [0.1, 0.5]` with probability 0.5, 3
 * Sinkhorn-Knopp iterations, teacher momentum 0.992 -> 1, clip 3.0, last layer frozen for 1
 * epoch, head 2048-2048-256, local crop scale 0.05-0.32; DINO's augmentations, the `byol` views). DINOv2 publishes ImageNet/LVD-142M
 * recipes only (K 65536 to 131072, AdamW 0.004 × sqrt(batch / 1024), weight decay 0.04 ->
 * 0.4, layer-wise decay 0.9): the small-data settings are iBOT's, as `ibot` uses them (K
 * 8192, AdamW lr 5e-4 per 256, weight decay 0.04), 2 global crops and no local ones unless
 * `--crops` adds them.
 */
export class DINOv2 extends DinoDistillation {
  static override readonly args = defineArgs({
    ...DinoDistillation.args,
    baseTau: { ...DinoDistillation.args.baseTau, default: 0.992 },
    numPrototypes: { ...DinoDistillation.args.numPrototypes, default: 8192, description: 'output width K of the head, for the [CLS] and the patch tokens' },
    warmupTeacherTemperatureEpochs: { ...DinoDistillation.args.warmupTeacherTemperatureEpochs, default: 30 },
    clipGrad: { ...DinoDistillation.args.clipGrad, default: 3 },
    sinkhornIterations: {
      kind: 'int',
      default: DINOV2_DEFAULTS.sinkhornIterations,
      ge: 1,
      description: "Sinkhorn-Knopp iterations on the teacher's outputs over the global batch",
    },
    patchLossWeight: { kind: 'float', default: DINOV2_DEFAULTS.patchLossWeight, ge: 0, description: 'weight of the masked-patch (iBOT) loss' },
    koleoWeight: { kind: 'float', default: DINOV2_DEFAULTS.koleoWeight, ge: 0, description: "weight of KoLeo of the student's [CLS] features (0: none)" },
    ...BLOCK_MASK_ARGS,
  });
  declare readonly args: ArgValues<typeof DINOv2.args>;
  static override readonly paper = 'Oquab et al. 2023, "DINOv2: Learning Robust Visual Features without Supervision"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 5e-4, classifierLr: 0.1, weightDecay: 0.04 };
  static override readonly viewRecipe = 'byol' as const;
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, localScale: [0.05, 0.32] };
  static override readonly defaultBackbone: string = 'vit_tiny';

  /** The student ViT (the backbone). */
  readonly vit: VisionTransformer;
  /** `[D]`: the embedding of a masked patch (zeros at the start, as DINOv2's `mask_token`). */
  readonly maskToken: Variable;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.vit = asVisionTransformer(this.backbone, 'dinov2');
    checkMaskRatio(this.args.maskRatio, this.args.maskRatioVariation);
    this.maskToken = this.addParameter('maskToken', tf.zeros([this.vit.featureDim]));
  }

  /** DINOv2's step owns the student's (masked) encoder pass, so the gradient cache's split form does not apply. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The DINOv2 loss of the views (the global crops first; masks keyed by `samples`), plus the
   * online classifier's cross-entropy on the detached `[CLS]` features of the student's global crops.
   */
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    if (!samples) throw new Error("DINOv2.trainingStep needs the batch's sample keys (seed, epoch, indices) to draw its masks");
    const crops = this.cropPolicy.globalCrops;
    const [globalViews, localViews] = [views.slice(0, crops), views.slice(crops)];
    const k = this.args.numPrototypes;
    const masking = { ratio: this.args.maskRatio, ratioVariation: this.args.maskRatioVariation, maskProbability: this.args.maskProbability };
    const { masks, tokens: student } = encodeMaskedCrops(this.vit, globalViews, samples, masking, this.maskToken);
    const globalFeatures = student.map(clsToken);
    const features = [...globalFeatures, ...(localViews.length > 0 ? forwardCrops(localViews, (x) => this.backbone.forward(x)) : [])];
    const studentCls = features.map((f) => this.head.forward(f) as Tensor2D);
    const studentMasked = student.map((tokens, g) => headOfMaskedPatches(this.head, tokens, masks[g]!, k));
    // The teacher off the gradient tape: its [CLS] and masked patch outputs are constants.
    const teacherVit = this.momentumBackbone as VisionTransformer;
    const teacher = withoutGradientTape(() =>
      tf.tidy(() =>
        globalViews.map((view, g) => {
          const tokens = teacherVit.encodeTokens(view);
          return { cls: this.momentumHead.forward(clsToken(tokens)) as Tensor2D, masked: headOfMaskedPatches(this.momentumHead, tokens, masks[g]!, k) };
        }),
      ),
    );
    const options = {
      studentTemperature: this.args.studentTemperature,
      teacherTemperature: this.teacherTemperature(this.epoch),
      sinkhornIterations: this.args.sinkhornIterations,
      patchLossWeight: this.args.patchLossWeight,
      koleoWeight: this.args.koleoWeight,
    };
    const out = this.inGroup(() =>
      dinov2Loss(
        studentCls,
        teacher.map((t) => t.cls),
        studentMasked,
        teacher.map((t) => t.masked),
        masks,
        globalFeatures,
        options,
        undefined,
        this.koleoGroup(),
      ),
    );
    const classifier = this.classifierTerms(features, labels);
    const total = tf.add(out.loss, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = {
      loss: out.loss,
      ...classifier,
      cls: out.cls,
      patch: out.patch,
      koleo: out.koleo,
      embedding_std: embeddingStd(studentCls[0]!),
    };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /**
   * The group KoLeo's nearest neighbours are searched over: undefined, the step's (the global
   * batch). The reference's per-GPU KoLeo would be a `SingleProcessGroup` (the negative control
   * of the distributed tests).
   */
  protected koleoGroup(): ProcessGroup | undefined {
    return undefined;
  }

  /** Not used: {@link trainingStep} is DINOv2's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('DINOv2 has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }

  /** Not used: {@link trainingStep} is DINOv2's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('DINOv2 has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }
}
