/**
 * Linear evaluation as a module of the trainer (src/eval/linear.ts), in process on separable
 * blobs: the schedule, learning, determinism, asynchronous inputs, the non-finite stop, and how W ranks split the
 * global batches. The CLI runs (resume after SIGKILL, 2 ranks) are in linear-eval.full.test.ts.
 */
import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { container } from 'tsyringe';
import { initEngine } from '../../src/core/engine.js';
import { Linear } from '../../src/core/layers.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import {
  evaluateLinear,
  LinearEvalTask,
  linearEvalSchedule,
  linearStepsPerEpoch,
  linearTrainingData,
  type LabelledSet,
  type LinearEvalModel,
} from '../../src/eval/linear.js';
import { LOGGER, type Logger } from '../../src/trainer/loggers.js';
import { SingleDeviceStrategy, STRATEGY } from '../../src/trainer/strategy.js';
import { NonFiniteError, Trainer, TRAINER_OPTIONS, type FitResult, type TrainerOptions } from '../../src/trainer/trainer.js';
import { tempDir } from '../helpers/run.js';

/** `n` points in `classes` well-separated Gaussian blobs in `dim` dimensions: `[n, dim]` and labels. */
function blobs(n: number, classes: number, dim: number, seed: number): { features: Tensor; labels: Int32Array } {
  const rng = new Rng(seed);
  const values = new Float32Array(n * dim);
  const labels = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    labels[i] = i % classes;
    for (let j = 0; j < dim; j++) values[i * dim + j] = (j === labels[i] ? 4 : 0) + 0.5 * rng.normal();
  }
  return { features: tf.tensor2d(values, [n, dim]), labels };
}

function featureSet(features: Tensor, labels: Int32Array): LabelledSet {
  return { length: labels.length, labels, inputs: (indices) => tf.tidy(() => tf.gather(features, tf.tensor1d(indices, 'int32'))) };
}

function linearModel(dim: number, classes: number): { model: LinearEvalModel; layer: Linear } {
  const layer = new Linear(dim, classes, { rng: new Rng(1) });
  return { layer, model: { module: layer, logits: (x) => layer.forward(x) } };
}

/** Rank `rank` of `worldSize`, for what needs only the group's place (no collectives). */
function place(rank: number, worldSize: number): ProcessGroup {
  return { rank, worldSize } as ProcessGroup;
}

interface Fit {
  fit: FitResult;
  /** The metrics the trainer logged, by step. */
  rows: Array<{ step: number; metrics: Record<string, number> }>;
}

/** Trains `model` on `train` through a trainer resolved from a child container (one process, an in-memory logger). */
async function fitLinear(
  model: LinearEvalModel,
  train: LabelledSet,
  val: LabelledSet,
  settings: { epochs: number; batchSize: number; seed: number },
): Promise<Fit> {
  const rows: Fit['rows'] = [];
  const logger: Logger = { logHyperparams: () => {}, logMetrics: (metrics, step) => void rows.push({ step, metrics }), finalize: () => {} };
  const scope = container.createChildContainer();
  const options: TrainerOptions = { maxEpochs: settings.epochs, logEvery: 1, valEvery: 1, checkpointEvery: 0, runDir: tempDir(), config: {} };
  scope.registerInstance(STRATEGY, new SingleDeviceStrategy());
  scope.registerInstance(LOGGER, logger);
  scope.registerInstance(TRAINER_OPTIONS, options);
  const task = new LinearEvalTask(model, val, { lr: 0.1, momentum: 0.9, weightDecay: 0, evalBatchSize: 7 });
  const fit = await scope.resolve(Trainer).fit(task, linearTrainingData(train, settings.batchSize, settings.seed, place(0, 1)));
  return { fit, rows };
}

