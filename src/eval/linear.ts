/**
 * Offline linear evaluation, as solo-learn's `main_linear.py`: a linear classifier (and,
 * when fine-tuning, the backbone) trained with SGD and a cosine learning rate on labelled
 * data, evaluated (top-1, top-5) on the validation set after every epoch. It is a
 * {@link TrainingModule} the trainer runs (src/trainer), so it resumes from checkpoints,
 * runs data-parallel on W ranks and stops at a non-finite step like pre-training.
 */
import type { Module } from '../core/module.js';
import type { ProcessGroup } from '../core/process-group.js';
import { Rng } from '../core/random.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import { SGD, toNamedParams, WarmupCosineSchedule } from '../optim/index.js';
import type { DataSource, TrainerOptimizer, TrainerScheduler, TrainingModule, TrainingStepOutput } from '../trainer/interfaces.js';
import type { Accuracy } from './knn.js';

/** A labelled set whose model inputs are made on demand (precomputed features, or image views). */
export interface LabelledSet {
  readonly length: number;
  /** `[length]` class indices. */
  readonly labels: Int32Array;
  /**
   * The inputs of the samples `indices` (`[n]`) in `epoch` (`-1` for evaluation): `[n, F]`
   * features or `[n, S, S, C]` images, augmented or not as the set was built; a promise when
   * they are read from disk. The caller disposes the tensor.
   */
  inputs(indices: Int32Array, epoch: number): Tensor | Promise<Tensor>;
}

/** What is trained: inputs `[B, ...]` to logits `[B, K]`. */
export interface LinearEvalModel {
  /**
   * The module checkpointed whole (e.g. the method: its backbone with the classifier); its
   * trainable parameters are what the optimizer updates (freeze the others).
   */
  readonly module: Module;
  /** Logits `[B, K]`; `training` selects the train-mode forward (and the gradient tape). */
  logits(inputs: Tensor, training: boolean): Tensor;
}

/** Optimizer and schedule of a linear evaluation. */
export interface LinearEvalSettings {
  /** The applied lr (already scaled by batch / 256), annealed to 0 by a cosine over every step. */
  lr: number;
  momentum: number;
  weightDecay: number;
  /** Validation batch per rank. */
  evalBatchSize: number;
}

/** One rank's share of a training batch: `inputs [B, ...]` (the data source disposes it after the step) and `labels [B]`. */
export interface LinearBatch {
  inputs: Tensor;
  labels: Int32Array;
}

/** The number of optimizer steps of one epoch over `length` samples (the last incomplete batch is dropped). */
export function linearStepsPerEpoch(length: number, batchSize: number): number {
  return Math.floor(length / batchSize);
}

/**
 * The cosine schedule of linear evaluation (solo-learn's `warmup_cosine` with no warmup):
 * `lr_k = lr * (1 + cos(pi * k / T)) / 2` at optimizer step k of T = `totalSteps` (epochs x
 * steps per epoch).
 */
export function linearEvalSchedule(totalSteps: number): WarmupCosineSchedule {
  return new WarmupCosineSchedule({ warmupSteps: 0, totalSteps, warmupStartLr: 0, minLr: 0 });
}

/**
 * The training batches of linear evaluation on this rank: every epoch a permutation of `set`
 * keyed by (`seed`, epoch), cut into global batches of `globalBatch` samples (the last
 * incomplete one dropped, as solo-learn's loader); rank r of W takes the r-th of the W equal
 * contiguous slices of each, so W ranks together train on the batches of one process.
 * Resumable from any batch index; each batch's input tensor is disposed when the next is asked for.
 */
export function linearTrainingData(set: LabelledSet, globalBatch: number, seed: number, group: ProcessGroup): DataSource<LinearBatch> {
  const { rank, worldSize } = group;
  if (globalBatch % worldSize !== 0) throw new RangeError(`batch size ${globalBatch} does not split over ${worldSize} ranks`);
  const local = globalBatch / worldSize;
  const perEpoch = linearStepsPerEpoch(set.length, globalBatch);
  return {
    batchSize: local,
    numBatches: () => perEpoch,
    async *batches(epoch, startBatch) {
      const order = Rng.keyed(seed, epoch).permutation(set.length);
      for (let b = startBatch; b < perEpoch; b++) {
        const start = b * globalBatch + rank * local;
        const indices = order.slice(start, start + local);
        const inputs = await set.inputs(indices, epoch);
        try {
          yield { inputs, labels: Int32Array.from(indices, (i) => set.labels[i]) };
        } finally {
          inputs.dispose();
        }
      }
    },
    close: () => Promise.resolve(),
  };
}

/**
 * Counts, among the rows of `logits [N, K]`, those whose label (`labels [N]`) is the top-1
 * class and those where it is among the top 5, and sums the cross-entropy. Reads the device
 * asynchronously (WebGPU has no synchronous read in Node, and a page's is a slow detour
 * through a canvas).
 */
