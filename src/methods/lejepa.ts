import { invalidValue } from '../core/errors.js';
import type { Sequential } from '../core/layers.js';
import { Rng } from '../core/random.js';
import { tf, type Tensor, type Tensor2D } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { lejepaLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput, type StepInfo } from './base.js';
import { mlpHead } from './heads.js';

/**
 * LeJEPA (Balestriero & LeCun 2025): no teacher, no stop-gradient, no predictor. A projector
 * (Linear-BN-ReLU twice, then Linear) embeds every view; the loss ({@link lejepaLoss}) pulls
 * each view's embedding towards the mean of the global views' (the prediction term) and
 * tests, with SIGReg, that random 1-D projections of the embeddings are N(0, 1): an
 * Epps-Pulley statistic of their empirical characteristic function over the *global* batch
 * (sums all-reduced with their gradient, so W ranks equal one process; lightly #1920 lost a
 * factor of W there).
 *
 * The S projection directions (columns of a `[K, S]` matrix of unit norm) are drawn on the
 * host from a generator keyed by (a seed drawn from the method's generator, the optimizer
 * step), as the reference seeds its generator with the global step: every rank draws the same
 * ones, a resumed run draws what the uninterrupted one would have, and the micro-batches of
 * one step under `--accumulate-grad-batches k` share them (SIGReg itself couples the rows of
 * a micro-batch and is that micro-batch's statistic). No other state.
 *
 * Defaults are the reference's small-data recipe (`MINIMAL.md` of the `lejepa` repository,
 * ViT-S/8 on Imagenette: `lamb=0.02 V=4 proj_dim=16 lr=2e-3 bs=256`): 4 global views, each
 * predicting their mean, projector 2048-2048-16 with batch norm (torchvision's `MLP`), λ 0.02,
 * 256 directions, the Epps-Pulley integral on [0, 3] with 17 points, AdamW lr 2e-3 with
 * weight decay 0.05, classifier lr 1e-3; SimCLR's views (the recipe's, without its
 * solarization p = 0.2). Local crops (`--crops`) join the views that predict the mean and
 * are tested by SIGReg, as in the paper's Algorithm 1.
 */
export class LeJEPA extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'width of the two hidden layers of the projector' },
    projOutputDim: { kind: 'int', default: 16, ge: 1, description: 'output width K of the projector (the embeddings SIGReg tests)' },
    sigregWeight: { kind: 'float', default: 0.02, ge: 0, le: 1, description: 'lambda: loss = (1 - lambda) prediction + lambda SIGReg' },
    numSlices: { kind: 'int', default: 256, ge: 1, description: 'random 1-D projections SIGReg tests, drawn afresh each optimizer step' },
    tMax: { kind: 'float', default: 3, gt: 0, description: 'upper end of the Epps-Pulley integral over t in [0, tMax]' },
    knots: { kind: 'int', default: 17, ge: 3, description: 'integration points of the Epps-Pulley integral (odd)' },
  });
  declare readonly args: ArgValues<typeof LeJEPA.args>;
  static override readonly paper = 'Balestriero & LeCun 2025, "LeJEPA: Provable and Scalable Self-Supervised Learning Without the Heuristics"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 2e-3, classifierLr: 1e-3, weightDecay: 0.05 };
  static override readonly viewRecipe = 'simclr' as const;
  static override readonly crops: CropPolicy = { globalCrops: 4, multiCrop: true, localScale: [0.05, 0.3] };

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** Keys the projection draws together with the step; the same on every rank (drawn from the seeded generator). */
  private readonly projectionSeed: number;
  /** The optimizer step of the current batch (set by {@link onTrainBatchStart}). */
  private step = 0;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, knots } = this.args;
    if (knots % 2 !== 1) throw invalidValue('method_args.knots', knots, 'an odd integer >= 3 (the trapezoid rule of the reference)');
    this.projector = this.addModule(
      'projector',
      mlpHead([this.backbone.featureDim, projHiddenDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }),
    );
    this.projectionSeed = ctx.rng.int(0x7fffffff);
  }

  /** Projections of every view: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss(views: Tensor[]): SslLossOutput {
    const { sigregWeight, tMax, knots } = this.args;
    const projections = this.projections(this.step);
    const options = { sigregWeight, tMax, knots, globalViews: this.cropPolicy.globalCrops };
    const { loss, prediction, sigreg } = lejepaLoss(views as Tensor2D[], projections, options);
    projections.dispose();
    return { loss, terms: { prediction, sigreg }, embeddings: views[0] };
  }

  override onTrainBatchStart(info: StepInfo): void {
    this.step = info.step;
  }

  /**
   * The SIGReg directions of optimizer step `step`: `[projOutputDim, numSlices]`, columns of
   * standard normal draws divided by their norm (in float64, then rounded to float32), from
   * `Rng.keyed(seed, step)`.
   */
  projections(step: number): Tensor2D {
    const { projOutputDim: k, numSlices: s } = this.args;
    const rng = Rng.keyed(this.projectionSeed, step);
    const draws = Float64Array.from({ length: k * s }, () => rng.normal());
    for (let c = 0; c < s; c++) {
      let norm = 0;
      for (let r = 0; r < k; r++) norm += draws[r * s + c]! ** 2;
      norm = Math.sqrt(norm);
      for (let r = 0; r < k; r++) draws[r * s + c] = draws[r * s + c]! / norm;
    }
    return tf.tensor2d(Float32Array.from(draws), [k, s]);
  }
}
