import type { Tensor, Tensor2D, Variable } from '../core/tf.js';
import { tf } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import { batchLayout } from '../losses/global-batch.js';
import { ticoLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { type MethodContext, type OptimDefaults, type SslLossOutput, type StepInfo } from './base.js';
import { MomentumMethod } from './momentum.js';
import { StepMean } from './step-mean.js';

/**
 * TiCo (Zhu, Liu & Huang 2022): transformation invariance and covariance contrast. The online
 * branch's normalised projection of view 1 is pulled towards the momentum branch's of view 2
 * and pushed away from the directions a running covariance of past projections already covers
 * ({@link ticoLoss}).
 *
 * - Running covariance: a `[D, D]` buffer (zeros at the start; checkpointed, compared by
 *   `verify`), `C ← β · C + (1 − β) · ẑaᵀ ẑa / N` over the GLOBAL batch (all-reduced in the
 *   loss), moved once per optimizer step, after it ({@link onTrainBatchEnd}). Under
 *   `--accumulate-grad-batches k` every micro-batch's loss uses the step's C, and C then moves
 *   with the mean of the k micro-batches' updates ({@link StepMean}, weighted by their global
 *   batches): the batch of kN's update, since the update is affine in a batch mean.
 *
 * Defaults: lightly's CIFAR-10 benchmark (`benchmarks/cifar10_benchmark.py`, `TiCoModel`, with
 * `loss/tico_loss.py`'s `TiCoLoss` defaults): `TiCoProjectionHead(F, 1024, 256)` (Linear
 * without bias-BN-ReLU-Linear) and its momentum copy, τ from 0.996 to 1 on a cosine, β 0.9,
 * ρ 20, the loss not symmetrised (online view 1 against momentum view 2), SGD with momentum 0.9
 * at lr 0.06 per 128 samples (0.12 per 256 here), weight decay 5e-4, SimCLR's views (its
 * benchmark's transform for TiCo). One difference: lightly's loss (`gather_distributed=False`)
 * computes the covariance of each GPU's batch; here it is always the global batch's.
 */
export class TiCo extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    baseTau: { ...MomentumMethod.args.baseTau, default: 0.996 },
    projHiddenDim: { kind: 'int', default: 1024, ge: 1, description: 'hidden width of the projector (and its EMA copy)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width D of the projector (the running covariance is D x D)' },
    beta: { kind: 'float', default: 0.9, ge: 0, lt: 1, description: 'momentum of the running covariance' },
    rho: { kind: 'float', default: 20, ge: 0, description: 'weight of the covariance-contrast term' },
  });
  declare readonly args: ArgValues<typeof TiCo.args>;
  static override readonly paper =
    'Zhu, Liu & Huang 2022, "TiCo: Transformation Invariance and Covariance Contrast for Self-Supervised Visual Representation Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.12, classifierLr: 0.1, weightDecay: 5e-4 };
  static override readonly viewRecipe = 'simclr' as const;

  /** `[B, F] -> [B, projOutputDim]`: Linear-BN-ReLU-Linear. */
  readonly projector: Sequential;
  /** EMA copy of {@link projector}. */
  readonly momentumProjector: Sequential;
  /** `[projOutputDim, projOutputDim]`: the running covariance C (zeros at the start). */
  readonly covariance: Variable;
  /** The covariances the step's micro-batches would set, applied once after the optimizer step. */
  private readonly pendingCovariance = new StepMean();

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    const featureDim = this.backbone.featureDim;
    const head = { norm: this.norm, rng: ctx.rng, biasBeforeNorm: false };
    this.projector = this.addModule('projector', mlpHead([featureDim, projHiddenDim, projOutputDim], head));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead([featureDim, projHiddenDim, projOutputDim], head));
    this.covariance = this.addBuffer('covariance', tf.zeros([projOutputDim, projOutputDim]));
  }

  /** The online projection of view 1 and the momentum branch's (detached) of view 2: `[za, zb]`, `[B, projOutputDim]` each. */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    return [this.projector.forward(features[0]!), this.targetProjection(views[1]!)];
  }

  override embeddingLoss([za, zb]: Tensor[]): SslLossOutput {
    const { loss, covariance } = ticoLoss(za as Tensor2D, zb as Tensor2D, this.covariance as Tensor2D, { beta: this.args.beta, rho: this.args.rho });
    // Weighted by the micro-batch's global batch (the scoped group's), so a short micro-batch counts for its rows.
    this.pendingCovariance.add(covariance, batchLayout('TiCo', za!.shape[0]!, undefined).globalBatch);
    covariance.dispose();
    return { loss, embeddings: za };
  }

  override onTrainBatchStart(info: StepInfo): void {
    super.onTrainBatchStart(info);
    this.pendingCovariance.clear();
  }

  /** After the optimizer step: the EMA update ({@link MomentumMethod}), then the step's covariance update. */
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    this.applyPendingCovariance();
  }

  /** Moves the covariance to the mean of those the losses since the last call would set (nothing if none ran). */
  protected applyPendingCovariance(): void {
    this.pendingCovariance.applyTo(this.covariance);
  }

  override dispose(): void {
    this.pendingCovariance.clear();
    super.dispose();
  }
}
