import { l2NormalizeRows } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { mocoLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { MomentumMethod } from './momentum.js';
import { FeatureQueue } from './queue.js';

/**
 * MoCo v2+ (He et al. 2020; Chen et al. 2020, "Improved Baselines"): online backbone +
 * projector (Linear-ReLU-Linear, no normalisation; `useBnInProjector` true adds a batch norm
 * after the hidden Linear) give the queries, their EMA copies the keys; InfoNCE of each query
 * against the key of the other view (the positive) and a queue of past keys of that view (the
 * negatives), symmetrised: `(moco(q1, k2, queue[1]) + moco(q2, k1, queue[0])) / 2`. The queue
 * keeps the L2-normalised keys of each view apart (`views: 2`, view 0 the first view's keys),
 * as solo-learn's `[2, D, K]` buffer; it is written after the optimizer step with the gathered
 * keys of both views (see {@link FeatureQueue}).
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/mocov2plus.yaml`,
 * `solo/methods/mocov2plus.py`): projector 2048-256, queue 32768, temperature 0.2, tau
 * 0.99 -> 0.999, SGD lr 0.3, classifier lr 0.3, weight decay 1e-4, the `symmetric_weak`
 * views ({@link symmetricWeakViews}; no blur on small crops, as solo-learn's original CIFAR
 * script). Deviation: solo-learn asserts the queue size is a multiple of the global batch;
 * the queue here wraps around at any size.
 */
export class MoCoV2Plus extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    finalTau: { ...MomentumMethod.args.finalTau, default: 0.999 },
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector (and its EMA target)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector (the width of the queued keys)' },
    useBnInProjector: { kind: 'bool', default: false, description: "true: batch norm (--norm's kind) after the projector's hidden Linear; false: none" },
    queueSize: { kind: 'int', default: 32768, ge: 1, description: 'keys kept per view in the queue of negatives' },
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of the InfoNCE loss' },
  });
  declare readonly args: ArgValues<typeof MoCoV2Plus.args>;
  static override readonly paper = 'Chen et al. 2020, "Improved Baselines with Momentum Contrastive Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.3, classifierLr: 0.3, weightDecay: 1e-4 };
  static override readonly viewRecipe = 'symmetric_weak' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** EMA copy of {@link projector}. */
  readonly momentumProjector: Sequential;
  /** `[2, queueSize, projOutputDim]`: the normalised keys of view 1 (row 0) and view 2 (row 1). */
  readonly queue: FeatureQueue;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, queueSize, useBnInProjector } = this.args;
    const dims = [this.backbone.featureDim, projHiddenDim, projOutputDim];
    const head = { norm: this.norm, hiddenNorm: useBnInProjector, rng: ctx.rng };
    this.projector = this.addModule('projector', mlpHead(dims, head));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead(dims, head));
    this.queue = this.addModule('queue', new FeatureQueue(queueSize, projOutputDim, { views: 2, rng: ctx.rng }));
  }

  /** Queries of both views and the target's (detached) keys: `[q1, q2, k1, k2]`, `[B, projOutputDim]` each (not normalised). */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const queries = features.map((f) => this.projector.forward(f));
    const keys = views.map((v) => this.targetProjection(v));
    return [...queries, ...keys];
  }

  override embeddingLoss([q1, q2, k1, k2]: Tensor[]): SslLossOutput {
    const options = { temperature: this.args.temperature };
    const loss12 = mocoLoss(q1 as Tensor2D, k2 as Tensor2D, this.queue.rows(1), options);
    const loss21 = mocoLoss(q2 as Tensor2D, k1 as Tensor2D, this.queue.rows(0), options);
    this.queue.push([l2NormalizeRows(k1), l2NormalizeRows(k2)]);
    return { loss: tf.div(tf.add(loss12, loss21), 2) as Scalar, embeddings: q1 };
  }
}
