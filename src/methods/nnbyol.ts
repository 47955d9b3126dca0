import type { Tensor, Tensor2D } from '../core/tf.js';
import { byolLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { MethodContext, SslLossOutput } from './base.js';
import { BYOL } from './byol.js';
import { nearestNeighbours, supportSet, supportSetArgs } from './nearest-neighbour.js';
import type { FeatureQueue } from './queue.js';

/**
 * NNBYOL (solo-learn's NNBYOL, from Dwibedi et al. 2021): {@link BYOL} whose targets are the
 * nearest neighbours, in a support set of past normalised *momentum* projections, of the target's
 * projections: loss `byol(p1, nn2) + byol(p2, nn1)` (2 - 2 cos each); the target's view-1
 * projections are pushed into the support set (see {@link nearestNeighbours}); the neighbours'
 * label accuracy is logged as `nn_acc`.
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/nnbyol.yaml`,
 * `solo/methods/nnbyol.py`): BYOL's heads (projector 4096-256, predictor 4096-256) and EMA
 * (tau 0.99 to 1.0), support set of 65536 rows, LARS, lr 1.0, classifier lr 0.1, weight decay
 * 1e-5, asymmetric augmentations (the `byol` recipe).
 */
export class NNBYOL extends BYOL {
  static override readonly args = defineArgs({ ...BYOL.args, ...supportSetArgs });
  declare readonly args: ArgValues<typeof NNBYOL.args>;
  static override readonly paper = 'Dwibedi et al. 2021, "With a Little Help from My Friends: Nearest-Neighbor Contrastive Learning of Visual Representations"';

  /** The support set: `queueSize` normalised momentum projections of view 1 and their labels. */
  readonly queue: FeatureQueue;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.queue = this.addModule('queue', supportSet(this.args.queueSize, this.args.projOutputDim, ctx.rng));
  }

  /** `embeddings` are BYOL's `[p1, p2, t1, t2]` (online predictions, detached target projections). */
  override embeddingLoss([p1, p2, t1, t2]: Tensor[], labels: Tensor): SslLossOutput {
    const { nn1, nn2, nnAcc } = nearestNeighbours(this.queue, t1, t2, labels);
    // byolLoss(p1, p2, z1, z2) pairs p1 with z2 and p2 with z1: here p1 with nn2, p2 with nn1.
    return { loss: byolLoss(p1 as Tensor2D, p2 as Tensor2D, nn1, nn2), terms: { nn_acc: nnAcc }, embeddings: p1 };
  }
}
