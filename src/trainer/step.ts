/**
 * The trainer's step sequence, written once and run by training's fit loop, by `verify` and
 * by linear evaluation (through the trainer): {@link StepSequence} runs one optimizer step
 * (the module's hooks, its micro-batches' gradients summed on this rank by
 * {@link accumulateBatch}, the scheduler's lr, then {@link applyStep}: average, one gradient
 * sync through the strategy, a finiteness check that may veto the step, the module's
 * gradient adjustment, the optimizer update).
 *
 * A step never reads the device synchronously (WebGPU in Node cannot, and a synchronous read
 * stalls a GPU's queue): its metrics stay on the device as scalars until the caller reads
 * them, a batch of steps at a time, with {@link readMetrics} (the fit loop: once per logging
 * step). The one read inside a step is the finiteness check's, asynchronous (see
 * {@link applyStep}).
 */
import { addInto } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Variable } from '../core/tf.js';
import type { Progress, TrainerOptimizer, TrainerScheduler, TrainingModule } from './interfaces.js';
import type { Strategy } from './strategy.js';

/** Gradients and metrics summed over the batches of one optimizer step (this rank, on the device). */
export interface Accumulated {
  grads: Record<string, Tensor>;
  /** Each metric summed over the batches: a scalar `[]`. */
  metrics: Record<string, Scalar>;
  count: number;
}

/**
 * Vetoes a step by throwing (or rejecting), before its update is applied. Called only when a
 * value of the step is not finite on some rank: `reduced` are the step's metrics averaged over
 * ranks; `gradient.flag` is 1 when some rank's reduced gradient is not finite, else 0
 * (`gradient.name`: the first such variable on this rank).
 */
export type StepCheck = (reduced: Record<string, number>, gradient: { flag: number; name?: string }) => void | Promise<void>;

/** Options of {@link applyStep}; only the strategy, the optimizer and the variables are required. */
export interface ApplyStepOptions {
  strategy: Strategy;
  optimizer: TrainerOptimizer;
  /** The variables the gradients are for (the module's trainable parameters), in order. */
  variables: Variable[];
  /** Vetoes a step with a non-finite value (default: none; the update is then applied). */
  check?: StepCheck;
  /** Images per second, added to the metrics as `images_per_sec` (default: not measured). */
  throughput?: () => number;
  /**
   * Changes the reduced gradients before they are applied (a module's `adjustGradients`, e.g.
   * freezing or clipping); the tensors it creates are disposed after the update.
   */
  adjust?: (reduced: Record<string, Tensor>) => Record<string, Tensor>;
  /** Reads the gradients about to be applied (keyed by variable name; disposed afterwards). */
  inspect?: (applied: Record<string, Tensor>) => void;
  /**
   * This rank's stop request: a signal's number, 0 for none (default: none). Agreed over the
   * ranks in the step's finiteness all-reduce (see {@link AppliedStep.stop}).
   */
  stopRequest?: () => number;
}

/** What {@link applyStep} returns: the step's metrics and the stop the ranks agreed on. */
export interface AppliedStep {
  metrics: PendingMetrics;
  /** The largest stop request (a signal's number) of any rank at this step, 0 for none: the same on every rank. */
  stop: number;
}

/**
 * A step's metrics as the step leaves them, until {@link readMetrics} reads them: this rank's
 * values, means over the step's micro-batches.
 */
export interface PendingMetrics {
  /** The metrics computed on the device: scalars `[]`, owned by whoever holds them (dispose after reading). */
  tensors: Record<string, Scalar>;
  /** The metrics known on the host (`images_per_sec`). */
  values: Record<string, number>;
}

/** This rank's metrics of a step and the metrics averaged over ranks. */
export interface StepMetrics {
  local: Record<string, number>;
  reduced: Record<string, number>;
}

