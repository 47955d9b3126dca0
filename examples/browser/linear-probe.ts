/**
 * The page's linear probe (examples/browser, docs/browser.md): a softmax (multinomial
 * logistic-regression) classifier trained on frozen backbone features of a labelled split and
 * scored on the rest. The training is the library's linear evaluation (`LinearEvalTask`,
 * `linearTrainingData` and `evaluateLinear` of src/eval/linear.ts, a `Linear` layer, SGD with
 * momentum and a cosine lr, each step's gradients by the trainer's `accumulateBatch`), as
 * `ssl-train linear` trains on precomputed features.
 *
 * The library is a parameter (the page passes the browser bundle, Node tests the library's
 * modules): this module imports nothing at run time and is served to the page as is.
 */
import type * as Zoo from '../../src/browser.js';

type Library = typeof Zoo;

/** How the probe trains. */
export interface LinearProbeSettings {
  /** Seeds the split, the classifier's initial weights and the batch order. */
  seed: number;
  /** Passes over the training split (default {@link LINEAR_PROBE_DEFAULTS}). */
  epochs: number;
  /** Largest training batch; a smaller training split is one full batch. */
  batchSize: number;
  /** SGD learning rate as applied (not scaled by the batch), annealed to 0 by a cosine over every step. */
  lr: number;
  momentum: number;
  weightDecay: number;
}

/** The probe's settings unless told otherwise (the seed is the run's). */
export const LINEAR_PROBE_DEFAULTS: Omit<LinearProbeSettings, 'seed'> = { epochs: 100, batchSize: 64, lr: 0.1, momentum: 0.9, weightDecay: 0 };

/** The labelled split: positions in the probed rows. */
export interface ProbeSplit {
  train: Int32Array;
  test: Int32Array;
}

/** What the probe measured. */
export interface LinearProbeResult {
  /** Top-1 accuracy on the test split, in [0, 1]. */
  testAccuracy: number;
  /** Mean cross-entropy on the test split. */
  testLoss: number;
  /** Top-1 accuracy on the training split (after training). */
  trainAccuracy: number;
  trainImages: number;
  testImages: number;
  /** Optimizer steps taken. */
  steps: number;
  batchSize: number;
}

/**
 * A seeded half / half split of each class: the positions of class c (in `labels` order) are
 * permuted by `Rng.keyed(seed, c)`; the first ceil(n / 2) train, the rest test (a class of one
 * image only trains). Both lists are in increasing position order.
 */
export function probeSplit(zoo: Library, labels: Int32Array, numClasses: number, seed: number): ProbeSplit {
  const train: number[] = [];
  const test: number[] = [];
  for (let c = 0; c < numClasses; c++) {
    const members = Array.from(labels.keys()).filter((i) => labels[i] === c);
    const order = zoo.Rng.keyed(seed, c).permutation(members.length);
    order.forEach((k, at) => (at < Math.ceil(members.length / 2) ? train : test).push(members[k]));
  }
  const sorted = (xs: number[]) => Int32Array.from(xs).sort();
  return { train: sorted(train), test: sorted(test) };
}

/**
 * Per-feature mean and standard deviation of rows `rows` of `values` (`[n, dim]`), and the
 * standardised copy of `rows` (`(x - mean) / max(std, 1e-6)`): `[rows.length, dim]`. The probe
 * standardises both splits with the training split's statistics, so that one learning rate
 * fits backbones whose features differ in scale.
 */
export function standardise(values: Float32Array, dim: number, rows: Int32Array, stats?: { mean: Float64Array; std: Float64Array }) {
  const { mean, std } = stats ?? featureStats(values, dim, rows);
  const out = new Float32Array(rows.length * dim);
  rows.forEach((row, i) => {
    for (let d = 0; d < dim; d++) out[i * dim + d] = (values[row * dim + d] - mean[d]) / Math.max(std[d], 1e-6);
  });
  return { values: out, mean, std };
}

/** Mean and (population) standard deviation of each feature over rows `rows` of `values` (`[n, dim]`). */
function featureStats(values: Float32Array, dim: number, rows: Int32Array): { mean: Float64Array; std: Float64Array } {
  const mean = new Float64Array(dim);
  const std = new Float64Array(dim);
  for (const row of rows) for (let d = 0; d < dim; d++) mean[d] += values[row * dim + d] / rows.length;
  for (const row of rows) for (let d = 0; d < dim; d++) std[d] += (values[row * dim + d] - mean[d]) ** 2 / rows.length;
  for (let d = 0; d < dim; d++) std[d] = Math.sqrt(std[d]);
  return { mean, std };
}

