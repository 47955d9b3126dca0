/**
 * Synchronised batch normalisation (docs/design.md contract 4): batch statistics over the global
 * batch of all ranks, so that a W-rank step equals a one-process step on the concatenated
 * batch, forward and backward.
 */
import { IterNorm } from '../core/iter-norm.js';
import { BatchNorm, type BatchMoments, type BatchNormOptions } from '../core/layers.js';
import type { Module } from '../core/module.js';
import { tf, type Tensor } from '../core/tf.js';
import { allGather } from './collectives.js';
import type { ProcessGroup } from '../core/process-group.js';
import { SyncIterNorm } from './sync-iter-norm.js';

/**
 * {@link BatchNorm} whose training-mode statistics are those of the global batch over every
 * rank of `group`: `[B, C] -> [B, C]` or `[B, H, W, C] -> [B, H, W, C]`, numerically the
 * layer a single process would apply to the concatenation of all ranks' inputs.
 *
 * How (one collective forward, one backward, per call):
 * - Each rank computes, per channel, its local mean and centred sum of squares
 *   `M2_r = Σ (x − mean_r)²` (two passes, no E[x²] − E[x]² cancellation) and its count n_r.
 * - `[mean_r, M2_r, n_r]` `[2C + 1]` is all-gathered (differentiable `allGather`) and every
 *   rank combines the W rows identically (Chan et al.'s parallel variance):
 *   `n = Σ n_r`, `mean = Σ n_r·mean_r / n`, `var = (Σ M2_r + Σ n_r·(mean_r − mean)²) / n`
 *   (biased). The result is bit-identical on every rank, and so are the running statistics
 *   (unbiased variance with the global count n, from the base class).
 * - Backward: autograd through the combination and the gather's reduce-scatter SUM delivers
 *   to each rank's local statistics the gradient summed over every rank's loss — the same
 *   information as all-reducing sum(dy) and sum(dy·x̂) — so each rank's input gradient is
 *   that of Σ_q loss_q, and DDP's averaging of parameter gradients gives the one-process
 *   gradient of the global mean loss (scale convention: src/distributed/collectives.ts).
 *
 * Every rank must run the layer in the same order (it is a collective), with the same C;
 * local batch sizes may differ. Evaluation mode uses the running statistics and runs no
 * collective. With a group of one process it is exactly {@link BatchNorm}.
 */
export class SyncBatchNorm extends BatchNorm {
  constructor(
    numFeatures: number,
    options: BatchNormOptions,
    readonly group: ProcessGroup,
  ) {
    super(numFeatures, options);
  }

  /**
   * A SyncBatchNorm with `bn`'s configuration (eps, momentum, affine), a copy of its
   * parameters (trainable flags included) and buffers, and its training mode.
   */
  static fromBatchNorm(bn: BatchNorm, group: ProcessGroup): SyncBatchNorm {
    const sync = new SyncBatchNorm(bn.numFeatures, { eps: bn.eps, momentum: bn.momentum, affine: bn.weight !== undefined }, group);
    sync.loadStateDict(bn.stateDict());
    if (bn.weight && sync.weight) sync.weight.trainable = bn.weight.trainable;
    if (bn.bias && sync.bias) sync.bias.trainable = bn.bias.trainable;
    sync.training = bn.training;
    return sync;
  }

  /** Global-batch mean and biased variance `[C]` (see the class comment), and the global count. */
  protected override batchMoments(x: Tensor, reduceAxes: number[]): BatchMoments {
    if (this.group.worldSize === 1) return super.batchMoments(x, reduceAxes);
    const c = this.numFeatures;
    const w = this.group.worldSize;
    const localCount = reduceAxes.reduce((n, axis) => n * x.shape[axis]!, 1);
    const local = tf.moments(x, reduceAxes); // mean_r, M2_r / n_r: [C] each
    const packed = tf.concat([local.mean, tf.mul(local.variance, localCount), tf.tensor1d([localCount])]); // [2C+1]
    const all = allGather(tf.reshape(packed, [1, 2 * c + 1]), this.group); // [W, 2C+1]
    const [means, m2s, counts] = tf.split(all, [c, c, 1], 1) as [Tensor, Tensor, Tensor]; // [W,C] [W,C] [W,1]
    const perRankCounts = counts.dataSync();
    let count = 0;
    for (let r = 0; r < w; r++) count += perRankCounts[r]!;
    const mean = tf.div(tf.sum(tf.mul(means, counts), 0), count); // [C]
    const between = tf.sum(tf.mul(tf.square(tf.sub(means, mean)), counts), 0); // [C]
    const variance = tf.div(tf.add(tf.sum(m2s, 0), between), count); // [C], biased
    return { mean, variance, count };
  }
}

/**
 * Replaces every {@link BatchNorm} in the tree under `root` (not `root` itself) by a
 * {@link SyncBatchNorm} on `group`, and every {@link IterNorm} by a {@link SyncIterNorm},
 * copying parameters, buffers and mode (see {@link SyncBatchNorm.fromBatchNorm}), and disposes
 * the replaced layers' variables. Layers that already are synchronised are left alone; a layer
 * registered under several parents becomes one shared synchronised layer. Returns how many
 * layers were converted.
 *
 * Call it before creating the optimizer (the parameters are new variables). Containers look
 * their children up by name, so the conversion takes effect on the next forward.
 */
export function convertSyncBatchNorm(root: Module, group: ProcessGroup): number {
  if (root instanceof BatchNorm) {
    throw new Error('convertSyncBatchNorm: the root module is itself a BatchNorm; convert the module that contains it');
  }
  const converted = new Map<Module, Module>();
  const synchronised = (layer: Module): Module | undefined => {
    if (layer instanceof BatchNorm && !(layer instanceof SyncBatchNorm)) return SyncBatchNorm.fromBatchNorm(layer, group);
    if (layer instanceof IterNorm && !(layer instanceof SyncIterNorm)) return SyncIterNorm.fromIterNorm(layer, group);
    return undefined;
  };
  const parents = root.namedModules().map(([, m]) => m);
  for (const parent of parents) {
    for (const [name, child] of parent.namedChildren()) {
      const sync = converted.get(child) ?? synchronised(child);
      if (!sync) continue;
      converted.set(child, sync);
      parent.replaceModule(name, sync);
    }
  }
  for (const old of converted.keys()) old.dispose();
  return converted.size;
}
