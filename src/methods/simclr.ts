import type { Tensor, Tensor2D } from '../core/tf.js';
import { Linear, ReLU, Sequential } from '../core/layers.js';
import { ntXentLoss } from '../losses/index.js';
import { BaseMethod, type MethodArgs, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * SimCLR (Chen et al. 2020): a two-layer MLP projector and the NT-Xent loss over the
 * two views. Defaults are solo-learn's CIFAR recipe.
 */
export class SimCLR extends BaseMethod {
  static override readonly defaultArgs: MethodArgs = { projHiddenDim: 2048, projOutputDim: 256, temperature: 0.2 };
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-4 };

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    this.projector = this.addModule(
      'projector',
      new Sequential(
        new Linear(this.backbone.featureDim, projHiddenDim, { rng: ctx.rng }),
        new ReLU(),
        new Linear(projHiddenDim, projOutputDim, { rng: ctx.rng }),
      ),
    );
  }

  /** Projections of the two views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    return {
      loss: ntXentLoss(z1 as Tensor2D, z2 as Tensor2D, { temperature: this.args.temperature }),
      embeddings: z1,
    };
  }
}
