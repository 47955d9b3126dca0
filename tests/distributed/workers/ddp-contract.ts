import 'reflect-metadata';
/**
 * One rank of a short `Trainer.fit` over a tiny model, with DDP over real Gloo (or, with
 * worldSize 1, the one-process strategy), for the DDP contract tests (ddp-contract.test.ts).
 * The trainer is resolved from a container, as a run resolves it: the strategy by its
 * registered name, DDP injected the process group and its options.
 *
 * Model: x [B, 4] -> Linear(4, 6) -> (BatchNorm(6)) -> ReLU -> Linear(6, 3) = z, and two
 * extra parameters: `gate` [3], used only when the batch holds a sample flagged 1, and
 * `never` [2], used only for samples flagged 2 (there are none). Per-sample loss
 * |z_i - t_i|² + [flag_i = 1]·(z_i · gate)², mean over the batch: the ranks' losses average
 * to the one-process loss on the global batch.
 *
 * Data: the global micro-batch b is the samples [b·N, (b+1)·N) of a seeded set (no
 * shuffling); rank r gets [b·N + r·B, b·N + (r+1)·B) (N = W·B), so the ranks see different
 * data. The first sample of rank 1's slice of every global batch is flagged 1, so `gate`
 * gets no gradient on any other rank.
 *
 * SGD with momentum and weight decay: a parameter left without a gradient is not updated,
 * one with a zero gradient decays.
 *
 * Options: `perturb` changes every parameter and buffer of ranks != 0 before the trainer's
 * setup (different initial weights per rank); `accumulate` is accumulateGradBatches.
 * Writes `<dir>/rank-<r>.json`: the state right after setup, the final state, the DDP
 * statistics and the step losses.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { container } from 'tsyringe';
import { initEngine } from '../../../src/core/engine.js';
import { BatchNorm, Linear } from '../../../src/core/layers.js';
import { Module } from '../../../src/core/module.js';
import { Rng } from '../../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Variable } from '../../../src/core/tf.js';
import { DDP_OPTIONS, DdpStrategy } from '../../../src/distributed/ddp.js';
import { createOptimizer, toNamedParams } from '../../../src/optim/index.js';
import type { DataSource, TrainingModule } from '../../../src/trainer/interfaces.js';
import { PROCESS_GROUP, resolveStrategy, STRATEGY } from '../../../src/trainer/strategy.js';
import { Trainer, TRAINER_OPTIONS, type TrainerOptions } from '../../../src/trainer/trainer.js';
import { seededFloats } from '../io.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';

export interface ContractSpec extends BaseSpec {
  /** Samples per batch on this rank (B); the global micro-batch is W·B. */
  localBatch: number;
  /** Global micro-batches per epoch. */
  batches: number;
  /** Optimizer steps to run. */
  steps: number;
  accumulate: number;
  batchNorm: boolean;
  perturb: boolean;
  /** Samples of the data set (default batches · W · localBatch). */
  samples?: number;
  /** Global batch the flag layout is made for (default W · localBatch). */
  flagPeriod?: number;
  /** Local batch of rank 1 in the flag layout (default localBatch). */
  flagOffset?: number;
}

interface Batch {
  x: Float32Array;
  t: Float32Array;
  flags: Int32Array;
}

class Tiny extends Module {
  readonly gate: Variable;
  readonly never: Variable;

  constructor(rng: Rng, batchNorm: boolean) {
    super();
    this.addModule('fc1', new Linear(4, 6, { rng }));
    if (batchNorm) this.addModule('bn', new BatchNorm(6));
    this.addModule('fc2', new Linear(6, 3, { rng }));
    this.gate = this.addParameter('gate', tf.tensor1d([0.5, -0.25, 0.75]));
    this.never = this.addParameter('never', tf.tensor1d([1, 2]));
  }

  /** A child by name, looked up each time (SyncBatchNorm conversion replaces modules). */
  private child(name: string): Module & { forward(x: Tensor): Tensor } {
    return new Map(this.namedChildren()).get(name) as Module & { forward(x: Tensor): Tensor };
  }

  forward(x: Tensor): Tensor {
    let h = this.child('fc1').forward(x);
    if (new Map(this.namedChildren()).has('bn')) h = this.child('bn').forward(h);
    return this.child('fc2').forward(tf.relu(h));
  }
}

function stateOf(model: Module): Record<string, number[]> {
  return Object.fromEntries(Object.entries(model.stateDict()).map(([name, v]) => [name, Array.from(v.dataSync())]));
}

