import { withoutGradientTape, type Sequential } from '../core/layers.js';
import { l2NormalizeRows } from '../core/ops.js';
import { tf, type Tensor, type Tensor2D } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { sinkhornKnopp } from '../losses/sinkhorn.js';
import { swavLoss } from '../losses/swav.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, withoutGradients, type MethodContext, type OptimDefaults, type SslLossOutput, type StepInfo } from './base.js';
import { mlpHead, WeightNormLinear } from './heads.js';
import { FeatureQueue } from './queue.js';

/**
 * SwAV (Caron et al. 2020): every crop's L2-normalised projection z `[B, D]` is scored
 * against K prototypes (p = z · C, `[B, K]`), the scores of each global crop are turned into
 * balanced soft assignments by Sinkhorn-Knopp over the global batch ({@link sinkhornKnopp}: its
 * sums are all-reduced, so the assignments are the one-process ones at any W), and every
 * crop predicts the assignments of every other global crop ({@link swavLoss}).
 *
 * - Prototypes: a weight-normalised linear layer with norms frozen at 1
 *   ({@link WeightNormLinear}, solo-learn's `weight_norm` with `weight_g = 1`); during the
 *   first `freezePrototypesEpochs` epochs they get no gradient at all
 *   ({@link adjustGradients}: not updated, no momentum, no weight decay).
 * - Queue (`queueSize` > 0): the gathered projections of the global crops of past steps, one
 *   bank per global crop ({@link FeatureQueue}: every rank holds the one-process queue, written
 *   after the optimizer step, checkpointed, compared by `verify`). From epoch
 *   `epochQueueStarts` on, the queue's scores against the current prototypes join the Sinkhorn
 *   matrix of their crop (counted once, whatever W) without being predicted.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/swav.yaml`,
 * `solo/methods/swav.py`): projector 2048-128, 3000 prototypes, temperature 0.1, Sinkhorn 3
 * iterations with ε 0.05, queue 3840 from epoch 50, prototypes frozen for 2 epochs, LARS lr 0.6,
 * classifier lr 0.1, weight decay 1e-6; crops: 2 global and 6 local (SwAV's multi-crop, sized
 * for the images, see `--crops`). Deviations: solo-learn keeps `queueSize / W` rows per rank
 * and runs Sinkhorn on each rank's queue; here the queue is the global one, identical on
 * every rank. Its rows start as random unit vectors (solo-learn: zeros); with the defaults they
 * are all overwritten long before the queue is used.
 */
export class SwAV extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 128, ge: 1, description: 'width of the projections (and of the prototypes)' },
    numPrototypes: { kind: 'int', default: 3000, ge: 1, description: 'number K of prototypes' },
    temperature: { kind: 'float', default: 0.1, gt: 0, description: 'softmax temperature of the predictions' },
    skIters: { kind: 'int', default: 3, ge: 1, description: 'Sinkhorn-Knopp iterations' },
    skEpsilon: { kind: 'float', default: 0.05, gt: 0, description: 'entropy regularisation of Sinkhorn-Knopp' },
    queueSize: { kind: 'int', default: 3840, ge: 0, description: 'past projections kept per global crop (0: no queue)' },
    epochQueueStarts: { kind: 'int', default: 50, ge: 0, description: 'first (zero-based) epoch whose assignments use the queue' },
    freezePrototypesEpochs: { kind: 'int', default: 2, ge: 0, description: 'epochs during which the prototypes get no gradient' },
  });
  declare readonly args: ArgValues<typeof SwAV.args>;
  static override readonly paper = 'Caron et al. 2020, "Unsupervised Learning of Visual Features by Contrasting Cluster Assignments"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.6, classifierLr: 0.1, weightDecay: 1e-6 };
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, defaultLocalCrops: 6 };

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** `[B, projOutputDim] -> [B, numPrototypes]`: the scores against the prototypes. */
  readonly prototypes: WeightNormLinear;
  /** `[globalCrops, queueSize, projOutputDim]`: past normalised projections of each global crop (none if `queueSize` is 0). */
  readonly queue: FeatureQueue | undefined;
  /** The epoch of the current step (set by {@link onTrainBatchStart}). */
  private epoch = 0;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, numPrototypes, queueSize } = this.args;
    this.projector = this.addModule('projector', mlpHead([this.backbone.featureDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }));
    this.prototypes = this.addModule('prototypes', new WeightNormLinear(projOutputDim, numPrototypes, ctx.rng));
    const views = this.cropPolicy.globalCrops;
    this.queue = queueSize > 0 ? this.addModule('queue', new FeatureQueue(queueSize, projOutputDim, { views, rng: ctx.rng })) : undefined;
  }

  /** The prototype scores of every crop (`[B, K]` each), then the normalised projections of the global crops (`[B, D]` each). */
  override embed(features: Tensor[]): Tensor[] {
    const z = features.map((f) => l2NormalizeRows(this.projector.forward(f)));
    return [...z.map((zv) => this.prototypes.forward(zv)), ...z.slice(0, this.cropPolicy.globalCrops)];
  }

  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const globalCrops = this.cropPolicy.globalCrops;
    const preds = embeddings.slice(0, embeddings.length - globalCrops) as Tensor2D[];
    const z = embeddings.slice(embeddings.length - globalCrops) as Tensor2D[];
    const useQueue = this.queue !== undefined && this.epoch >= this.args.epochQueueStarts;
    const assignments = preds.slice(0, globalCrops).map((p, g) => {
      const queueScores = useQueue ? withoutGradientTape(() => tf.tidy(() => this.prototypes.forward(this.queue!.rows(g)) as Tensor2D)) : undefined;
      const q = sinkhornKnopp(p, { epsilon: this.args.skEpsilon, iterations: this.args.skIters, queueScores });
      queueScores?.dispose();
      return q;
    });
    this.queue?.push(z);
    return { loss: swavLoss(preds, assignments, { temperature: this.args.temperature }), embeddings: z[0] };
  }

  override onTrainBatchStart(info: StepInfo): void {
    this.epoch = info.epoch;
  }

  /** Drops the prototypes' gradients during the first `freezePrototypesEpochs` epochs. */
  override adjustGradients(grads: Record<string, Tensor>, info: StepInfo): Record<string, Tensor> {
    return info.epoch < this.args.freezePrototypesEpochs ? withoutGradients(grads, this.prototypes) : grads;
  }
}