async function scoreLogits(logits: Tensor, labels: Int32Array): Promise<{ top1: number; top5: number; lossSum: number }> {
  const [ranking, losses] = tf.tidy(() => {
    const k = Math.min(5, logits.shape[1] ?? 1);
    const oneHot = tf.oneHot(tf.tensor1d(labels, 'int32'), logits.shape[1] ?? 1);
    return [tf.topk(logits, k).indices, tf.losses.softmaxCrossEntropy(oneHot, logits, undefined, undefined, tf.Reduction.NONE)];
  });
  let predicted: ArrayLike<number>;
  let lossValues: ArrayLike<number>;
  try {
    [predicted, lossValues] = (await Promise.all([ranking.data(), losses.data()])) as [Int32Array, Float32Array];
  } finally {
    tf.dispose([ranking, losses]);
  }
  const width = ranking.shape[1] ?? 1;
  let top1 = 0;
  let top5 = 0;
  let lossSum = 0;
  for (let i = 0; i < labels.length; i++) {
    if (predicted[i * width] === labels[i]) top1++;
    for (let j = 0; j < width; j++) if (predicted[i * width + j] === labels[i]) top5++;
    lossSum += lossValues[i];
  }
  return { top1, top5, lossSum };
}

/**
 * Top-1 / top-5 accuracy and mean cross-entropy of `model` (eval mode) on all of `set`, in
 * batches. With a `group` of W ranks each scores a contiguous W-th of the set and the counts
 * and loss sums are all-reduced, so every rank gets the figures of the whole set.
 */
export async function evaluateLinear(
  model: LinearEvalModel,
  set: LabelledSet,
  batchSize: number,
  group?: ProcessGroup,
): Promise<{ accuracy: Accuracy; loss: number }> {
  const worldSize = group?.worldSize ?? 1;
  const per = Math.ceil(set.length / worldSize);
  const begin = Math.min(set.length, (group?.rank ?? 0) * per);
  const end = Math.min(set.length, begin + per);
  const sums = new Float32Array(3);
  for (let start = begin; start < end; start += batchSize) {
    const indices = Int32Array.from({ length: Math.min(batchSize, end - start) }, (_, i) => start + i);
    const inputs = await set.inputs(indices, -1);
    const logits = tf.tidy(() => model.logits(inputs, false));
    inputs.dispose();
    let score: { top1: number; top5: number; lossSum: number };
    try {
      score = await scoreLogits(logits, set.labels.subarray(start, start + indices.length));
    } finally {
      logits.dispose();
    }
    sums[0] += score.top1;
    sums[1] += score.top5;
    sums[2] += score.lossSum;
  }
  if (group && worldSize > 1) group.allReduce(sums, 'sum');
  const n = Math.max(1, set.length);
  return { accuracy: { top1: sums[0] / n, top5: sums[1] / n }, loss: sums[2] / n };
}

/**
 * Linear evaluation as the trainer's {@link TrainingModule}: the cross-entropy of the
 * model's logits on a batch (mean over this rank's samples; DDP averages the gradients over
 * ranks, which gives the gradient of the global batch's mean), SGD with momentum on the
 * module's trainable parameters (one group, `linear`) with the cosine lr of
 * {@link linearEvalSchedule}, and validation on `val` (`loss`, `acc1`, `acc5`) after every
 * epoch. Logged per step: `loss` and `acc1` (training top-1 on the augmented views, train mode).
 */
export class LinearEvalTask implements TrainingModule<LinearBatch> {
  private group: ProcessGroup | undefined;

  constructor(
    private readonly evalModel: LinearEvalModel,
    private readonly val: LabelledSet,
    private readonly settings: LinearEvalSettings,
  ) {}

  get model(): Module {
    return this.evalModel.module;
  }

  setup(context: { group: ProcessGroup }): void {
    this.group = context.group;
  }

  trainingStep(batch: LinearBatch): TrainingStepOutput {
    const logits = this.evalModel.logits(batch.inputs, true);
    const labels = tf.tensor1d(batch.labels, 'int32');
    const loss = tf.losses.softmaxCrossEntropy(tf.oneHot(labels, logits.shape[1] ?? 1), logits) as Scalar;
    const acc1 = tf.mean(tf.cast(tf.equal(tf.argMax(logits, 1), labels), 'float32')) as Scalar;
    return { loss, metrics: { loss: tf.keep(loss.clone()), acc1: tf.keep(acc1) } };
  }

  configureOptimizers(info: { totalSteps: number; stepsPerEpoch: number }): { optimizer: TrainerOptimizer; scheduler: TrainerScheduler } {
    const { lr, momentum, weightDecay } = this.settings;
    const optimizer = new SGD([{ name: 'linear', params: toNamedParams(this.model.namedParameters()), lr, weightDecay }], { momentum });
    const schedule = linearEvalSchedule(info.totalSteps);
    const scheduler: TrainerScheduler = {
      apply: (step) => {
        schedule.apply(optimizer, step);
        return { linear: optimizer.getLr(0) };
      },
    };
    return { optimizer, scheduler };
  }

  /** Validation top-1 / top-5 (`acc1`, `acc5`, in [0, 1]) and mean cross-entropy (`loss`) on the whole validation set. */
  async validate(): Promise<Record<string, number>> {
    const { accuracy, loss } = await evaluateLinear(this.evalModel, this.val, this.settings.evalBatchSize, this.group);
    return { loss, acc1: accuracy.top1, acc5: accuracy.top5 };
  }
}
