import type { Sequential } from '../core/layers.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { nnclrLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';
import { mlpHead } from './heads.js';
import { nearestNeighbours, supportSet, supportSetArgs } from './nearest-neighbour.js';
import type { FeatureQueue } from './queue.js';

/**
 * NNCLR (Dwibedi et al. 2021): contrastive learning whose positives are the nearest
 * neighbours, in a support set of past normalised projections, of each view's projection:
 * loss `(nnclr(nn1, p2) + nnclr(nn2, p1)) / 2`, where `nnclr(nn, p)` is the cross-entropy of
 * each neighbour against the predictions of the other view of the whole global batch
 * ({@link nnclrLoss}). The view-1 projections are pushed into the support set (see
 * {@link nearestNeighbours}); the neighbours' label accuracy is logged as `nn_acc`.
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/nnclr.yaml`,
 * `solo/methods/nnclr.py`): projector 2048-2048-256 (Linear-BN-ReLU twice, Linear-BN),
 * predictor 256-4096-256, temperature 0.2, support set of 65536 rows, LARS, lr 0.4,
 * classifier lr 0.1, weight decay 1e-5, asymmetric augmentations (the `byol` recipe).
 */
export class NNCLR extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector (two hidden layers)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width of the projector and the predictor (the support-set rows)' },
    predHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the predictor' },
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of the NNCLR loss' },
    ...supportSetArgs,
  });
  declare readonly args: ArgValues<typeof NNCLR.args>;
  static override readonly paper = 'Dwibedi et al. 2021, "With a Little Help from My Friends: Nearest-Neighbor Contrastive Learning of Visual Representations"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-5 };
  static override readonly viewRecipe = 'byol' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** `[B, projOutputDim] -> [B, projOutputDim]`. */
  readonly predictor: Sequential;
  /** The support set: `queueSize` normalised view-1 projections and their labels. */
  readonly queue: FeatureQueue;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, predHiddenDim, queueSize } = this.args;
    const head = { norm: this.norm, rng: ctx.rng };
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projHiddenDim, projOutputDim], { ...head, outputNorm: 'affine' }),
    );
    this.predictor = this.addModule('predictor', mlpHead([projOutputDim, predHiddenDim, projOutputDim], head));
    this.queue = this.addModule('queue', supportSet(queueSize, projOutputDim, ctx.rng));
  }

  /** Predictions and projections of the two views: `[p1, p2, z1, z2]`, `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    const z = features.map((f) => this.projector.forward(f));
    return [...z.map((zi) => this.predictor.forward(zi)), ...z];
  }

  override embeddingLoss([p1, p2, z1, z2]: Tensor[], labels: Tensor): SslLossOutput {
    const { nn1, nn2, nnAcc } = nearestNeighbours(this.queue, z1, z2, labels);
    const options = { temperature: this.args.temperature };
    const loss = tf.div(tf.add(nnclrLoss(nn1, p2 as Tensor2D, options), nnclrLoss(nn2, p1 as Tensor2D, options)), 2) as Scalar;
    return { loss, terms: { nn_acc: nnAcc }, embeddings: z1 };
  }
}
