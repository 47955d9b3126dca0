import { l2NormalizeRows } from '../core/ops.js';
import type { Tensor, Tensor2D } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { resslLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { MomentumMethod } from './momentum.js';
import { FeatureQueue } from './queue.js';

/**
 * ReSSL (Zheng et al. 2021): relational self-supervision. The student (online backbone +
 * projector) sees the strongly augmented first view, the EMA teacher the weakly augmented
 * second view ({@link resslViews}); the student's similarity distribution over a queue of
 * past teacher keys (temperature `temperatureQ`) is trained towards the teacher's sharper one
 * (`temperatureK`). The queue keeps the L2-normalised teacher keys, written after the
 * optimizer step with the gathered keys (see {@link FeatureQueue}). As solo-learn's
 * `training_step`, only the student's first view and the teacher's second view enter the loss.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/ressl.yaml`,
 * `solo/methods/ressl.py`): projector (Linear-ReLU-Linear, no normalisation:
 * `useBnInProjector` false) 4096-256, queue 65536 (solo-learn's default; the yaml does not set
 * it), temperatures 0.1 / 0.04, tau 0.99 -> 1.0, SGD lr 0.05, classifier lr 0.1, weight decay
 * 1e-4. Deviations: the teacher runs on the weak view only (solo-learn also runs it on the
 * strong view, whose output it discards: only the teacher's batch-norm running statistics,
 * used by neither training nor evaluation, would differ); the queue wraps around at any size
 * (solo-learn asserts a multiple of the global batch).
 */
export class ReSSL extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    projHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the projector (and its EMA target)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector (the width of the queued keys)' },
    useBnInProjector: { kind: 'bool', default: false, description: "true: batch norm (--norm's kind) after the projector's hidden Linear; false: none" },
    queueSize: { kind: 'int', default: 65536, ge: 1, description: 'teacher keys kept in the queue the relations are computed against' },
    temperatureQ: { kind: 'float', default: 0.1, gt: 0, description: "temperature of the student's (strong view) similarities to the queue" },
    temperatureK: { kind: 'float', default: 0.04, gt: 0, description: "temperature of the teacher's (weak view) similarities to the queue" },
  });
  declare readonly args: ArgValues<typeof ReSSL.args>;
  static override readonly paper = 'Zheng et al. 2021, "ReSSL: Relational Self-Supervised Learning with Weak Augmentation"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.05, classifierLr: 0.1, weightDecay: 1e-4 };
  static override readonly viewRecipe = 'ressl' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** EMA copy of {@link projector}. */
  readonly momentumProjector: Sequential;
  /** `[queueSize, projOutputDim]`: normalised teacher keys. */
  readonly queue: FeatureQueue;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, queueSize, useBnInProjector } = this.args;
    const dims = [this.backbone.featureDim, projHiddenDim, projOutputDim];
    const head = { norm: this.norm, hiddenNorm: useBnInProjector, rng: ctx.rng };
    this.projector = this.addModule('projector', mlpHead(dims, head));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead(dims, head));
    this.queue = this.addModule('queue', new FeatureQueue(queueSize, projOutputDim, { rng: ctx.rng }));
  }

  /**
   * The student's projection of the strong view and the teacher's (detached) projection of
   * the weak view: `[q, k]`, `[B, projOutputDim]` each (not normalised).
   */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const q = this.projector.forward(features[0]);
    const k = this.targetProjection(views[1]);
    return [q, k];
  }

  override embeddingLoss([q, k]: Tensor[]): SslLossOutput {
    const { temperatureQ, temperatureK } = this.args;
    const loss = resslLoss(q as Tensor2D, k as Tensor2D, this.queue.rows(), { temperatureQ, temperatureK });
    this.queue.push([l2NormalizeRows(k)]);
    return { loss, embeddings: q };
  }
}