/**
 * The linear probe of features `values` (`[labels.length, dim]`, one row per image, `labels`
 * in 0..numClasses-1): {@link probeSplit}, {@link standardise}, then a `Linear(dim,
 * numClasses)` initialised from `Rng(seed)`, trained with the softmax cross-entropy for
 * `epochs` passes (batches of min(batchSize, training images), in the keyed order of
 * `linearTrainingData`, the last incomplete batch dropped), scored on both splits. Throws a
 * `UserError` when no class has two images (no test image).
 */
export async function linearProbe(
  zoo: Library,
  features: { values: Float32Array; dim: number },
  labels: Int32Array,
  numClasses: number,
  settings: LinearProbeSettings,
): Promise<LinearProbeResult> {
  const { tf } = zoo;
  const { dim } = features;
  const split = probeSplit(zoo, labels, numClasses, settings.seed);
  if (split.test.length === 0) throw new zoo.UserError('the linear probe needs a class with two or more images (one trains, one tests)');
  const train = standardise(features.values, dim, split.train);
  const test = standardise(features.values, dim, split.test, train);
  const trainTensor = tf.tensor2d(train.values, [split.train.length, dim]);
  const testTensor = tf.tensor2d(test.values, [split.test.length, dim]);
  const labelledSet = (inputs: Zoo.Tensor, rows: Int32Array): Zoo.LabelledSet => ({
    length: rows.length,
    labels: Int32Array.from(rows, (row) => labels[row]),
    inputs: (indices) => tf.tidy(() => tf.gather(inputs, tf.tensor1d(indices, 'int32'))),
  });
  const trainSet = labelledSet(trainTensor, split.train);
  const testSet = labelledSet(testTensor, split.test);
  const classifier = new zoo.Linear(dim, numClasses, { rng: new zoo.Rng(settings.seed) });
  const model: Zoo.LinearEvalModel = { module: classifier, logits: (inputs) => classifier.forward(inputs) };
  const batchSize = Math.min(settings.batchSize, trainSet.length);
  const { lr, momentum, weightDecay } = settings;
  const task = new zoo.LinearEvalTask(model, testSet, { lr, momentum, weightDecay, evalBatchSize: batchSize });
  const strategy = new zoo.SingleDeviceStrategy();
  task.setup({ group: strategy.group });
  const stepsPerEpoch = zoo.linearStepsPerEpoch(trainSet.length, batchSize);
  const { optimizer, scheduler } = task.configureOptimizers({ totalSteps: settings.epochs * stepsPerEpoch, stepsPerEpoch });
  const variables = classifier.trainableParameters();
  let steps = 0;
  try {
    const data = zoo.linearTrainingData(trainSet, batchSize, settings.seed, strategy.group);
    for (let epoch = 0; epoch < settings.epochs; epoch++) {
      for await (const batch of data.batches(epoch, 0)) {
        // The trainer's step on one device, without its per-step finiteness read (a GPU round
        // trip each step: most of a step's time on WebGPU); the scores below are checked once.
        scheduler.apply(steps++);
        const { grads, metrics } = zoo.accumulateBatch(task, batch, variables);
        optimizer.step(grads);
        tf.dispose([...Object.values(grads), ...Object.values(metrics)]);
      }
    }
    const scored = await zoo.evaluateLinear(model, testSet, batchSize);
    const trained = await zoo.evaluateLinear(model, trainSet, batchSize);
    if (!Number.isFinite(scored.loss)) throw new zoo.TrainingFailure(`the linear probe diverged: its test loss is ${scored.loss} after ${steps} steps`);
    return {
      ...{ testAccuracy: scored.accuracy.top1, testLoss: scored.loss, trainAccuracy: trained.accuracy.top1 },
      ...{ trainImages: trainSet.length, testImages: testSet.length, steps, batchSize },
    };
  } finally {
    optimizer.dispose();
    classifier.dispose();
    tf.dispose([trainTensor, testTensor]);
  }
}