describe('eval/linear', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('the cosine schedule starts at the lr, halves at mid-run and ends at 0 (solo-learn warmup_cosine without warmup)', () => {
    const schedule = linearEvalSchedule(50);
    assert.equal(schedule.lrAt(0, 0.2), 0.2);
    assert.ok(Math.abs(schedule.lrAt(25, 0.2) - 0.1) < 1e-12);
    assert.ok(Math.abs(schedule.lrAt(10, 0.2) - (0.2 * (1 + Math.cos(Math.PI / 5))) / 2) < 1e-12);
    assert.equal(schedule.lrAt(50, 0.2), 0);
    assert.equal(linearStepsPerEpoch(1000, 512), 1, 'the incomplete last batch is dropped');
  });

  it('a linear probe learns separable blobs (accuracy from chance to > 95%), validated and logged every epoch', async () => {
    const train = blobs(400, 4, 8, 0);
    const val = blobs(200, 4, 8, 1);
    const { model, layer } = linearModel(8, 4);
    const before = await evaluateLinear(model, featureSet(val.features, val.labels), 64);
    assert.ok(before.accuracy.top1 < 0.6, `untrained accuracy ${before.accuracy.top1}`);
    const { fit, rows } = await fitLinear(model, featureSet(train.features, train.labels), featureSet(val.features, val.labels), {
      epochs: 5,
      batchSize: 32,
      seed: 0,
    });
    const validated = rows.filter((r) => r.metrics['val/acc1'] !== undefined);
    assert.deepEqual(
      validated.map((r) => [r.step, r.metrics.epoch]),
      [0, 1, 2, 3, 4].map((e) => [(e + 1) * 12, e]),
    );
    assert.equal(fit.progress.step, 5 * 12);
    assert.ok(fit.validation['val/acc1'] > 0.95, `top-1 ${fit.validation['val/acc1']}`);
    assert.equal(fit.validation['val/acc5'], 1, 'top-5 of 4 classes is always right');
    const trained = rows.filter((r) => r.metrics['train/loss'] !== undefined);
    assert.ok(trained.at(-1)!.metrics['train/loss'] < trained[0].metrics['train/loss']);
    assert.ok(trained.at(-1)!.metrics['train/acc1'] > 0.9);
    assert.ok(trained.at(-1)!.metrics['train/lr'] < 0.1 * 0.01, `the lr decays to ~0 (${trained.at(-1)!.metrics['train/lr']})`);
    tf.dispose([train.features, val.features]);
    layer.dispose();
  });

  it('the same seed gives the same classifier; another seed shuffles differently', async () => {
    const train = blobs(128, 4, 8, 2);
    const run = async (seed: number) => {
      const { model, layer } = linearModel(8, 4);
      const set = featureSet(train.features, train.labels);
      await fitLinear(model, set, set, { epochs: 1, batchSize: 16, seed });
      const w = Array.from(layer.weight.dataSync());
      layer.dispose();
      return w;
    };
    const [a, b, c] = [await run(0), await run(0), await run(1)];
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
    train.features.dispose();
  });

  it('inputs read asynchronously (a promise per batch, as from disk) train and evaluate exactly as synchronous ones, and no tensor leaks', async () => {
    const train = blobs(96, 4, 8, 3);
    const val = blobs(40, 4, 8, 4);
    const later = (set: LabelledSet): LabelledSet => ({
      ...set,
      inputs: (indices, epoch) => new Promise((resolve) => setTimeout(() => resolve(set.inputs(indices, epoch)), 1)),
    });
    const run = async (wrap: (set: LabelledSet) => LabelledSet) => {
      const { model, layer } = linearModel(8, 4);
      const { fit, rows } = await fitLinear(model, wrap(featureSet(train.features, train.labels)), wrap(featureSet(val.features, val.labels)), {
        epochs: 2,
        batchSize: 16,
        seed: 0,
      });
      const weights = Array.from(layer.weight.dataSync());
      layer.dispose();
      const logged = rows.map((r) => ({ step: r.step, ...r.metrics, 'train/images_per_sec': 0 }));
      return { validation: fit.validation, logged, weights };
    };
    const sync = await run((set) => set);
    const tensors = tf.memory().numTensors;
    const promised = await run(later);
    assert.equal(tf.memory().numTensors, tensors, 'live tensors after a second run');
    assert.deepEqual(promised, sync);
    assert.ok(sync.validation['val/acc1'] > 0.5, `top-1 ${sync.validation['val/acc1']}`);
    tf.dispose([train.features, val.features]);
  });

  it("a non-finite loss stops the evaluation at its step, with the last update before it applied (the trainer's non-finite stop)", async () => {
    const train = blobs(64, 4, 8, 5);
    const poisoned = tf.tidy(() => tf.concat([tf.slice(train.features, [0, 0], [63, 8]), tf.fill([1, 8], NaN)]));
    const { model, layer } = linearModel(8, 4);
    const set = featureSet(poisoned, train.labels);
    await assert.rejects(fitLinear(model, set, set, { epochs: 1, batchSize: 16, seed: 0 }), (e: unknown) => {
      assert.ok(e instanceof NonFiniteError, String(e));
      assert.match(e.message, /^training stopped at step \d \(epoch 1\): train\/loss is NaN/);
      return true;
    });
    assert.ok(
      Array.from(layer.weight.dataSync()).every((v) => Number.isFinite(v)),
      'the step with the NaN was not applied',
    );
    tf.dispose([train.features, poisoned]);
    layer.dispose();
  });

  it('W ranks split every global batch into W contiguous slices: together the batches of one process, resumable mid-epoch', async () => {
    const n = 50;
    const labels = Int32Array.from({ length: n }, (_, i) => i % 3);
    const set: LabelledSet = { length: n, labels, inputs: (indices) => tf.tensor2d(Float32Array.from(indices), [indices.length, 1]) };
    const collect = async (group: ProcessGroup, start = 0) => {
      const data = linearTrainingData(set, 12, 5, group);
      const out: Array<{ indices: number[]; labels: number[] }> = [];
      for await (const b of data.batches(1, start)) out.push({ indices: Array.from(b.inputs.dataSync()), labels: Array.from(b.labels) });
      return { out, batchSize: data.batchSize, numBatches: data.numBatches() };
    };
    const one = await collect(place(0, 1));
    assert.equal(one.numBatches, 4, '50 samples: 4 full batches of 12');
    assert.equal(one.batchSize, 12);
    const ranks = [await collect(place(0, 3)), await collect(place(1, 3)), await collect(place(2, 3))];
    for (const r of ranks) assert.deepEqual([r.batchSize, r.numBatches], [4, 4]);
    one.out.forEach((batch, b) => {
      assert.deepEqual(
        ranks.flatMap((r) => r.out[b].indices),
        batch.indices,
        `batch ${b}`,
      );
      assert.deepEqual(
        batch.labels,
        batch.indices.map((i) => labels[i]),
      );
    });
    assert.deepEqual((await collect(place(1, 3), 2)).out, ranks[1].out.slice(2), 'resumed at batch 2');
    assert.throws(() => linearTrainingData(set, 10, 0, place(0, 3)), /does not split over 3 ranks/);
  });
});
