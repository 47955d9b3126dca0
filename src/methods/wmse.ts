import type { Tensor, Tensor2D, Variable } from '../core/tf.js';
import { tf } from '../core/tf.js';
import type { Sequential } from '../core/layers.js';
import type { StateDict } from '../core/module.js';
import { Rng } from '../core/random.js';
import { batchLayout, wmseLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { mlpHead } from './heads.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput } from './base.js';

/**
 * W-MSE (Ermolov et al. 2021): a two-layer projector (Linear-BN-ReLU-Linear) and the
 * normalised MSE between the views' embeddings after Cholesky whitening of random
 * sub-batches of the *global* batch ({@link wmseLoss}: exact over W ranks).
 *
 * The sub-batch permutations (one per whitening iteration) are drawn from a generator keyed
 * by (a seed drawn from the method's generator, the number of loss calls so far), so every
 * rank draws the same ones, and the call count is a buffer (`lossCalls`): checkpointed, so a
 * resumed run draws what the uninterrupted one would have drawn. The count lives on the host
 * (the permutations are drawn there) and each loss call uploads it into the buffer, which is
 * never read back during a step; {@link loadStateDict} takes it from the restored state.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/wmse.yaml`): projector
 * 1024-64, whitening size 128, one whitening iteration, no shrinkage, lr 2e-3, classifier
 * lr 3e-3, weight decay 1e-6, SimCLR's views (ColorJitter(0.8, 0.8, 0.8, 0.2), no blur or
 * solarization on small images). Two deviations: AdamW instead of Adam with L2 decay (at
 * 1e-6 the difference is negligible), and when the whitening size does not divide the
 * global batch N, the largest divisor of N below it is used (said once), where solo-learn
 * refuses.
 */
export class WMSE extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 1024, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 64, ge: 1, description: 'output width of the projector (the dimension D that is whitened)' },
    whiteningSize: {
      kind: 'int',
      default: 128,
      ge: 2,
      description:
        'rows of each whitening sub-batch (> projOutputDim unless whiteningEps > 0; if it does not divide the global batch, its largest divisor below is used)',
    },
    whiteningIters: { kind: 'int', default: 1, ge: 1, description: 'whitening iterations per step, each with its own random sub-batches' },
    whiteningEps: { kind: 'float', default: 0, ge: 0, lt: 1, description: 'shrinkage of the covariance towards the identity before whitening' },
  });
  declare readonly args: ArgValues<typeof WMSE.args>;
  static override readonly paper = 'Ermolov et al. 2021, "Whitening for Self-Supervised Representation Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 2e-3, classifierLr: 3e-3, weightDecay: 1e-6 };
  static override readonly viewRecipe = 'simclr' as const;

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** `[1]` int32: how many times the loss drew its permutations (the checkpointed copy of {@link calls}). */
  private readonly lossCalls: Variable;
  /** How many times the loss drew its permutations (keys the next draw). */
  private calls = 0;
  /** Keys the permutations together with {@link lossCalls}; the same on every rank (drawn from the seeded generator). */
  private readonly permutationSeed: number;
  /** Sample orders announced by {@link presentSampleOrders}, one per coming loss call. */
  private pendingOrders: Int32Array[] = [];

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim } = this.args;
    this.projector = this.addModule('projector', mlpHead([this.backbone.featureDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }));
    this.permutationSeed = ctx.rng.int(0x7fffffff);
    this.lossCalls = this.addBuffer('lossCalls', tf.zeros([1], 'int32'));
  }

  /** Projections of the views: `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => this.projector.forward(f));
  }

  override embeddingLoss(views: Tensor[]): SslLossOutput {
    const { globalBatch, rank } = batchLayout('WMSE', views[0]!.shape[0]!, undefined); // the scoped group's
    const whiteningSize = this.effectiveWhiteningSize(globalBatch, rank);
    const rng = Rng.keyed(this.permutationSeed, this.calls);
    this.calls += 1;
    tf.tidy(() => this.lossCalls.assign(tf.tensor1d([this.calls], 'int32')));
    const order = this.pendingOrders.shift();
    const permutations = Array.from({ length: this.args.whiteningIters }, () => inSampleOrder(rng.permutation(globalBatch), order));
    const loss = wmseLoss(views as Tensor2D[], { whiteningSize, permutations, eps: this.args.whiteningEps });
    return { loss, embeddings: views[0] };
  }

  /**
   * Restores the state, and the loss call count from its `lossCalls` entry: read before the
   * copy into the buffer, while a checkpoint's tensor still holds its host values (a read
   * outside any step, which the WebGPU engine answers without reading the device).
   */
  override loadStateDict(state: StateDict, strict = true): { missing: string[]; unexpected: string[] } {
    const saved = state['lossCalls']?.dataSync()[0];
    const result = super.loadStateDict(state, strict);
    if (saved !== undefined) this.calls = saved;
    return result;
  }

  /**
   * Announces that the coming loss calls (one per micro-batch) see their global batch in
   * another order: row i is row `orders[k][i]` of the batch the permutations are drawn for
   * (verify's round-off twins). The sub-batches are then made of the same samples.
   */
  override presentSampleOrders(orders: Int32Array[]): void {
    this.pendingOrders = [...orders];
  }

  /** The whiteningSize arg, or the largest divisor of `globalBatch` below it (said once per job, by rank 0: see below). */
  private effectiveWhiteningSize(globalBatch: number, rank: number): number {
    const wanted = this.args.whiteningSize;
    let size = Math.min(wanted, globalBatch);
    while (size > 1 && globalBatch % size !== 0) size--;
    const note = `ssl-train: note: wmse's whitening size ${wanted} does not divide the global batch of ${globalBatch}; whitening sub-batches of ${size} rows instead`;
    // A process says a note once, and only if its first loss call that meets it runs as rank 0: so
    // verify's one-process runs on the other ranks (a group of one) stay silent, their W-rank run having met it first.
    if (size !== wanted && !NOTES_GIVEN.has(note)) {
      if (rank === 0) console.warn(note); // stderr in Node, the console in a page
      NOTES_GIVEN.add(note);
    }
    return size;
  }
}

/** The notes on the whitening size already given by this process (one per size and batch, not per method instance). */
const NOTES_GIVEN = new Set<string>();

/**
 * `perm` (positions of the reference batch) expressed in a batch whose row i is reference row
 * `order[i]`: the same samples in the same sub-batch positions. Without `order`, `perm` itself.
 */
function inSampleOrder(perm: Int32Array, order: Int32Array | undefined): Int32Array {
  if (!order) return perm;
  const rowOf = new Int32Array(order.length);
  order.forEach((referenceRow, row) => (rowOf[referenceRow] = row));
  return perm.map((referenceRow) => rowOf[referenceRow]!);
}
