import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { vicregLossWithTerms } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * VICReg (Bardes, Ponce, LeCun 2022): a three-layer expander with batch norm
 * (Linear-BN-ReLU twice, then Linear) and the variance-invariance-covariance loss, whose
 * variance and covariance terms use global-batch statistics (exact over W ranks). The
 * unweighted `invariance`, `variance` and `covariance` terms are logged.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/vicreg.yaml`): expander
 * 2048-2048-2048, weights 25 / 25 / 1, LARS lr 0.3, classifier lr 0.1, weight decay 1e-4,
 * and its own symmetric views (`vicreg`: crop scale [0.2, 1], ColorJitter(0.4, 0.4, 0.2, 0.1),
 * solarization p = 0.1 on both views). One deviation: the variance term is the two views'
 * hinges *averaged*, as in the paper's official code (`vicregLoss`), where solo-learn sums
 * them; at the same `varLossWeight` solo-learn's variance pull is twice ours, and
 * `varLossWeight=50` gives its objective exactly.
 */
export class VICReg extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'width of the two hidden layers of the expander' },
    projOutputDim: { kind: 'int', default: 2048, ge: 1, description: 'output width of the expander (the embeddings the loss compares)' },
    simLossWeight: { kind: 'float', default: 25, ge: 0, description: 'weight of the invariance (MSE) term' },
    varLossWeight: { kind: 'float', default: 25, ge: 0, description: 'weight of the variance term (hinge on the std, averaged over the views)' },
    covLossWeight: { kind: 'float', default: 1, ge: 0, description: 'weight of the covariance (off-diagonal) term' },
  });
  declare readonly args: ArgValues<typeof VICReg.args>;
  static override readonly paper = 'Bardes, Ponce, LeCun 2022, "VICReg: Variance-Invariance-Covariance Regularization for Self-Supervised Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 };
  static override readonly viewRecipe = 'vicreg' as const;

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

  /** Expansions of the two views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    const { simLossWeight: simWeight, varLossWeight: varWeight, covLossWeight: covWeight } = this.args;
    const { loss, invariance, variance, covariance } = vicregLossWithTerms(z1 as Tensor2D, z2 as Tensor2D, { simWeight, varWeight, covWeight });
    return { loss, terms: { invariance, variance, covariance }, embeddings: z1 };
  }
}
