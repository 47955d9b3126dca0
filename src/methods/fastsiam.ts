import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import type { CropPolicy } from '../data/augment/crops.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { fastSiamLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { SimSiam, simSiamHeads } from './simsiam.js';

/** FastSiam's views per sample (lightly's `FastSiamTransform(num_views=4)`): 3 targets averaged for each prediction. */
export const FASTSIAM_VIEWS = 4;

/**
 * FastSiam (Pototzky et al. 2022): SimSiam's projector and predictor on four views of each
 * sample; each view's prediction is pulled towards the mean of the other three views'
 * *detached* projections ({@link fastSiamLoss}), a lower-variance target than SimSiam's single
 * view, which is what lets it train with small batches on one GPU.
 *
 * Defaults: lightly's CIFAR-10 benchmark (`benchmarks/cifar10_benchmark.py`, `FastSiamModel`,
 * which subclasses its `SimSiamModel`): `SimSiamProjectionHead(F, 2048, 2048)` (Linear without
 * bias-BN-ReLU twice, then Linear-BN without affine), `SimSiamPredictionHead(2048, 512, 2048)`,
 * 4 views, SGD with momentum 0.9, lr 0.06 at its batch of 512 without lr scaling (0.03 per 256
 * samples here) under a cosine schedule, weight decay 5e-4, one optimizer group (the predictor
 * is scheduled with the rest, unlike SimSiam's solo-learn recipe). Views: SimSiam's
 * `symmetric_weak` recipe, the closest to lightly's `FastSiamTransform` (SimSiam's colour
 * jitter 0.4/0.4/0.4/0.1 with probability 0.8, grayscale 0.2), on every one of the four views.
 */
export class FastSiam extends BaseMethod {
  static override readonly args = defineArgs({ ...SimSiam.args });
  declare readonly args: ArgValues<typeof FastSiam.args>;
  static override readonly paper: string = 'Pototzky et al. 2022, "FastSiam: Resource-Efficient Self-supervised Learning on a Single GPU"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.03, classifierLr: 0.1, weightDecay: 5e-4 };
  static override readonly viewRecipe: ViewRecipe = 'symmetric_weak';
  static override readonly crops: CropPolicy = Object.freeze({ globalCrops: FASTSIAM_VIEWS, multiCrop: false });

  /** `[B, F] -> [B, projOutputDim]`: Linear-BN-ReLU twice, then Linear-BN (no affine). */
  readonly projector: Sequential;
  /** `[B, projOutputDim] -> [B, projOutputDim]`: Linear-BN-ReLU-Linear. */
  readonly predictor: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const heads = simSiamHeads(this.backbone.featureDim, this.args, this.norm, ctx.rng);
    this.projector = this.addModule('projector', heads.projector);
    this.predictor = this.addModule('predictor', heads.predictor);
  }

  /** Predictions then projections of the V views: `[p_0 .. p_{V-1}, z_0 .. z_{V-1}]`, `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    const z = features.map((f) => this.projector.forward(f));
    return [...z.map((zi) => this.predictor.forward(zi)), ...z];
  }

  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const views = embeddings.length / 2;
    const predictions = embeddings.slice(0, views) as Tensor2D[];
    const projections = embeddings.slice(views) as Tensor2D[];
    return { loss: fastSiamLoss(predictions, projections), embeddings: projections[0] };
  }
}
