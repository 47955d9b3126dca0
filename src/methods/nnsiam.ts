import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { negativeCosineLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { MethodContext, SslLossOutput } from './base.js';
import { nearestNeighbours, supportSet, supportSetArgs } from './nearest-neighbour.js';
import type { FeatureQueue } from './queue.js';
import { SimSiam } from './simsiam.js';

/**
 * NNSiam (solo-learn's NNSiam, from Dwibedi et al. 2021): {@link SimSiam} whose targets are
 * the nearest neighbours, in a support set of past normalised projections, of the other view's
 * projection: loss `(negCos(p1, nn2) + negCos(p2, nn1)) / 2`; the view-1 projections are pushed
 * into the support set (see {@link nearestNeighbours}); the neighbours' label accuracy is logged
 * as `nn_acc`.
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/nnsiam.yaml`,
 * `solo/methods/nnsiam.py`): SimSiam's heads (projector 2048-2048-2048, predictor
 * 2048-4096-2048, the predictor at a static lr), support set of 65536 rows, SGD, lr 0.5,
 * classifier lr 0.1, weight decay 1e-5, asymmetric augmentations (the `byol` recipe). With the
 * default 2048-d projections the support set is a 512 MiB float32 bank.
 */
export class NNSiam extends SimSiam {
  static override readonly args = defineArgs({
    ...SimSiam.args,
    predHiddenDim: { ...SimSiam.args.predHiddenDim, default: 4096 },
    ...supportSetArgs,
  });
  declare readonly args: ArgValues<typeof NNSiam.args>;
  static override readonly paper = 'Dwibedi et al. 2021, "With a Little Help from My Friends: Nearest-Neighbor Contrastive Learning of Visual Representations"';
  static override readonly viewRecipe = 'byol' as const;

  /** The support set: `queueSize` normalised view-1 projections and their labels. */
  readonly queue: FeatureQueue;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.queue = this.addModule('queue', supportSet(this.args.queueSize, this.args.projOutputDim, ctx.rng));
  }

  override embeddingLoss([p1, p2, z1, z2]: Tensor[], labels: Tensor): SslLossOutput {
    const { nn1, nn2, nnAcc } = nearestNeighbours(this.queue, z1, z2, labels);
    const loss = tf.div(tf.add(negativeCosineLoss(p1 as Tensor2D, nn2), negativeCosineLoss(p2 as Tensor2D, nn1)), 2) as Scalar;
    return { loss, terms: { nn_acc: nnAcc }, embeddings: z1 };
  }
}
