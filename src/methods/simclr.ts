import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { ntXentLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * SimCLR (Chen et al. 2020): a two-layer MLP projector and the NT-Xent loss over the
 * two views. Defaults are solo-learn's CIFAR recipe.
 */
export class SimCLR extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector (the embeddings NT-Xent compares)' },
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of NT-Xent' },
  });
  declare readonly args: ArgValues<typeof SimCLR.args>;
  static override readonly paper: string = 'Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-4 };

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projOutputDim], { norm: 'batch', hiddenNorm: false, rng: ctx.rng }),
    );
  }

  /** Projections of the two views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss([z1, z2]: Tensor[], _labels?: Tensor): SslLossOutput {
    return {
      loss: ntXentLoss(z1 as Tensor2D, z2 as Tensor2D, { temperature: this.args.temperature }),
      embeddings: z1,
    };
  }
}
