import { Sequential } from '../core/layers.js';
import { l2NormalizeRows } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { PostNormTransformerLayer } from '../core/transformer.js';
import { all4oneCentroidLoss, all4oneFeatureLoss, nnclrLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { MethodContext, OptimDefaults, SslLossOutput } from './base.js';
import { mlpHead } from './heads.js';
import { MomentumMethod } from './momentum.js';
import { supportSet, supportSetArgs } from './nearest-neighbour.js';
import type { FeatureQueue } from './queue.js';

/**
 * All4One (Estepa et al. 2023; solo-learn's `All4One`): a momentum method with a support set of
 * normalised momentum projections of view 1 and three terms,
 *
 * - `nnclr_loss`: NNCLR's loss of each view's nearest neighbour against the other view's
 *   predictions (temperature `temperature`);
 * - `centroid_loss`: a 3-layer post-norm transformer encoder reads each sample's `neighbours`
 *   (5) nearest support-set rows plus a sinusoidal position code and returns its first token, the
 *   "centroid"; a second sequence, the second predictor's output followed by the first
 *   `neighbours - 1` of them ("shift operation"), gives the other view's candidate; contrastive
 *   between the two (temperature `centroidTemperature`, solo-learn's 0.1);
 * - `feature_loss`: the redundancy term of the momentum and online projections
 *   ({@link all4oneFeatureLoss}, global column statistics);
 *
 * loss = `nnclrWeight · nnclr + centroidWeight · centroid + featureWeight · feature` (0.5 each).
 *
 * The neighbours come from the support set as it was before the step (rows pushed here are
 * written after the optimizer step, gathered in rank order), so the transformer's sequences
 * depend on their own sample only and run in {@link embed}: the gradient cache covers the
 * transformer too. Deviations from solo-learn: the transformer has no dropout (solo-learn's 0.1
 * would need masks keyed by sample to be exact on W ranks) and shares the method's lr (solo-learn
 * gives it lr 0.1).
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/all4one.yaml`): projector
 * 2048-2048-256 (Linear-BN-ReLU twice, Linear-BN) with its EMA copy (tau 0.99 to 1.0), two
 * predictors 256-4096-256, temperature 0.2, support set of 98304 rows in the recipes (65536 as
 * solo-learn's code default), LARS, lr 1.0, classifier lr 0.1, weight decay 1e-5, asymmetric
 * augmentations (the `byol` recipe).
 */
export class All4One extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector (two hidden layers) and its EMA copy' },
    projOutputDim: {
      kind: 'int',
      default: 256,
      ge: 1,
      description: 'output width of the projector, predictors and transformer (divisible by transformerHeads)',
    },
    predHiddenDim: { kind: 'int', default: 4096, ge: 1, description: 'hidden width of the two predictors' },
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of the NNCLR term' },
    centroidTemperature: { kind: 'float', default: 0.1, gt: 0, description: 'softmax temperature of the centroid term' },
    neighbours: { kind: 'int', default: 5, ge: 2, description: 'nearest neighbours per sample fed to the transformer' },
    transformerLayers: { kind: 'int', default: 3, ge: 1, description: 'layers of the transformer encoder' },
    transformerHeads: { kind: 'int', default: 8, ge: 1, description: 'attention heads of the transformer encoder' },
    nnclrWeight: { kind: 'float', default: 0.5, ge: 0, description: 'weight of the NNCLR term' },
    centroidWeight: { kind: 'float', default: 0.5, ge: 0, description: 'weight of the centroid term' },
    featureWeight: { kind: 'float', default: 0.5, ge: 0, description: 'weight of the feature (redundancy) term' },
    ...supportSetArgs,
  });
  declare readonly args: ArgValues<typeof All4One.args>;
  static override readonly paper = 'Estepa et al. 2023, "All4One: Symbiotic Neighbour Contrastive Learning via Self-Attention and Redundancy Reduction"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 1.0, classifierLr: 0.1, weightDecay: 1e-5 };
  static override readonly viewRecipe = 'byol' as const;

  /** `[B, F] -> [B, P]`. */
  readonly projector: Sequential;
  /** EMA copy of {@link projector}. */
  readonly momentumProjector: Sequential;
  /** `[B, P] -> [B, P]`: the predictions of the NNCLR term. */
  readonly predictor: Sequential;
  /** `[B, P] -> [B, P]`: the first token of the shifted sequences. */
  readonly predictor2: Sequential;
  /** `[B, k, P] -> [B, k, P]`: post-norm encoder layers (ReLU, feed-forward width 2P, no dropout). */
  readonly transformer: Sequential;
  /** The support set: `queueSize` normalised momentum projections of view 1 and their labels. */
  readonly queue: FeatureQueue;
  /** `[k, P]` the constant position code added to every sequence. */
  private readonly positions: Tensor;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim: p, predHiddenDim, queueSize, neighbours, transformerLayers, transformerHeads } = this.args;
    if (p % transformerHeads !== 0) throw new Error(`method_args.projOutputDim (${p}) must be divisible by method_args.transformerHeads (${transformerHeads})`);
    if (neighbours > queueSize) throw new Error(`method_args.neighbours (${neighbours}) must be at most method_args.queueSize (${queueSize})`);
    const featureDim = this.backbone.featureDim;
    const head = { norm: this.norm, rng: ctx.rng };
    const projectorDims = [featureDim, projHiddenDim, projHiddenDim, p];
    this.projector = this.addModule('projector', mlpHead(projectorDims, { ...head, outputNorm: 'affine' }));
    this.predictor = this.addModule('predictor', mlpHead([p, predHiddenDim, p], head));
    this.predictor2 = this.addModule('predictor2', mlpHead([p, predHiddenDim, p], head));
    const layers = Array.from(
      { length: transformerLayers },
      () => new PostNormTransformerLayer({ dim: p, numHeads: transformerHeads, feedForwardDim: 2 * p, rng: ctx.rng }),
    );
    this.transformer = this.addModule('transformer', new Sequential(...layers));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead(projectorDims, { ...head, outputNorm: 'affine' }));
    this.queue = this.addModule('queue', supportSet(queueSize, p, ctx.rng));
    this.positions = tf.keep(sinusoidalPositions(neighbours, p));
  }

  /**
   * Per view v: the prediction `p_v`, the online projection `z_v`, the normalised momentum
   * projection `m_v`, the centroid `c_v` (transformer on the k neighbours of `m_v`) and the
   * shifted embedding `s_v` (transformer on `predictor2(z_v)` and the first k - 1 neighbours):
   * `[p1, p2, z1, z2, m1, m2, c1, c2, s1, s2]`, `[B, P]` each.
   */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const z = features.map((f) => this.projector.forward(f));
    const p = z.map((zv) => this.predictor.forward(zv));
    const m = views.map((v) => l2NormalizeRows(this.targetProjection(v) as Tensor2D));
    const k = this.args.neighbours;
    const centroids: Tensor[] = [];
    const shifted: Tensor[] = [];
    m.forEach((mv, v) => {
      const { index, rows } = this.queue.nearestK(mv, k); // [B, k, P]
      const first = tf.expandDims(this.predictor2.forward(z[v]!), 1); // [B, 1, P]
      centroids.push(this.firstToken(rows));
      shifted.push(this.firstToken(tf.concat([first, tf.slice(rows, [0, 0, 0], [-1, k - 1, -1])], 1)));
      tf.dispose([index, first]);
    });
    return [...p, ...z, ...m, ...centroids, ...shifted];
  }

  override embeddingLoss([p1, p2, z1, z2, m1, m2, c1, c2, s1, s2]: Tensor[], labels: Tensor): SslLossOutput {
    const [nn1, nn2] = [this.queue.nearest(m1 as Tensor2D), this.queue.nearest(m2 as Tensor2D)];
    const t = { temperature: this.args.temperature };
    const ct = { temperature: this.args.centroidTemperature };
    const nnclr = tf.div(tf.add(nnclrLoss(nn1.rows, p2 as Tensor2D, t), nnclrLoss(nn2.rows, p1 as Tensor2D, t)), 2) as Scalar;
    const centroid = tf.div(
      tf.add(all4oneCentroidLoss(c1 as Tensor2D, s2 as Tensor2D, ct), all4oneCentroidLoss(c2 as Tensor2D, s1 as Tensor2D, ct)),
      2,
    ) as Scalar;
    const feature = all4oneFeatureLoss(m1 as Tensor2D, m2 as Tensor2D, z1 as Tensor2D, z2 as Tensor2D);
    const { nnclrWeight, centroidWeight, featureWeight } = this.args;
    const loss = tf.addN([tf.mul(nnclrWeight, nnclr), tf.mul(centroidWeight, centroid), tf.mul(featureWeight, feature)]) as Scalar;
    const nnAcc = tf.tidy(() => tf.mean(tf.cast(tf.equal(tf.gather(this.queue.labels(), nn1.index), tf.cast(labels, 'int32')), 'float32')) as Scalar);
    this.queue.push([m1!], labels);
    tf.dispose([nn1.index, nn2.index]);
    return { loss, terms: { nnclr_loss: nnclr, centroid_loss: centroid, feature_loss: feature, nn_acc: nnAcc }, embeddings: z1 };
  }

  /** `[B, k, P]` sequence -> `[B, P]`: the transformer's first output token, position code added. */
  private firstToken(sequence: Tensor): Tensor {
    const out = this.transformer.forward(tf.add(sequence, this.positions));
    return tf.reshape(tf.slice(out, [0, 0, 0], [-1, 1, -1]), [out.shape[0]!, out.shape[2]!]);
  }

  override dispose(): void {
    this.positions.dispose();
    super.dispose();
  }
}

/**
 * solo-learn's `Summer(PositionalEncodingPermute1D(k))` on a `[B, k, P]` sequence, as the
 * constant `[k, P]` it adds: the encoding runs along the P features with the k tokens as its
 * channels, so token c, feature d gets `sin(d·f_j)` (c = 2j) or `cos(d·f_j)` (c = 2j + 1), with
 * `f_j = 10000^(−2j / ceil(k/2)·2)`.
 */
export function sinusoidalPositions(k: number, width: number): Tensor2D {
  const channels = Math.ceil(k / 2) * 2;
  const values = new Float32Array(k * width);
  for (let c = 0; c < k; c++) {
    const frequency = 1 / 10000 ** ((2 * Math.floor(c / 2)) / channels);
    for (let d = 0; d < width; d++) values[c * width + d] = c % 2 === 0 ? Math.sin(d * frequency) : Math.cos(d * frequency);
  }
  return tf.tensor2d(values, [k, width]);
}
