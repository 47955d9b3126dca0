import { invalidValue } from '../core/errors.js';
import type { Module } from '../core/module.js';
import type { Sequential } from '../core/layers.js';
import { l2NormalizeRows } from '../core/ops.js';
import { tf, type Tensor, type Tensor2D } from '../core/tf.js';
import { deepClusterV2Loss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SslLossOutput, type StepInfo } from './base.js';
import { ClusterMemory } from './cluster-memory.js';
import { mlpHead } from './heads.js';

/**
 * DeepCluster v2 (Caron et al. 2020): at the start of every epoch, k-means clusters the
 * normalised projections of the previous epoch (a memory bank with a row per sample and
 * view); each of H heads' frozen prototypes are reset to its centroids, and during the epoch
 * both views' projections are trained to predict their sample's cluster: the cross-entropy of
 * `z · prototypesᵀ / τ` against the assignment, averaged over the heads
 * ({@link deepClusterV2Loss}). In epoch 0 no sample has a cluster yet and the loss is 0 (only
 * the online classifier learns), as in solo-learn, whose targets are all ignored then.
 *
 * Global state ({@link ClusterMemory}): the bank is written from the gathered global batch by
 * dataset index, k-means all-reduces its sums every iteration with each rank scoring its
 * shard of the bank, so bank, assignments, centroids and prototypes equal one process's.
 *
 * Defaults: solo-learn's CIFAR recipe (`scripts/pretrain/cifar/deepclusterv2.yaml`,
 * `solo/methods/deepclusterv2.py`): projector 2048-128 (Linear-BN-ReLU-Linear), 3 heads of
 * 3000 prototypes, temperature 0.1, 10 k-means iterations, LARS, lr 0.6, classifier lr 0.1,
 * weight decay 1e-6, two symmetric views (the `simclr` recipe). solo-learn allows a different K
 * per head; here every head has `num_prototypes`.
 */
export class DeepClusterV2 extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the projector' },
    projOutputDim: { kind: 'int', default: 128, ge: 1, description: 'output width of the projector (the memory bank rows)' },
    numPrototypes: { kind: 'int', default: 3000, ge: 1, description: 'prototypes (k-means clusters) per head; at most the samples of an epoch' },
    heads: { kind: 'int', default: 3, ge: 1, description: 'prototype heads (independent clusterings; head h clusters view h mod 2)' },
    temperature: { kind: 'float', default: 0.1, gt: 0, description: 'softmax temperature of the prototype scores' },
    kmeansIters: { kind: 'int', default: 10, ge: 0, description: 'k-means iterations at each epoch start' },
  });
  declare readonly args: ArgValues<typeof DeepClusterV2.args>;
  static override readonly paper = 'Caron et al. 2020, "Unsupervised Learning of Visual Features by Contrasting Cluster Assignments"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.6, classifierLr: 0.1, weightDecay: 1e-6 };

  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** The memory bank, assignments and prototypes. */
  readonly memory: ClusterMemory;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, numPrototypes, heads } = this.args;
    if (ctx.datasetSize === undefined) throw new Error('DeepClusterV2: needs the training set size (MethodContext.datasetSize) for its memory bank');
    if (numPrototypes > ctx.datasetSize) {
      throw invalidValue('method_args.num_prototypes', numPrototypes, `at most ${ctx.datasetSize}, the samples in the training set`);
    }
    this.projector = this.addModule('projector', mlpHead([this.backbone.featureDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }));
    this.memory = this.addModule(
      'memory',
      new ClusterMemory({ datasetSize: ctx.datasetSize, views: 2, dim: projOutputDim, prototypes: numPrototypes, heads, rng: ctx.rng }),
    );
  }

  /** The L2-normalised projections of the two views: `[z1, z2]`, `[B, projOutputDim]` each. */
  override embed(features: Tensor[]): Tensor[] {
    return features.map((f) => l2NormalizeRows(this.projector.forward(f) as Tensor2D));
  }

  override embeddingLoss([z1, z2]: Tensor[], _labels: Tensor, indices?: Int32Array): SslLossOutput {
    if (!indices) throw new Error("DeepClusterV2: the batch's dataset indices are needed (trainingStep(views, labels, { seed, epoch, indices }))");
    const z = tf.concat([z1, z2], 0) as Tensor2D;
    // Scores [2B, K] per head; the prototypes are constants (frozen, reset by k-means).
    const scores = Array.from({ length: this.args.heads }, (_, h) => tf.matMul(z, this.memory.prototypes(h), false, true) as Tensor2D);
    const targets = this.memory.targets(indices);
    const loss = deepClusterV2Loss(scores, targets, { temperature: this.args.temperature });
    tf.dispose(targets);
    this.memory.push([z1, z2], indices);
    return { loss, embeddings: z1 };
  }

  /** Clusters the previous epoch's bank (all ranks together) and resets the prototypes. */
  override onTrainEpochStart(info: StepInfo): void {
    this.memory.cluster(info.epoch, this.args.kmeansIters, this.group);
  }

  /** Writes the step's projections into the bank, marked with the step's epoch. */
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    this.memory.flush(info.epoch);
  }

  override memoryModules(): Array<[string, Module]> {
    return [...super.memoryModules(), ['memory', this.memory]];
  }
}
