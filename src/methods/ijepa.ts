import { invalidValue } from '../core/errors.js';
import { detach } from '../core/ops.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import { asVisionTransformer, VisionTransformer } from '../backbones/vit.js';
import type { CropPolicy } from '../data/augment/crops.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { ijepaLoss, type IjepaDistance } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { MethodContext, OptimDefaults, SampleKeys, SslLossOutput, StepOutput } from './base.js';
import { checkMultiBlockOptions, multiBlockMasks, type MultiBlockMasks, type MultiBlockOptions } from './ijepa-masking.js';
import { IjepaPredictor } from './ijepa-predictor.js';
import { MomentumMethod } from './momentum.js';

/**
 * I-JEPA (Assran et al. 2023). Each image gets multi-block masks ({@link multiBlockMasks}:
 * `numTargets` target blocks and one context block minus the targets, drawn per sample from
 * its key); the ViT (the context encoder) encodes the context patches
 * ({@link VisionTransformer.encodeKept}); its EMA copy (the target encoder,
 * {@link MomentumMethod}) encodes every patch of the full image; the narrow
 * {@link IjepaPredictor} predicts, for each target block, its patches' target embeddings from
 * the context tokens; the loss ({@link ijepaLoss}) is the smooth-L1 distance to the
 * LayerNorm'ed target embeddings, averaged over every target patch of the GLOBAL batch.
 *
 * ssl-zoo's ViT has a `[CLS]` token (I-JEPA's has none): both encoders run with it, the
 * predictor sees only the patch tokens, and the online classifier reads the context encoder's
 * `[CLS]` output. Samples whose target blocks differ in size are predicted in separate
 * predictor calls (one per block size), which changes nothing per row.
 *
 * State: the target encoder, moved once per optimizer step (after it) by the EMA; nothing else
 * (no global statistic couples the samples: the loss is a mean, W ranks equal one process).
 *
 * Defaults. The reference publishes only ImageNet recipes (ViT-H/14 and larger,
 * `configs/in1k_vith14_ep300.yaml`); its masks are used as they are (4 target blocks of 0.15-0.2
 * of the grid with aspect 0.75-1.5, a square context block of 0.85-1), which on ssl-zoo's
 * 4 px patches of 28-32 px images (7x7 or 8x8 grid) gives target blocks of 6-12 patches;
 * `contextPatches` 11 is the reference's `min_keep` 10 plus one, the smallest context the
 * reference accepts and the usual batch minimum it cuts to on these grids. The predictor is
 * the reference's `init_model` default (`src/helper.py`: depth 6, width 384 for ViT-Base's 768,
 * half the encoder's) scaled to the default ViT-Tiny: width 96, depth 6, the encoder's 3 heads.
 * AdamW lr 1e-3 per 2048 images (1.25e-4 per 256, ssl-zoo scales by batch / 256), weight
 * decay 0.04 (the reference's start; it rises to 0.4 on a cosine, ssl-zoo keeps it constant),
 * EMA 0.996 -> 1 (the reference's range; its schedule is linear, ssl-zoo's
 * {@link MomentumMethod} cosine), smooth-L1 with beta 1. One view: the `reconstruction` recipe
 * (random resized crop and a horizontal flip; the reference crops without flipping).
 * ViT backbones only.
 */
