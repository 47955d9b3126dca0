import 'reflect-metadata';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { inject, injectable, injectAll } from 'tsyringe';
import { addInto } from '../core/ops.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import type { Callback } from './callbacks.js';
import { loadCheckpoint, saveCheckpoint, withoutPrefix, withPrefix } from './checkpoint.js';
import type { DataSource, Progress, TrainerOptimizer, TrainingModule } from './interfaces.js';
import { LOGGER, type Logger } from './loggers.js';
import { STRATEGY, type Strategy } from './strategy.js';

/** Injection token of the {@link TrainerOptions}. */
export const TRAINER_OPTIONS = Symbol.for('ssl-zoo.TrainerOptions');

export interface TrainerOptions {
  maxEpochs: number;
  /** Stop after this many optimizer steps in total (smoke runs); the schedule still spans the epochs. */
  maxSteps?: number;
  /**
   * Batches whose gradients are averaged locally before one gradient sync and one optimizer
   * step (Lightning's accumulate_grad_batches; default 1).
   */
  accumulateGradBatches?: number;
  /** Log training metrics every this many steps. */
  logEvery: number;
  /** Validate every this many epochs (and always after the last). 0 disables validation. */
  valEvery: number;
  /** Save `checkpoints/epoch-<n>.ckpt` every this many epochs; `last.ckpt` is always written at the end. */
  checkpointEvery: number;
  runDir: string;
  /** A checkpoint path, or `auto` for `<runDir>/checkpoints/last.ckpt` when it exists. */
  resume?: string;
  /** The resolved run configuration: logged once and stored in every checkpoint. */
  config: Record<string, unknown>;
  callbacks?: Callback[];
}

/** What {@link Trainer.fit} returns. */
export interface FitResult {
  progress: Progress;
  /** The training metrics of every step, in order (this rank's values). */
  losses: number[];
  /** The last validation metrics. */
  validation: Record<string, number>;
  wallTimeSec: number;
}

/**
 * A Lightning-style fit loop: epochs of batches, one gradient step each (loss and
 * gradients from `tf.variableGrads`, reduced by the strategy, applied by the optimizer
 * with the scheduler's lr), hooks, validation, logging and checkpoints. It knows nothing
 * about what it trains; the {@link Strategy} and {@link Logger}s are injected.
 */
@injectable()
export class Trainer {
  constructor(
    @inject(STRATEGY) readonly strategy: Strategy,
    @injectAll(LOGGER) private readonly loggers: Logger[],
    @inject(TRAINER_OPTIONS) private readonly options: TrainerOptions,
  ) {}

  private get checkpointDir(): string {
    return join(this.options.runDir, 'checkpoints');
  }

  /** Trains `module` on `data` until `maxEpochs` (or `maxSteps`), resuming if asked. */
  async fit<B>(module: TrainingModule<B>, data: DataSource<B>): Promise<FitResult> {
    const started = Date.now();
    const { maxEpochs, maxSteps } = this.options;
    const batchesPerEpoch = data.numBatches();
    const accumulate = this.options.accumulateGradBatches ?? 1;
    const stepsPerEpoch = Math.ceil(batchesPerEpoch / accumulate);
    // The schedule (lr, EMA tau) always spans the configured epochs; maxSteps only stops
    // early, so an interrupted run and its resumption follow the same schedule.
    const totalSteps = maxEpochs * stepsPerEpoch;
    const stopAt = Math.min(totalSteps, maxSteps ?? Infinity);
    const progress: Progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps };
    const callbacks = this.strategy.isGlobalZero ? (this.options.callbacks ?? []) : [];
    const loggers = this.strategy.isGlobalZero ? this.loggers : [];

