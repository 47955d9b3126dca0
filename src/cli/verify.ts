import { initEngine } from '../core/engine.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import { MultiViewLoader, type MultiViewBatch } from '../data/loader.js';
import { RandomSampler } from '../data/sampler.js';
import { DdpStrategy } from '../distributed/ddp.js';
import { createProcessGroup } from '../distributed/gloo.js';
import type { WorkerEnv } from '../distributed/launcher.js';
import { formatLossCaseReport, runLossCaseOnRank } from '../distributed/loss-check.js';
import { SingleProcessGroup, type ProcessGroup } from '../distributed/process-group.js';
import type { BaseMethod } from '../methods/base.js';
import { SslTask } from '../methods/task.js';
import type { TrainerOptimizer } from '../trainer/interfaces.js';
import type { TrainConfig } from './config.js';
import { localBatchSize, prepareExperiment } from './train.js';

/**
 * Largest relative differences of one step, W ranks against one process on the global
 * batch: loss (mean of the ranks' losses), gradients (relative to the largest gradient
 * entry) and parameters and buffers (per tensor, relative to its largest entry).
 */
export interface VerifyStep {
  step: number;
  loss: number;
  gradients: number;
  parameters: number;
}

export interface VerifyResult {
  worldSize: number;
  steps: VerifyStep[];
  /** Largest difference of any kind over all steps. */
  worst: number;
  tolerance: number;
  passed: boolean;
}

async function processGroup(worker: WorkerEnv | undefined, timeoutMs: number): Promise<ProcessGroup> {
  if (!worker) return new SingleProcessGroup();
  return createProcessGroup({ rank: worker.rank, worldSize: worker.worldSize, rendezvous: worker.rendezvous, timeoutMs });
}

/** max |a - b| / max |b| over a tensor (the absolute difference when b is all zeros). */
function relativeDifference(a: Float32Array | Int32Array | Uint8Array, b: Float32Array | Int32Array | Uint8Array): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return scale === 0 ? diff : diff / scale;
}

/** One optimizer step of `task` on `batch`; returns its method loss and the gradients it applied. */
function step(task: SslTask, optimizer: TrainerOptimizer, batch: MultiViewBatch, reduce: (g: Record<string, Tensor>) => Record<string, Tensor>) {
  const variables = task.method.trainableParameters();
  let loss = 0;
  const { value, grads } = tf.variableGrads(() => {
    const out = task.trainingStep(batch);
    loss = out.metrics.loss.dataSync()[0];
    tf.dispose(Object.values(out.metrics));
    return out.loss;
  }, variables);
  value.dispose();
  const applied = reduce(grads);
  optimizer.step(applied);
  const byName: Record<string, Float32Array> = {};
  for (const [name, v] of task.method.namedParameters()) {
    const g = applied[(v as Variable).name];
    if (g) byName[name] = Float32Array.from(g.dataSync() as Float32Array);
  }
  tf.dispose([...new Set([...Object.values(grads), ...Object.values(applied)])]);
  return { loss, grads: byName };
}

function firstBatch(loader: MultiViewLoader, epoch: number, index: number): Promise<MultiViewBatch> {
  return (async () => {
    for await (const b of loader.batches(epoch, index)) return b;
    throw new Error(`no batch ${index} in epoch ${epoch}`);
  })();
}

/**
 * `ssl-train verify`: trains `steps` optimizer steps with W ranks (DDP, this process is one
 * of them) and, on rank 0, with one process on the same global batches, and compares the
 * loss (mean of the ranks' losses), the gradients the optimizer applies, and the parameters
 * after each step. The learning rate is the full one from the first step (no warmup), so
 * parameter differences show. Rank 0 returns the result; other ranks return undefined.
 */
