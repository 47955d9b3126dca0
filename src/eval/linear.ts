/**
 * Offline linear evaluation, as solo-learn's `main_linear.py`: a linear classifier (and,
 * when fine-tuning, the backbone) trained with SGD and a cosine learning rate on labelled
 * data, evaluated (top-1, top-5) on the validation set after every epoch.
 */
import { Rng } from '../core/random.js';
import { tf, type Scalar, type Tensor, type Variable } from '../core/tf.js';
import { SGD, WarmupCosineSchedule, type NamedParam } from '../optim/index.js';
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
  /** Logits `[B, K]`; `training` selects the train-mode forward (and the gradient tape). */
  logits(inputs: Tensor, training: boolean): Tensor;
  /** The parameters the optimizer updates (the classifier; the backbone too when fine-tuning). */
  trainableParameters(): NamedParam[];
}

/** Optimizer and schedule of a linear evaluation. */
export interface LinearEvalSettings {
  epochs: number;
  /** Training batch; the last incomplete batch of an epoch is dropped (solo-learn's loader). */
  batchSize: number;
  /** The applied lr (already scaled by batch / 256), annealed to 0 by a cosine over every step. */
  lr: number;
  momentum: number;
  weightDecay: number;
  /** Seeds the shuffling of every epoch. */
  seed: number;
  /** Validation batch (default `batchSize`). */
  evalBatchSize?: number;
}

/** What one epoch of linear evaluation gave. */
export interface LinearEpoch {
  /** Zero-based epoch. */
  epoch: number;
  /** Optimizer steps done after this epoch. */
  step: number;
  /** Mean cross-entropy of the epoch's training batches. */
  trainLoss: number;
  /** Training top-1 accuracy over the epoch's batches (as trained: augmented, train mode). */
  trainAcc1: number;
  /** Validation top-1 / top-5 in [0, 1]. */
  val: Accuracy;
  valLoss: number;
  /** The lr of the epoch's last step. */
  lr: number;
}

/** The number of optimizer steps of one epoch over `length` samples. */
export function linearStepsPerEpoch(length: number, batchSize: number): number {
  return Math.floor(length / batchSize);
}

/**
 * The cosine schedule of linear evaluation (solo-learn's `warmup_cosine` with no warmup):
 * `lr_k = lr * (1 + cos(pi * k / T)) / 2` at optimizer step k of T = epochs x steps per epoch.
 */
export function linearEvalSchedule(epochs: number, stepsPerEpoch: number): WarmupCosineSchedule {
  return new WarmupCosineSchedule({ warmupSteps: 0, totalSteps: epochs * stepsPerEpoch, warmupStartLr: 0, minLr: 0 });
}

/**
 * Counts, among the rows of `logits [N, K]`, those whose label (`labels [N]`) is the top-1
 * class and those where it is among the top 5, and sums the cross-entropy.
 */
function scoreLogits(logits: Tensor, labels: Int32Array): { top1: number; top5: number; lossSum: number } {
  const [ranking, losses] = tf.tidy(() => {
    const k = Math.min(5, logits.shape[1] ?? 1);
    const oneHot = tf.oneHot(tf.tensor1d(labels, 'int32'), logits.shape[1] ?? 1);
    return [tf.topk(logits, k).indices, tf.losses.softmaxCrossEntropy(oneHot, logits, undefined, undefined, tf.Reduction.NONE)];
  });
  const predicted = ranking.dataSync();
  const lossValues = losses.dataSync();
  const width = ranking.shape[1] ?? 1;
  tf.dispose([ranking, losses]);
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

/** Top-1 / top-5 accuracy and mean cross-entropy of `model` (eval mode) on all of `set`, in batches. */
export async function evaluateLinear(model: LinearEvalModel, set: LabelledSet, batchSize: number): Promise<{ accuracy: Accuracy; loss: number }> {
  let top1 = 0;
  let top5 = 0;
  let lossSum = 0;
  for (let start = 0; start < set.length; start += batchSize) {
    const indices = Int32Array.from({ length: Math.min(batchSize, set.length - start) }, (_, i) => start + i);
    const inputs = await set.inputs(indices, -1);
    const logits = tf.tidy(() => model.logits(inputs, false));
    inputs.dispose();
    const score = scoreLogits(logits, set.labels.subarray(start, start + indices.length));
    logits.dispose();
    top1 += score.top1;
    top5 += score.top5;
    lossSum += score.lossSum;
  }
  const n = Math.max(1, set.length);
  return { accuracy: { top1: top1 / n, top5: top5 / n }, loss: lossSum / n };
}

/**
 * Trains `model` on `train` for `settings.epochs` epochs (each a seeded shuffle split into
 * full batches; SGD with momentum, the cosine lr of {@link linearEvalSchedule} set before
 * every step) and evaluates it on `val` after every epoch; `onEpoch` receives each epoch's
 * figures (awaited, e.g. to log them). Returns every epoch's figures.
 */
export async function fitLinearEval(
  model: LinearEvalModel,
  train: LabelledSet,
  val: LabelledSet,
  settings: LinearEvalSettings,
  onEpoch?: (epoch: LinearEpoch) => void | Promise<void>,
): Promise<LinearEpoch[]> {
  const stepsPerEpoch = linearStepsPerEpoch(train.length, settings.batchSize);
  if (stepsPerEpoch < 1) throw new RangeError(`batch size ${settings.batchSize} is larger than the training set (${train.length})`);
  const params = model.trainableParameters();
  const variables: Variable[] = params.map((p) => p.variable);
  const optimizer = new SGD([{ name: 'linear', params, lr: settings.lr, weightDecay: settings.weightDecay }], { momentum: settings.momentum });
  const schedule = linearEvalSchedule(settings.epochs, stepsPerEpoch);
  const history: LinearEpoch[] = [];
  let step = 0;
  try {
    for (let epoch = 0; epoch < settings.epochs; epoch++) {
      const order = Rng.keyed(settings.seed, epoch).permutation(train.length);
      let lossSum = 0;
      let correct = 0;
      for (let b = 0; b < stepsPerEpoch; b++) {
        const indices = order.subarray(b * settings.batchSize, (b + 1) * settings.batchSize);
        const labels = Int32Array.from(indices, (i) => train.labels[i]);
        schedule.apply(optimizer, step);
        const inputs = await train.inputs(indices, epoch);
        let logits: Tensor | undefined;
        const { value, grads } = tf.variableGrads(() => {
          const out = model.logits(inputs, true);
          logits = tf.keep(out);
          const oneHot = tf.oneHot(tf.tensor1d(labels, 'int32'), out.shape[1] ?? 1);
          return tf.losses.softmaxCrossEntropy(oneHot, out) as Scalar;
        }, variables);
        optimizer.step(grads);
        const score = scoreLogits(logits as Tensor, labels);
        lossSum += value.dataSync()[0];
        correct += score.top1;
        tf.dispose([inputs, value, logits as Tensor, ...Object.values(grads)]);
        step++;
      }
      const evaluation = await evaluateLinear(model, val, settings.evalBatchSize ?? settings.batchSize);
      const figures: LinearEpoch = {
        epoch,
        step,
        trainLoss: lossSum / stepsPerEpoch,
        trainAcc1: correct / (stepsPerEpoch * settings.batchSize),
        val: evaluation.accuracy,
        valLoss: evaluation.loss,
        lr: optimizer.getLr(0),
      };
      history.push(figures);
      await onEpoch?.(figures);
    }
  } finally {
    optimizer.dispose();
  }
  return history;
}