    this.strategy.setup(module.model);
    const { optimizer, scheduler } = module.configureOptimizers({ totalSteps, stepsPerEpoch });
    this.restore(module, optimizer, progress);
    const variables = module.model.trainableParameters();
    if (this.strategy.isGlobalZero) {
      mkdirSync(this.checkpointDir, { recursive: true });
      for (const l of loggers) l.logHyperparams(this.options.config);
    }
    const losses: number[] = [];
    let validation: Record<string, number> = {};
    let status: 'success' | 'failed' = 'failed';
    try {
      for (const c of callbacks) c.onFitStart?.(progress);
      while (progress.epoch < maxEpochs && progress.step < stopAt) {
        let last = Date.now();
        let pending: Accumulated | undefined;
        for await (const batch of data.batches(progress.epoch, progress.batchInEpoch)) {
          pending = this.accumulate(module, batch, variables, pending);
          progress.batchInEpoch++;
          if (pending.count < accumulate && progress.batchInEpoch < batchesPerEpoch) continue;
          const lrs = scheduler.apply(progress.step);
          const metrics = this.applyStep(optimizer, pending, variables);
          pending = undefined;
          progress.step++;
          module.onTrainBatchEnd?.(progress);
          const now = Date.now();
          metrics.images_per_sec = (data.batchSize * accumulate * this.strategy.group.worldSize) / Math.max((now - last) / 1000, 1e-9);
          last = now;
          losses.push(metrics.loss);
          const logged = this.prefixed('train', { ...this.strategy.reduceMetrics(metrics), ...module.stepLogs?.(), ...lrsToMetrics(lrs) });
          logged.epoch = progress.epoch;
          if (progress.step % this.options.logEvery === 0 || progress.step === stopAt) {
            for (const l of loggers) l.logMetrics(logged, progress.step);
          }
          for (const c of callbacks) c.onTrainBatchEnd?.(progress, logged);
          if (progress.step >= stopAt) break;
        }
        const epochDone = progress.batchInEpoch >= batchesPerEpoch;
        const finished = progress.step >= stopAt;
        const isLastEpoch = progress.epoch + 1 >= maxEpochs;
        const validateNow =
          module.validate !== undefined &&
          this.options.valEvery > 0 &&
          (finished || isLastEpoch || (epochDone && (progress.epoch + 1) % this.options.valEvery === 0));
        if (validateNow && module.validate) {
          validation = this.prefixed('val', await module.validate(progress));
          validation.epoch = progress.epoch;
          for (const l of loggers) l.logMetrics(validation, progress.step);
        }
        if (epochDone) {
          for (const c of callbacks) c.onEpochEnd?.(progress, validation);
          progress.epoch++;
          progress.batchInEpoch = 0;
          if (this.options.checkpointEvery > 0 && progress.epoch % this.options.checkpointEvery === 0) {
            this.saveCheckpoint(join(this.checkpointDir, `epoch-${progress.epoch}.ckpt`), module, optimizer, progress);
          }
        }
        if (finished) break;
      }
      this.saveCheckpoint(join(this.checkpointDir, 'last.ckpt'), module, optimizer, progress);
      status = 'success';
    } finally {
      for (const c of callbacks) c.onFitEnd?.(progress);
      await data.close();
      const wallTimeSec = (Date.now() - started) / 1000;
      for (const l of loggers) await l.finalize(status, { ...validation, step: progress.step, wall_time_sec: wallTimeSec });
    }
    const wallTimeSec = (Date.now() - started) / 1000;
    optimizer.dispose();
    return { progress, losses, validation, wallTimeSec };
  }

  /** Adds one batch's gradients and metrics to the running sums (this rank only, no sync). */
  private accumulate<B>(module: TrainingModule<B>, batch: B, variables: Variable[], into?: Accumulated): Accumulated {
    const { grads, metrics } = module.computeGradients ? module.computeGradients(batch, variables) : tapeGradients(module, batch, variables);
    const acc: Accumulated = into ?? { grads: {}, metrics: {}, count: 0 };
    addInto(acc.grads, grads);
    for (const [name, value] of Object.entries(metrics)) acc.metrics[name] = (acc.metrics[name] ?? 0) + value;
    acc.count++;
    return acc;
  }

  /** Averages the accumulated gradients, syncs them through the strategy and steps. */
  private applyStep(optimizer: TrainerOptimizer, acc: Accumulated, variables: Variable[]): Record<string, number> {
    const local =
      acc.count === 1
        ? acc.grads
        : Object.fromEntries(Object.entries(acc.grads).map(([name, g]) => [name, tf.tidy(() => tf.div(g, acc.count))]));
    const reduced = this.strategy.reduceGradients(local, variables);
    optimizer.step(reduced);
    tf.dispose([...new Set([...Object.values(reduced), ...Object.values(local), ...Object.values(acc.grads)])]);
    return Object.fromEntries(Object.entries(acc.metrics).map(([name, sum]) => [name, sum / acc.count]));
  }

  private prefixed(prefix: string, values: Record<string, number>): Record<string, number> {
    return Object.fromEntries(Object.entries(values).map(([k, v]) => [k.startsWith(`${prefix}/`) ? k : `${prefix}/${k}`, v]));
  }

  /** Writes model, optimizer, progress and config (rank 0 only), atomically. */
  saveCheckpoint<B>(path: string, module: TrainingModule<B>, optimizer: TrainerOptimizer, progress: Progress): void {
    if (!this.strategy.isGlobalZero) return;
    const optim = optimizer.stateDict();
    saveCheckpoint(path, {
      tensors: { ...withPrefix(module.model.stateDict(), 'model/'), ...withPrefix(optim.tensors, 'optimizer/') },
      meta: {
        format: 'ssl-zoo-checkpoint/1',
        progress: { epoch: progress.epoch, step: progress.step, batchInEpoch: progress.batchInEpoch },
        optimizer: optim.meta,
        // Every random draw of training is keyed by (seed, epoch, sample index, view), so
        // the seed and the progress above are the complete random state of the run.
        rng: { seed: this.options.config.seed, keyed: '(seed, epoch, index, view)' },
        config: this.options.config,
      },
    });
  }

  private restore<B>(module: TrainingModule<B>, optimizer: TrainerOptimizer, progress: Progress): void {
    const { resume } = this.options;
    if (!resume) return;
    const path = resume === 'auto' ? join(this.checkpointDir, 'last.ckpt') : resume;
    if (resume === 'auto' && !existsSync(path)) return;
    const checkpoint = loadCheckpoint(path);
    try {
      module.model.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/'));
      optimizer.loadStateDict({ tensors: withoutPrefix(checkpoint.tensors, 'optimizer/'), meta: checkpoint.meta.optimizer });
      const saved = checkpoint.meta.progress as { epoch: number; step: number; batchInEpoch: number };
      progress.epoch = saved.epoch;
      progress.step = saved.step;
      progress.batchInEpoch = saved.batchInEpoch;
    } finally {
      tf.dispose(Object.values(checkpoint.tensors));
    }
  }
}

/** One tape over the module's training step: its gradients and metrics. */
function tapeGradients<B>(module: TrainingModule<B>, batch: B, variables: Variable[]): { grads: Record<string, Tensor>; metrics: Record<string, number> } {
  let metricTensors: Record<string, Tensor> = {};
  const { value, grads } = tf.variableGrads(() => {
    const out = module.trainingStep(batch);
    metricTensors = out.metrics;
    return out.loss;
  }, variables);
  value.dispose();
  const metrics: Record<string, number> = {};
  for (const [name, t] of Object.entries(metricTensors)) {
    metrics[name] = t.dataSync()[0];
    t.dispose();
  }
  return { grads, metrics };
}

/** Gradients and metrics summed over the batches of one optimizer step. */
interface Accumulated {
  grads: Record<string, Tensor>;
  metrics: Record<string, number>;
  count: number;
}

function lrsToMetrics(lrs: Record<string, number>): Record<string, number> {
  const entries = Object.entries(lrs);
  const out: Record<string, number> = Object.fromEntries(entries.map(([name, lr]) => [`lr/${name}`, lr]));
  if (entries.length > 0) out.lr = entries[0][1];
  return out;
}