export class IJEPA extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    baseTau: { ...MomentumMethod.args.baseTau, default: 0.996 },
    predictorEmbedDim: { kind: 'int', default: 96, ge: 4, description: 'width E of the predictor tokens (a multiple of 4 and of predictorNumHeads)' },
    predictorDepth: { kind: 'int', default: 6, ge: 1, description: 'transformer blocks of the predictor' },
    predictorNumHeads: { kind: 'int', default: 3, ge: 1, description: 'attention heads of the predictor blocks' },
    numTargets: { kind: 'int', default: 4, ge: 1, description: 'target blocks per image (num_pred_masks)' },
    targetScaleMin: { kind: 'float', default: 0.15, gt: 0, le: 1, description: 'smallest area of a target block, as a fraction of the patch grid' },
    targetScaleMax: { kind: 'float', default: 0.2, gt: 0, le: 1, description: 'largest area of a target block' },
    targetAspectMin: { kind: 'float', default: 0.75, gt: 0, description: 'smallest height/width ratio of a target block' },
    targetAspectMax: { kind: 'float', default: 1.5, gt: 0, description: 'largest height/width ratio of a target block' },
    contextScaleMin: { kind: 'float', default: 0.85, gt: 0, le: 1, description: 'smallest area of the (square) context block' },
    contextScaleMax: { kind: 'float', default: 1, gt: 0, le: 1, description: 'largest area of the context block' },
    contextPatches: { kind: 'int', default: 11, ge: 1, description: 'patches every context keeps (the reference: the batch minimum, > min_keep 10)' },
    distance: { kind: 'choice', default: 'smooth_l1', choices: ['smooth_l1', 'mse'], description: 'distance between predicted and target embeddings' },
  });
  declare readonly args: ArgValues<typeof IJEPA.args>;
  static override readonly paper: string = 'Assran et al. 2023, "Self-Supervised Learning from Images with a Joint-Embedding Predictive Architecture"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 1.25e-4, classifierLr: 1e-3, weightDecay: 0.04 };
  static override readonly viewRecipe: ViewRecipe = 'reconstruction';
  static override readonly crops: CropPolicy = Object.freeze({ globalCrops: 1, multiCrop: false });
  static override readonly defaultBackbone: string = 'vit_tiny';

  readonly encoder: VisionTransformer;
  readonly targetEncoder: VisionTransformer;
  readonly predictor: IjepaPredictor;
  readonly masking: MultiBlockOptions;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.encoder = asVisionTransformer(this.backbone, 'ijepa');
    this.targetEncoder = asVisionTransformer(this.momentumBackbone, 'ijepa');
    const a = this.args;
    if (a.predictorEmbedDim % 4 !== 0 || a.predictorEmbedDim % a.predictorNumHeads !== 0) {
      throw invalidValue('method_args.predictor_embed_dim', a.predictorEmbedDim, `a multiple of 4 and of predictor_num_heads (${a.predictorNumHeads})`);
    }
    for (const [name, lo, hi] of [
      ['target_scale', a.targetScaleMin, a.targetScaleMax],
      ['target_aspect', a.targetAspectMin, a.targetAspectMax],
      ['context_scale', a.contextScaleMin, a.contextScaleMax],
    ] as const) {
      if (lo > hi) throw invalidValue(`method_args.${name}_min`, lo, `at most ${name}_max (${hi})`);
    }
    this.masking = {
      gridSize: this.encoder.gridSize,
      numTargets: a.numTargets,
      targetScale: [a.targetScaleMin, a.targetScaleMax],
      targetAspect: [a.targetAspectMin, a.targetAspectMax],
      contextScale: [a.contextScaleMin, a.contextScaleMax],
      contextPatches: a.contextPatches,
    };
    checkMultiBlockOptions(this.masking);
    this.predictor = this.addModule(
      'predictor',
      new IjepaPredictor({
        inDim: this.encoder.featureDim,
        embedDim: a.predictorEmbedDim,
        depth: a.predictorDepth,
        numHeads: a.predictorNumHeads,
        gridSize: this.encoder.gridSize,
        rng: ctx.rng,
      }),
    );
  }

  /** I-JEPA's step owns the encoder passes (masked), so the gradient cache's split form does not apply. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The prediction loss averaged over the views (one by default; `[B, S, S, C]` each, S the
   * backbone's image size, masks keyed by `samples` and the view), plus the online classifier's
   * cross-entropy on the context encoder's detached `[CLS]` outputs.
   */
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    if (!samples) throw new Error("IJEPA.trainingStep needs the batch's sample keys (seed, epoch, indices) to draw its masks");
    const clsFeatures: Tensor[] = [];
    let prediction = tf.scalar(0) as Scalar;
    views.forEach((view, v) => {
      const { loss, cls } = this.viewLoss(view, multiBlockMasks(samples, this.masking, v));
      clsFeatures.push(cls);
      prediction = tf.add(prediction, loss) as Scalar;
    });
    prediction = tf.div(prediction, views.length) as Scalar;
    const classifier = this.classifierTerms(clsFeatures, labels);
    const total = tf.add(prediction, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = { loss: prediction, ...classifier };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /** One view's prediction loss with its `masks`, and the context encoder's `[CLS]` outputs `[B, F]`. */
  private viewLoss(x: Tensor, masks: MultiBlockMasks): { loss: Scalar; cls: Tensor } {
    const [b, h, w] = x.shape as [number, number, number, number];
    const g = this.encoder.gridSize;
    const p = this.encoder.config.patchSize;
    if (Math.floor(h / p) !== g || Math.floor(w / p) !== g) {
      throw invalidValue('crops', `${h}x${w}`, `crops of the backbone's image size (${g * p} px) for method ijepa`);
    }
    const f = this.encoder.featureDim;
    const numPatches = g * g;
    const k = this.masking.contextPatches;
    const everyPatch = Int32Array.from({ length: b * numPatches }, (_, i) => i % numPatches);
    const targetTokens = tf.tidy(() => {
      const full = detach(this.targetEncoder.encodeKept(x, everyPatch, numPatches)); // [B, 1 + L, F]
      return tf.reshape(tf.slice(full, [0, 1, 0], [b, numPatches, f]), [b * numPatches, f]);
    });
    const encoded = this.encoder.encodeKept(x, masks.context, k); // [B, 1 + K, F]
    const cls = tf.reshape(tf.slice(encoded, [0, 0, 0], [b, 1, f]), [b, f]);
    const contextTokens = tf.slice(encoded, [0, 1, 0], [b, k, f]);
    const predictions: Tensor[] = [];
    const targets: Tensor[] = [];
    for (const size of [...new Set(masks.targetSize)].sort((m, n) => m - n)) {
      const samplesOfSize = masks.targetSize.flatMap((s, i) => (s === size ? [i] : []));
      const sampleOfRow = samplesOfSize.flatMap((i) => Array<number>(this.masking.numTargets).fill(i));
      const contextIndices = Int32Array.from(sampleOfRow.flatMap((i) => [...masks.context.subarray(i * k, (i + 1) * k)]));
      const targetIndices = Int32Array.from(samplesOfSize.flatMap((i) => [...masks.targets[i]!]));
      const rows = tf.gather(contextTokens, tf.tensor1d(sampleOfRow, 'int32'));
      predictions.push(tf.reshape(this.predictor.predict(rows, contextIndices, targetIndices), [targetIndices.length, f]));
      const flat = samplesOfSize.flatMap((i) => [...masks.targets[i]!].map((patch) => i * numPatches + patch));
      targets.push(tf.gather(targetTokens, tf.tensor1d(flat, 'int32')));
    }
    const distance = this.args.distance as IjepaDistance;
    const loss = this.inGroup(() => ijepaLoss(tf.concat(predictions, 0) as tf.Tensor2D, tf.concat(targets, 0) as tf.Tensor2D, { distance }));
    return { loss, cls };
  }

  /** Not used: {@link trainingStep} is I-JEPA's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('IJEPA has no split embed/loss form; its trainingStep masks and encodes the view itself');
  }

  /** Not used: {@link trainingStep} is I-JEPA's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('IJEPA has no split embed/loss form; its trainingStep masks and encodes the view itself');
  }
}
