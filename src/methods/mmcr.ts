import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { mmcrLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/** MMCR's views per sample: lightly's `MMCRTransform(k=8)` (the official CIFAR recipe takes 40, see {@link MMCR}). */
export const MMCR_VIEWS = 8;

/**
 * MMCR (Yerxa et al. 2023): maximum manifold capacity. Each sample's views are embedded on the
 * unit sphere and averaged into a centroid; the loss maximises the nuclear norm of the global
 * batch's centroid matrix (spreading the samples' manifolds over many directions), optionally
 * minus λ times the mean nuclear norm of each sample's views ({@link mmcrLoss}). The singular
 * values come from a float64 eigen-solver (`src/core/eigen.ts`: tfjs has no SVD).
 *
 * Defaults: the official CIFAR-10 recipe (`ThomasYerxa/mmcr`, `pretrain_cifar_stl.py`,
 * `mmcr/cifar_stl/train.py`, `models.py`): projector 512 -> 128 (Linear without bias-BN-ReLU,
 * Linear without bias), λ 0, Adam at lr 1e-3 with weight decay 1e-6 (AdamW here; at 1e-6 the
 * difference is negligible), lr 1e-3 per 256 samples, so the default batch of 256 trains at the
 * official lr (its batch is 32 samples of 40 views). Views: 8 a sample (lightly's
 * `MMCRTransform` default k; 40 views of 256 samples would be 10240 images a step), from BYOL's
 * recipe, whose two views alternate over the eight (lightly applies BYOL's first view to all).
 */
export class MMCR extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 512, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 128, ge: 1, description: 'output width D of the projector (the centroid matrix is N x D)' },
    lambda: { kind: 'float', default: 0, ge: 0, description: "weight of the mean nuclear norm of each sample's views (0: the centroids' term alone)" },
  });
  declare readonly args: ArgValues<typeof MMCR.args>;
  static override readonly paper = 'Yerxa et al. 2023, "Learning Efficient Coding of Natural Images with Maximum Manifold Capacity Representations"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 1e-3, classifierLr: 1e-3, weightDecay: 1e-6 };
  static override readonly viewRecipe = 'byol' as const;
  static override readonly crops: CropPolicy = Object.freeze({ globalCrops: MMCR_VIEWS, multiCrop: false });

  /** `[B, F] -> [B, projOutputDim]`: Linear-BN-ReLU-Linear, no biases. */
  readonly projector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng, bias: false }),
    );
  }

  /** Projections of the V views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss(views: Tensor[]): SslLossOutput {
    return { loss: mmcrLoss(views as Tensor2D[], { lambda: this.args.lambda }), embeddings: views[0] };
  }
}
