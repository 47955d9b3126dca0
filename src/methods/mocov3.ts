import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { mocov3Loss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { MomentumMethod } from './momentum.js';

/**
 * MoCo v3 (Chen, Xie & He 2021): online backbone + projector + predictor give the queries,
 * the EMA backbone + projector the keys; each query is contrasted with the keys of the other
 * view over the whole global batch (no queue), its own key the positive, scaled by 2τ:
 * `mocov3(q1, k2) + mocov3(q2, k1)`.
 *
 * Heads are solo-learn's ResNet `_build_mlp` (`solo/methods/mocov3.py`): projector
 * Linear-BN-ReLU-Linear-BN(no affine), predictor Linear-BN-ReLU-Linear, Linears without bias.
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/mocov3.yaml`): projector
 * 4096-256, predictor 4096-256, temperature 0.2, tau 0.99 -> 1.0, LARS (eta 0.02, clipped lr)
 * lr 0.3, classifier lr 0.3, weight decay 1e-6, the asymmetric views (`byol`).
 */
export class MoCoV3 extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    projHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the projector (and its EMA target)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector and the predictor' },
    predHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the predictor' },
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of the contrastive loss' },
  });
  declare readonly args: ArgValues<typeof MoCoV3.args>;
  static override readonly paper = 'Chen, Xie & He 2021, "An Empirical Study of Training Self-Supervised Vision Transformers"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.3, weightDecay: 1e-6 };
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
    const projector = [this.backbone.featureDim, projHiddenDim, projOutputDim];
    const head = { norm: this.norm, rng: ctx.rng, bias: false };
    this.projector = this.addModule('projector', mlpHead(projector, { ...head, outputNorm: 'plain' }));
    this.predictor = this.addModule('predictor', mlpHead([projOutputDim, predHiddenDim, projOutputDim], head));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead(projector, { ...head, outputNorm: 'plain' }));
  }

  /** Online predictions (queries) of both views and the target's (detached) projections (keys): `[q1, q2, k1, k2]`. */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const queries = features.map((f) => this.predictor.forward(this.projector.forward(f)));
    const keys = views.map((v) => this.targetProjection(v));
    return [...queries, ...keys];
  }

  override embeddingLoss([q1, q2, k1, k2]: Tensor[]): SslLossOutput {
    const options = { temperature: this.args.temperature };
    const loss = tf.add(mocov3Loss(q1 as Tensor2D, k2 as Tensor2D, options), mocov3Loss(q2 as Tensor2D, k1 as Tensor2D, options)) as Scalar;
    return { loss, embeddings: q1 };
  }
}