/** Adds one batch's gradients and metrics to the running sums `into` (this rank only, no sync, no read). */
export function accumulateBatch<B>(module: TrainingModule<B>, batch: B, variables: Variable[], into?: Accumulated): Accumulated {
  const { grads, metrics } = module.computeGradients ? module.computeGradients(batch, variables) : tapeGradients(module, batch, variables);
  const acc: Accumulated = into ?? { grads: {}, metrics: {}, count: 0 };
  addInto(acc.grads, grads);
  addInto(acc.metrics, metrics);
  acc.count++;
  return acc;
}

/**
 * Averages the accumulated gradients and syncs them once through `strategy`, checks that the
 * step's metrics and reduced gradients are finite on every rank, lets `check` veto the step
 * when they are not (it throws), lets `adjust` change the reduced gradients and `inspect` read
 * them, then steps the optimizer. Returns the step's metrics, still on the device. Disposes
 * every gradient tensor of `acc` and of the reduce (and the metrics, when it throws).
 *
 * The check is exact: no update with a non-finite value is ever applied, so the parameters
 * and the optimizer state stay those of the last good step. It costs one asynchronous read
 * per step, awaited before the update: one finiteness flag per metric and per gradient,
 * reduced on the device (see {@link nonFiniteFlags}; a few bytes), and one small all-reduce
 * of two flags over ranks ({@link Strategy.allReduceMax}), so that every rank reaches the same
 * verdict. The same all-reduce carries the ranks' stop requests (`stopRequest`, a signal), so
 * that every rank agrees at which step to stop without another collective. Only when a flag is set are the metrics read (and averaged over ranks) for
 * `check`'s message. (Applying the update on the device under a "finite" mask instead, and
 * reading the flag later, would spare a GPU that wait, but would need a masked copy of every
 * parameter and every optimizer state tensor at each step: on the CPU backend that costs more
 * than the read.)
 */
export async function applyStep(acc: Accumulated, options: ApplyStepOptions): Promise<AppliedStep> {
  const { strategy, optimizer, variables, check, throughput, adjust, inspect, stopRequest } = options;
  const local = acc.count === 1 ? acc.grads : Object.fromEntries(Object.entries(acc.grads).map(([name, g]) => [name, tf.tidy(() => tf.div(g, acc.count))]));
  const metrics: Record<string, Scalar> =
    acc.count === 1 ? acc.metrics : Object.fromEntries(Object.entries(acc.metrics).map(([name, sum]) => [name, tf.tidy(() => tf.div(sum, acc.count))]));
  const values: Record<string, number> = throughput ? { images_per_sec: throughput() } : {};
  let reduced: Record<string, Tensor> = {};
  let applied: Record<string, Tensor> = {};
  let done = false;
  try {
    reduced = await strategy.reduceGradients(local, variables);
    const gradientNames = floatNames(reduced, variables);
    const metricTensors = Object.values(metrics);
    const flags = await nonFiniteFlags([...metricTensors, ...gradientNames.map((n) => reduced[n])]);
    const badGradient = gradientNames[flags.indexOf(true, metricTensors.length) - metricTensors.length];
    const [metricFlag, gradientFlag, stop] = strategy.allReduceMax([
      flags.slice(0, metricTensors.length).includes(true) ? 1 : 0,
      badGradient === undefined ? 0 : 1,
      stopRequest?.() ?? 0,
    ]);
    if (check && (metricFlag > 0 || gradientFlag > 0)) {
      const [read] = await readMetrics([{ tensors: metrics, values }], strategy);
      await check(read.reduced, { flag: gradientFlag, name: badGradient });
    }
    applied = adjust ? adjust(reduced) : reduced;
    inspect?.(applied);
    optimizer.step(applied);
    done = true;
    return { metrics: { tensors: metrics, values }, stop };
  } finally {
    const metricSums = acc.count === 1 ? [] : Object.values(acc.metrics);
    tf.dispose([...new Set([...Object.values(applied), ...Object.values(reduced), ...Object.values(local), ...Object.values(acc.grads), ...metricSums])]);
    if (!done) tf.dispose(Object.values(metrics));
  }
}

