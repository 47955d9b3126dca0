import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import type { NormKind, Sequential } from '../core/layers.js';
import type { Rng } from '../core/random.js';
import { negativeCosineLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type ParameterGroup, type SslLossOutput } from './base.js';

/**
 * SimSiam (Chen & He 2021): a three-layer projector ending in batch norm without affine
 * parameters, a bottleneck predictor, and the symmetrised negative cosine similarity of each
 * view's prediction with the other view's *detached* projection; no negatives and no momentum
 * target (the stop-gradient alone prevents collapse).
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/simsiam.yaml`,
 * `solo/methods/simsiam.py`): projector 2048-2048-2048, predictor 2048-512-2048, SGD, lr 0.5,
 * classifier lr 0.1, weight decay 1e-5, its `symmetric_weak` augmentations (the `simsiam`
 * recipe). As there, the predictor is its own optimizer group at the base lr, unscheduled (no
 * warmup, no cosine decay: solo-learn's `static_lr`). The Linear layers followed by batch norm
 * have no bias: solo-learn builds them with `bias=False` except the projector's last one, whose
 * bias it freezes, and the batch norm after it cancels it (so it is left out here).
 */
export class SimSiam extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector (two hidden layers)' },
    projOutputDim: { kind: 'int', default: 2048, ge: 1, description: 'output width of the projector and the predictor' },
    predHiddenDim: { kind: 'int', default: 512, ge: 1, description: 'hidden (bottleneck) width of the predictor' },
  });
  declare readonly args: ArgValues<typeof SimSiam.args>;
  static override readonly paper: string = 'Chen & He 2021, "Exploring Simple Siamese Representation Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.5, classifierLr: 0.1, weightDecay: 1e-5 };
  static override readonly viewRecipe: ViewRecipe = 'symmetric_weak';

  /** `[B, F] -> [B, projOutputDim]`: Linear-BN-ReLU twice, then Linear-BN (no affine). */
  readonly projector: Sequential;
  /** `[B, projOutputDim] -> [B, projOutputDim]`: Linear-BN-ReLU-Linear. */
  readonly predictor: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const heads = simSiamHeads(this.backbone.featureDim, this.args, this.norm, ctx.rng);
    this.projector = this.addModule('projector', heads.projector);
    this.predictor = this.addModule('predictor', heads.predictor);
  }

  /** Predictions and projections of the two views: `[p1, p2, z1, z2]`, `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    const z = features.map((f) => this.projector.forward(f));
    return [...z.map((zi) => this.predictor.forward(zi)), ...z];
  }

  override embeddingLoss([p1, p2, z1, z2]: Tensor[], _labels?: Tensor): SslLossOutput {
    const loss = tf.div(tf.add(negativeCosineLoss(p1 as Tensor2D, z2 as Tensor2D), negativeCosineLoss(p2 as Tensor2D, z1 as Tensor2D)), 2) as Scalar;
    return { loss, embeddings: z1 };
  }

  /** The method's group without the predictor, the predictor's group (`staticLr`), the classifier's. */
  override parameterGroups(): ParameterGroup[] {
    const groups = super.parameterGroups();
    const isPredictor = ([name]: [string, unknown]) => name.startsWith('predictor.');
    return groups.flatMap((g) =>
      g.classifier
        ? [g]
        : [
            { ...g, params: g.params.filter((p) => !isPredictor(p)) },
            { name: 'predictor', params: g.params.filter(isPredictor), classifier: false, staticLr: true },
          ],
    );
  }
}

/**
 * SimSiam's heads (also FastSiam's): the projector `[B, featureDim] -> [B, projOutputDim]`,
 * Linear-BN-ReLU twice then Linear-BN (no affine), and the predictor `[B, projOutputDim] ->
 * [B, projOutputDim]`, Linear-BN-ReLU-Linear; no bias before a batch norm.
 */
export function simSiamHeads(
  featureDim: number,
  { projHiddenDim, projOutputDim, predHiddenDim }: ArgValues<typeof SimSiam.args>,
  norm: NormKind,
  rng: Rng,
): { projector: Sequential; predictor: Sequential } {
  const head = { norm, rng, biasBeforeNorm: false };
  return {
    projector: mlpHead([featureDim, projHiddenDim, projHiddenDim, projOutputDim], { ...head, outputNorm: 'plain' }),
    predictor: mlpHead([projOutputDim, predHiddenDim, projOutputDim], head),
  };
}