export async function runVerify(config: TrainConfig, steps: number, tolerance: number, worker?: WorkerEnv): Promise<VerifyResult | undefined> {
  await initEngine(config.backend);
  const experiment = prepareExperiment(config);
  const group = await processGroup(worker, config.timeout * 1000);
  const strategy = new DdpStrategy(group, { bucketCapMb: config.bucketCapMb, syncBatchNorm: config.syncBatchnorm });
  const worldSize = group.worldSize;
  const localBatch = localBatchSize(config, worldSize, experiment.train.length);
  const optim = { ...experiment.optim, warmupEpochs: 0, globalBatch: config.batchSize };
  const schedule = { totalSteps: steps, stepsPerEpoch: steps };
  const loaderFor = (batchSize: number, sampler: MultiViewLoader['sampler']) =>
    new MultiViewLoader({ dataset: experiment.train, views: experiment.views, batchSize, sampler, seed: config.seed, dropLast: true, workers: 0 });

  const distributed = experiment.createMethod();
  distributed.group = group;
  strategy.setup(distributed);
  const ddpTask = new SslTask(distributed, optim);
  const ddpOptimizer = ddpTask.configureOptimizers(schedule).optimizer;
  const ddpLoader = loaderFor(localBatch, strategy.sampler({ length: experiment.train.length, seed: config.seed, localBatch, dropLast: true }));

  let reference: { method: BaseMethod; task: SslTask; optimizer: TrainerOptimizer; loader: MultiViewLoader } | undefined;
  if (group.rank === 0) {
    const method = experiment.createMethod();
    const task = new SslTask(method, optim);
    reference = { method, task, optimizer: task.configureOptimizers(schedule).optimizer, loader: loaderFor(config.batchSize, new RandomSampler(experiment.train.length, config.seed)) };
  }
  const perEpoch = ddpLoader.numBatches();
  const results: VerifyStep[] = [];
  try {
    for (let s = 0; s < steps; s++) {
      const epoch = Math.floor(s / perEpoch);
      const ddpOut = step(ddpTask, ddpOptimizer, await firstBatch(ddpLoader, epoch, s % perEpoch), (g) => strategy.reduceGradients(g, distributed.trainableParameters()));
      distributed.onTrainBatchEnd({ step: s + 1, totalSteps: steps });
      const meanLoss = strategy.reduceMetrics({ loss: ddpOut.loss }).loss;
      if (!reference) continue;
      const refOut = step(reference.task, reference.optimizer, await firstBatch(reference.loader, epoch, s % perEpoch), (g) => g);
      reference.method.onTrainBatchEnd({ step: s + 1, totalSteps: steps });
      // Gradients relative to the largest reference entry of any parameter: some true
      // gradients are exactly zero (e.g. a bias feeding batch norm), leaving float noise.
      let gradientDiff = 0;
      let gradientScale = 0;
      for (const [name, g] of Object.entries(refOut.grads)) {
        const d = ddpOut.grads[name];
        for (let i = 0; i < g.length; i++) {
          gradientDiff = Math.max(gradientDiff, d ? Math.abs(d[i] - g[i]) : Infinity);
          gradientScale = Math.max(gradientScale, Math.abs(g[i]));
        }
      }
      const gradients = gradientScale === 0 ? gradientDiff : gradientDiff / gradientScale;
      const refState = reference.method.stateDict();
      let parameters = 0;
      for (const [name, v] of Object.entries(distributed.stateDict())) {
        parameters = Math.max(parameters, relativeDifference(v.dataSync(), refState[name].dataSync()));
      }
      results.push({ step: s + 1, loss: Math.abs(meanLoss - refOut.loss) / Math.max(Math.abs(refOut.loss), 1e-12), gradients, parameters });
    }
  } finally {
    await ddpLoader.close();
    await reference?.loader.close();
    ddpOptimizer.dispose();
    reference?.optimizer.dispose();
    reference?.method.dispose();
    distributed.dispose();
    group.close();
  }
  if (!reference) return undefined;
  const worst = Math.max(...results.map((r) => Math.max(r.loss, r.gradients, r.parameters)));
  return { worldSize, steps: results, worst, tolerance, passed: worst <= tolerance };
}

/** A readable table of a {@link VerifyResult}. */
export function formatVerifyResult(result: VerifyResult, method: string): string {
  const e = (x: number) => x.toExponential(2);
  const lines = [
    `verify ${method}: ${result.worldSize} rank(s) vs one process on the same global batch (largest relative difference)`,
    'step  loss      gradients  parameters',
    ...result.steps.map((s) => `${String(s.step).padEnd(5)} ${e(s.loss).padEnd(9)} ${e(s.gradients).padEnd(10)} ${e(s.parameters)}`),
    `${result.passed ? 'PASSED' : 'FAILED'}: worst ${e(result.worst)} ${result.passed ? '<=' : '>'} tolerance ${e(result.tolerance)}`,
  ];
  return lines.join('\n');
}

/** `ssl-train verify --case FILE`: the loss functions against reference values, on this rank. */
export async function runVerifyCase(config: TrainConfig, casePath: string, tolerance: number, worker?: WorkerEnv): Promise<{ text: string; passed: boolean } | undefined> {
  await initEngine(config.backend);
  const group = await processGroup(worker, config.timeout * 1000);
  try {
    const report = runLossCaseOnRank(casePath, group, tolerance);
    return group.rank === 0 ? { text: formatLossCaseReport(report), passed: report.passed } : undefined;
  } finally {
    group.close();
  }
}