/**
 * Reads the metrics of `steps` (one asynchronous read of all of them) and averages them over
 * ranks (one {@link Strategy.reduceMetrics} call for all the steps: every rank must call it at
 * the same point, with the same steps; none for no step). The local metrics of each step are
 * its device metrics in key order, then its host ones; does not dispose the tensors.
 */
export async function readMetrics(steps: readonly PendingMetrics[], strategy: Strategy): Promise<StepMetrics[]> {
  if (steps.length === 0) return [];
  const tensors = steps.flatMap((s) => Object.values(s.tensors));
  const read = tensors.length === 0 ? new Float32Array(0) : await readScalars(tensors);
  let at = 0;
  const locals = steps.map((s) => {
    const local: Record<string, number> = {};
    for (const name of Object.keys(s.tensors)) local[name] = read[at++];
    return Object.assign(local, s.values);
  });
  // One all-reduce: each step's metrics under `<index>/<name>`.
  const all = strategy.reduceMetrics(Object.fromEntries(locals.flatMap((local, i) => Object.entries(local).map(([name, v]) => [`${i}/${name}`, v]))));
  return locals.map((local, i) => ({ local, reduced: Object.fromEntries(Object.keys(local).map((name) => [name, all[`${i}/${name}`]])) }));
}

/** The values of scalar tensors `[]`, in order: one asynchronous read. */
async function readScalars(scalars: Tensor[]): Promise<Float32Array> {
  const stacked = tf.tidy(() => tf.stack(scalars.map((t) => tf.cast(t, 'float32'))));
  try {
    return (await stacked.data()) as Float32Array;
  } finally {
    stacked.dispose();
  }
}

/** What a {@link StepSequence} runs on. */
export interface StepContext<B> {
  module: TrainingModule<B>;
  strategy: Strategy;
  optimizer: TrainerOptimizer;
  scheduler: TrainerScheduler;
  /** `module.model.trainableParameters()`. */
  variables: Variable[];
}

/** Per-step options of {@link StepSequence.finishStep}. */
export interface FinishStepOptions {
  /** Vetoes a step with a non-finite value (see {@link StepCheck}); `lrs` are the step's learning rates by group name. */
  check?: (reduced: Record<string, number>, gradient: { flag: number; name?: string }, lrs: Record<string, number>) => void | Promise<void>;
  throughput?: ApplyStepOptions['throughput'];
  inspect?: ApplyStepOptions['inspect'];
  stopRequest?: ApplyStepOptions['stopRequest'];
}

/**
 * A finished optimizer step: its metrics (still on the device), learning rates by group name,
 * and the stop request the ranks agreed on at it ({@link AppliedStep.stop}).
 */
export interface StepOutcome extends AppliedStep {
  lrs: Record<string, number>;
}

/**
 * The step sequence of the trainer, one optimizer step at a time, over a shared
 * {@link Progress} it advances:
 *
 * 1. before the step's first micro-batch: `onTrainEpochStart` (when it is the epoch's first
 *    batch: not after a resume in the middle of an epoch), then `onTrainBatchStart`;
 * 2. {@link addBatch} per micro-batch (gradient accumulation): gradients and metrics summed
 *    on this rank, no sync; `progress.batchInEpoch` + 1;
 * 3. {@link finishStep}: the scheduler sets the lr of step `progress.step`, {@link applyStep}
 *    (one sync, the finiteness check, the module's `adjustGradients`, the update),
 *    `progress.step` + 1, `onTrainBatchEnd`.
 *
 * The caller decides when a step ends (after `accumulateGradBatches` micro-batches, or at the
 * end of an epoch), what happens between steps (logging, validation, checkpoints) and when
 * the steps' metrics are read ({@link readMetrics}).
 */
export class StepSequence<B> {
  private pending: Accumulated | undefined;

  constructor(readonly context: StepContext<B>) {}

  /** Micro-batches summed for the current step so far. */
  get pendingBatches(): number {
    return this.pending?.count ?? 0;
  }