run(async () => {
  const { spec, rank } = readArgs<ContractSpec>();
  await initEngine('cpu');
  const W = spec.worldSize;
  const B = spec.localBatch;
  const N = W * B;
  const samples = spec.samples ?? spec.batches * N;
  const x = seededFloats(11, samples * 4);
  const t = seededFloats(12, samples * 3);
  const period = spec.flagPeriod ?? N;
  const offset = spec.flagOffset ?? B;
  const flags = Int32Array.from({ length: samples }, (_, i) => (i % period === offset ? 1 : 0));

  const model = new Tiny(new Rng(5), spec.batchNorm);
  if (spec.perturb && rank !== 0) {
    // Another seed's weights, and buffers that are not the initial ones.
    for (const [, v] of [...model.namedParameters(), ...model.namedBuffers()]) {
      v.assign(
        tf.tidy(() => (v.dtype === 'int32' ? tf.add(v, tf.scalar(7 * rank, 'int32')) : tf.add(v, tf.tensor(seededFloats(100 + rank, v.size), v.shape)))),
      );
    }
  }

  const beforeSetup = stateOf(model);
  let afterSetup: Record<string, number[]> = {};
  const scope = container.createChildContainer();
  const group = W > 1 ? await joinGroup(spec, rank) : undefined;
  if (group) scope.registerInstance(PROCESS_GROUP, group);
  scope.registerInstance(DDP_OPTIONS, { syncBatchNorm: true });
  const strategy = resolveStrategy(scope, group ? 'ddp' : 'single');
  const setup = strategy.setup.bind(strategy);
  strategy.setup = (m: Module) => {
    setup(m);
    afterSetup = stateOf(m);
  };
  scope.registerInstance(STRATEGY, strategy);

  const task: TrainingModule<Batch> = {
    model,
    trainingStep(batch) {
      const n = batch.flags.length;
      const z = model.forward(tf.tensor2d(batch.x, [n, 4]));
      let loss = tf.sum(tf.square(tf.sub(z, tf.tensor2d(batch.t, [n, 3])))) as Scalar;
      const flagged = [...batch.flags.keys()].filter((i) => batch.flags[i] === 1);
      if (flagged.length > 0) {
        const zf = tf.gather(z, tf.tensor1d(flagged, 'int32'));
        loss = tf.add(loss, tf.sum(tf.square(tf.matMul(zf, tf.reshape(model.gate, [3, 1]))))) as Scalar;
      }
      if (batch.flags.some((f) => f === 2)) loss = tf.add(loss, tf.sum(model.never)) as Scalar;
      loss = tf.div(loss, n) as Scalar;
      return { loss, metrics: { loss: tf.keep(tf.clone(loss)) } };
    },
    configureOptimizers() {
      const optimizer = createOptimizer('sgd', [{ name: 'all', params: toNamedParams(model.namedParameters()), lr: 0.2, weightDecay: 0.05 }], {
        momentum: 0.9,
      });
      return { optimizer, scheduler: { apply: () => ({ all: 0.2 }) } };
    },
  };

  const data: DataSource<Batch> = {
    batchSize: B,
    numBatches: () => spec.batches,
    async *batches(_epoch, start) {
      for (let b = start; b < spec.batches; b++) {
        const from = b * N + rank * B;
        yield { x: x.slice(from * 4, (from + B) * 4), t: t.slice(from * 3, (from + B) * 3), flags: flags.slice(from, from + B) };
      }
    },
    close: async () => undefined,
  };

  const options: TrainerOptions = {
    maxEpochs: 1,
    maxSteps: spec.steps,
    accumulateGradBatches: spec.accumulate,
    logEvery: 1,
    valEvery: 0,
    checkpointEvery: 0,
    runDir: join(spec.dir, `run-${rank}`),
    config: {},
  };
  scope.registerInstance(TRAINER_OPTIONS, options);
  const fit = await scope.resolve(Trainer).fit(task, data);
  const stats = strategy instanceof DdpStrategy ? strategy.stats : undefined;
  const out = { rank, beforeSetup, afterSetup, final: stateOf(model), stats, losses: fit.losses, steps: fit.progress.step };
  writeFileSync(join(spec.dir, `rank-${rank}.json`), JSON.stringify(out));
  strategy.teardown();
  group?.close();
  return { rank, file: join(spec.dir, `rank-${rank}.json`) };
});
