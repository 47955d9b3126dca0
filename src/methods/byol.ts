import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { byolLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { MomentumMethod } from './momentum.js';

/**
 * BYOL (Grill et al. 2020): online backbone + projector + predictor regress the EMA
 * target's projections of the other view (2 - 2 cos, symmetrised). Defaults are
 * solo-learn's CIFAR recipe.
 */
export class BYOL extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    projHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the projector (and its EMA target)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector and the predictor' },
    predHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the predictor' },
  });
  declare readonly args: ArgValues<typeof BYOL.args>;
  static override readonly paper: string = 'Grill et al. 2020, "Bootstrap Your Own Latent: A New Approach to Self-Supervised Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 1.0, classifierLr: 0.1, weightDecay: 1e-5 };
  static override readonly viewRecipe = 'byol' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** `[B, projOutputDim] -> [B, projOutputDim]`. */
  readonly predictor: Sequential;
  /** EMA copy of {@link projector}. */
  readonly momentumProjector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, predHiddenDim } = this.args;
    const featureDim = this.backbone.featureDim;
    const head = { norm: this.norm, rng: ctx.rng };
    this.projector = this.addModule('projector', mlpHead([featureDim, projHiddenDim, projOutputDim], head));
    this.predictor = this.addModule('predictor', mlpHead([projOutputDim, predHiddenDim, projOutputDim], head));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead([featureDim, projHiddenDim, projOutputDim], head));
  }

  /**
   * Online predictions of both views and the target's (detached) projections:
   * `[p1, p2, t1, t2]`, `[B, projOutputDim]` each.
   */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const predictions = features.map((f) => this.predictor.forward(this.projector.forward(f)));
    const targets = views.map((v) => this.targetProjection(v));
    return [...predictions, ...targets];
  }

  override embeddingLoss([p1, p2, t1, t2]: Tensor[], _labels?: Tensor): SslLossOutput {
    return { loss: byolLoss(p1 as Tensor2D, p2 as Tensor2D, t1 as Tensor2D, t2 as Tensor2D), embeddings: p1 };
  }
}