  /** Adds one micro-batch of the current step (the step's hooks run before its first). */
  addBatch(batch: B, progress: Progress): void {
    const { module, variables } = this.context;
    if (this.pending === undefined) {
      if (progress.batchInEpoch === 0) module.onTrainEpochStart?.(progress);
      module.onTrainBatchStart?.(progress);
    }
    this.pending = accumulateBatch(module, batch, variables, this.pending);
    progress.batchInEpoch++;
  }

  /** Ends the current step (see the class comment); rejects with what `check` throws, with no update applied. */
  async finishStep(progress: Progress, options: FinishStepOptions = {}): Promise<StepOutcome> {
    const { module, strategy, optimizer, scheduler, variables } = this.context;
    const acc = this.pending;
    if (acc === undefined) throw new Error('finishStep: no batch was added to this step');
    this.pending = undefined;
    const lrs = scheduler.apply(progress.step);
    const { check } = options;
    const applied = await applyStep(acc, {
      strategy,
      optimizer,
      variables,
      check: check && ((reduced, gradient) => check(reduced, gradient, lrs)),
      throughput: options.throughput,
      adjust: module.adjustGradients && ((grads) => module.adjustGradients!(grads, progress)),
      inspect: options.inspect,
      stopRequest: options.stopRequest,
    });
    progress.step++;
    module.onTrainBatchEnd?.(progress);
    return { ...applied, lrs };
  }
}

/**
 * The name of the first float tensor (in `order`, else in key order) holding a NaN or an
 * infinity, or undefined; read asynchronously (see {@link nonFiniteFlags}).
 */
export async function firstNonFinite(tensors: Record<string, Tensor>, order?: readonly Variable[]): Promise<string | undefined> {
  const names = floatNames(tensors, order);
  const flags = await nonFiniteFlags(names.map((n) => tensors[n]));
  const i = flags.indexOf(true);
  return i < 0 ? undefined : names[i];
}

/** The names of the float32 tensors of `tensors`, in `order` (when given, else in key order). */
function floatNames(tensors: Record<string, Tensor>, order?: readonly Variable[]): string[] {
  return (order ? order.map((v) => v.name).filter((n) => tensors[n] !== undefined) : Object.keys(tensors)).filter((n) => tensors[n].dtype === 'float32');
}

/**
 * Whether each float tensor of `tensors` (any shapes) holds a NaN or an infinity, read
 * asynchronously. On the JS CPU backend (the tensors' data is in this process's memory) a
 * float64 sum over each tensor's values: it cannot overflow, so it is not finite exactly when
 * a value is NaN or infinite (about 3 ns per value). On other backends (a GPU, TensorFlow) one
 * reduction per tensor on the device (the sum of x·0, NaN exactly then) and one read of the
 * `[N]` results.
 */
async function nonFiniteFlags(tensors: Tensor[]): Promise<boolean[]> {
  if (tensors.length === 0) return [];
  if (tf.getBackend() === 'cpu') {
    const arrays = await Promise.all(tensors.map((t) => t.data() as Promise<Float32Array>));
    return arrays.map((values) => {
      let sum = 0;
      for (let i = 0; i < values.length; i++) sum += values[i];
      return !Number.isFinite(sum);
    });
  }
  const probe = tf.tidy(() => tf.stack(tensors.map((t) => tf.sum(tf.mul(t, 0)))));
  try {
    return Array.from(await probe.data(), (v) => !Number.isFinite(v));
  } finally {
    probe.dispose();
  }
}

/** One tape over the module's training step: its gradients and metrics (scalars `[]`, left on the device). */
function tapeGradients<B>(module: TrainingModule<B>, batch: B, variables: Variable[]): { grads: Record<string, Tensor>; metrics: Record<string, Scalar> } {
  let metrics: Record<string, Scalar> = {};
  const { value, grads } = tf.variableGrads(() => {
    const out = module.trainingStep(batch);
    metrics = out.metrics;
    return out.loss;
  }, variables);
  value.dispose();
  return { grads, metrics };
}
