import type { Tensor, Tensor2D } from '../core/tf.js';
import { IterNorm } from '../core/iter-norm.js';
import type { Sequential } from '../core/layers.js';
import { vibcregLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * VIbCReg (Lee & Aune 2021): VICReg with a normalised covariance (correlation) term and an
 * IterNorm layer ending the projector: Linear-BN-GELU twice, Linear, IterNorm (group
 * whitening by Newton-Schulz iterations, {@link IterNorm}). The loss ({@link vibcregLoss})
 * takes its variance and correlation over the global batch; IterNorm's statistics are the
 * global batch's too once converted to SyncIterNorm (`--sync-batchnorm`, the default with
 * W ranks, converts it with the batch norms), so the method is exact over W ranks.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/vibcreg.yaml`): projector
 * 2048-2048-2048 with IterNorm (64 groups, T = 5), weights 25 / 25 / 200, LARS lr 0.3,
 * classifier lr 0.1, weight decay 1e-4, VICReg's views (ColorJitter(0.4, 0.4, 0.2, 0.1),
 * solarization p = 0.1 on both views).
 */
export class VIbCReg extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'width of the two hidden layers of the projector' },
    projOutputDim: { kind: 'int', default: 2048, ge: 1, description: 'output width of the projector (the embeddings the loss compares)' },
    simLossWeight: { kind: 'float', default: 25, ge: 0, description: 'weight of the invariance (MSE) term' },
    varLossWeight: { kind: 'float', default: 25, ge: 0, description: "weight of the variance term (hinge on the std, the two views' summed)" },
    covLossWeight: { kind: 'float', default: 200, ge: 0, description: 'weight of the normalised covariance (off-diagonal correlation) term' },
    iternorm: { kind: 'bool', default: true, description: 'end the projector with IterNorm (true) or not (false)' },
    iternormGroups: { kind: 'int', default: 64, ge: 1, description: "IterNorm's feature groups (solo-learn's grouping: adjusted to divide projOutputDim)" },
    iternormIterations: { kind: 'int', default: 5, ge: 1, description: "IterNorm's Newton-Schulz iterations T" },
  });
  declare readonly args: ArgValues<typeof VIbCReg.args>;
  static override readonly paper =
    'Lee & Aune 2021, "VIbCReg: Variance-Invariance-better-Covariance Regularization for Self-Supervised Learning on Time Series"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 };
  static override readonly viewRecipe = 'vicreg' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, iternorm, iternormGroups, iternormIterations } = this.args;
    const outputLayer = iternorm ? new IterNorm(projOutputDim, { numGroups: iternormGroups, iterations: iternormIterations }) : undefined;
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng, activation: 'gelu', outputLayer }),
    );
  }

  /** Projections of the two views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    const { simLossWeight: simWeight, varLossWeight: varWeight, covLossWeight: covWeight } = this.args;
    return { loss: vibcregLoss(z1 as Tensor2D, z2 as Tensor2D, { simWeight, varWeight, covWeight }), embeddings: z1 };
  }
}
