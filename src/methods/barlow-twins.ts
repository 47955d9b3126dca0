import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { barlowTwinsLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * Barlow Twins (Zbontar et al. 2021): a three-layer projector with batch norm and the
 * cross-correlation loss (on-diagonal to 1, off-diagonal to 0, weighted by `lambd`,
 * all scaled by `scaleLoss`). Defaults are solo-learn's CIFAR recipe.
 */
export class BarlowTwins extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 2048, ge: 1, description: 'output width of the projector (the size of the cross-correlation matrix)' },
    lambd: { kind: 'float', default: 0.0051, ge: 0, description: 'weight of the off-diagonal (redundancy reduction) term' },
    scaleLoss: { kind: 'float', default: 0.1, gt: 0, description: 'factor applied to the whole loss' },
  });
  declare readonly args: ArgValues<typeof BarlowTwins.args>;
  static override readonly paper = 'Zbontar et al. 2021, "Barlow Twins: Self-Supervised Learning via Redundancy Reduction"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 };
  static override readonly viewRecipe = 'barlow' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }),
    );
  }

  /** Projections of the two views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    return {
      loss: barlowTwinsLoss(z1 as Tensor2D, z2 as Tensor2D, { lambd: this.args.lambd, scale: this.args.scaleLoss }),
      embeddings: z1,
    };
  }
}
