/**
 * The trainer's step sequence, written once and run by training's fit loop, by `verify` and
 * by linear evaluation (through the trainer): {@link StepSequence} runs one optimizer step
 * (the module's hooks, its micro-batches' gradients summed on this rank by
 * {@link accumulateBatch}, the scheduler's lr, then {@link applyStep}: average, one gradient
 * sync through the strategy, metrics reduced over ranks, a check that may veto the step, the
 * module's gradient adjustment, the optimizer update).
 */
import { addInto } from '../core/ops.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import type { Progress, TrainerOptimizer, TrainerScheduler, TrainingModule } from './interfaces.js';
import type { Strategy } from './strategy.js';

/** Gradients and metrics summed over the batches of one optimizer step. */
export interface Accumulated {
  grads: Record<string, Tensor>;
  metrics: Record<string, number>;
  count: number;
}

/**
 * Vetoes a step by throwing, before its update is applied: `reduced` are the step's metrics
 * averaged over ranks; `gradient.flag` is > 0 when some rank's reduced gradient is not finite
 * (`gradient.name`: the first such variable on this rank).
 */
export type StepCheck = (reduced: Record<string, number>, gradient: { flag: number; name?: string }) => void;

/** Options of {@link applyStep}; only the strategy, the optimizer and the variables are required. */
export interface ApplyStepOptions {
  strategy: Strategy;
  optimizer: TrainerOptimizer;
  /** The variables the gradients are for (the module's trainable parameters), in order. */
  variables: Variable[];
  /** Vetoes the step (default: none). */
  check?: StepCheck;
  /** Images per second, added to the metrics as `images_per_sec` before they are reduced (default: not measured). */
  throughput?: () => number;
  /**
   * Changes the reduced gradients before they are applied (a module's `adjustGradients`, e.g.
   * freezing or clipping); the tensors it creates are disposed after the update.
   */
  adjust?: (reduced: Record<string, Tensor>) => Record<string, Tensor>;
  /** Reads the gradients about to be applied (keyed by variable name; disposed afterwards). */
  inspect?: (applied: Record<string, Tensor>) => void;
}

/** This rank's metrics of a step and the metrics averaged over ranks. */
export interface StepMetrics {
  local: Record<string, number>;
  reduced: Record<string, number>;
}

/** The metrics entry carrying "this rank's reduced gradient is not finite" through the metrics all-reduce. */
const GRADIENT_FLAG = '__nonfinite_gradient';

/** Adds one batch's gradients and metrics to the running sums `into` (this rank only, no sync). */
export function accumulateBatch<B>(module: TrainingModule<B>, batch: B, variables: Variable[], into?: Accumulated): Accumulated {
  const { grads, metrics } = module.computeGradients ? module.computeGradients(batch, variables) : tapeGradients(module, batch, variables);
  const acc: Accumulated = into ?? { grads: {}, metrics: {}, count: 0 };
  addInto(acc.grads, grads);
  for (const [name, value] of Object.entries(metrics)) acc.metrics[name] = (acc.metrics[name] ?? 0) + value;
  acc.count++;
  return acc;
}

/**
 * Averages the accumulated gradients and syncs them once through `strategy`, reduces the
 * metrics (with `images_per_sec` when `throughput` is given, and the flag "this rank's
 * gradient is not finite") over ranks, lets `check` veto the step (it throws), lets `adjust`
 * change the reduced gradients and `inspect` read them, then steps the optimizer. Disposes
 * every gradient tensor of `acc` and of the reduce.
 */
export function applyStep(acc: Accumulated, options: ApplyStepOptions): StepMetrics {
  const { strategy, optimizer, variables, check, throughput, adjust, inspect } = options;
  const local = acc.count === 1 ? acc.grads : Object.fromEntries(Object.entries(acc.grads).map(([name, g]) => [name, tf.tidy(() => tf.div(g, acc.count))]));
  let reduced: Record<string, Tensor> = {};
  let applied: Record<string, Tensor> = {};
  try {
    reduced = strategy.reduceGradients(local, variables);
    const metrics: Record<string, number> = Object.fromEntries(Object.entries(acc.metrics).map(([name, sum]) => [name, sum / acc.count]));
    if (throughput) metrics.images_per_sec = throughput();
    const badGradient = firstNonFinite(reduced, variables);
    const all = strategy.reduceMetrics({ ...metrics, [GRADIENT_FLAG]: badGradient === undefined ? 0 : 1 });
    const flag = all[GRADIENT_FLAG];
    delete all[GRADIENT_FLAG];
    check?.(all, { flag, name: badGradient });
    applied = adjust ? adjust(reduced) : reduced;
    inspect?.(applied);
    optimizer.step(applied);
    return { local: metrics, reduced: all };
  } finally {
    tf.dispose([...new Set([...Object.values(applied), ...Object.values(reduced), ...Object.values(local), ...Object.values(acc.grads)])]);
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
  /** Vetoes the step; `lrs` are the step's learning rates by group name. */
  check?: (reduced: Record<string, number>, gradient: { flag: number; name?: string }, lrs: Record<string, number>) => void;
  throughput?: ApplyStepOptions['throughput'];
  inspect?: ApplyStepOptions['inspect'];
}

/** A finished optimizer step: its metrics and learning rates by group name. */
export interface StepOutcome extends StepMetrics {
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
 *    (one sync, metrics over ranks, the check, the module's `adjustGradients`, the update),
 *    `progress.step` + 1, `onTrainBatchEnd`.
 *
 * The caller decides when a step ends (after `accumulateGradBatches` micro-batches, or at the
 * end of an epoch) and what happens between steps (logging, validation, checkpoints).
 */
export class StepSequence<B> {
  private pending: Accumulated | undefined;

  constructor(private readonly context: StepContext<B>) {}

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

  /** Ends the current step (see the class comment); throws what `check` throws, with no update applied. */
  finishStep(progress: Progress, options: FinishStepOptions = {}): StepOutcome {
    const { module, strategy, optimizer, scheduler, variables } = this.context;
    const acc = this.pending;
    if (acc === undefined) throw new Error('finishStep: no batch was added to this step');
    this.pending = undefined;
    const lrs = scheduler.apply(progress.step);
    const { check } = options;
    const metrics = applyStep(acc, {
      strategy,
      optimizer,
      variables,
      check: check && ((reduced, gradient) => check(reduced, gradient, lrs)),
      throughput: options.throughput,
      adjust: module.adjustGradients && ((grads) => module.adjustGradients!(grads, progress)),
      inspect: options.inspect,
    });
    progress.step++;
    module.onTrainBatchEnd?.(progress);
    return { ...metrics, lrs };
  }
}

/**
 * The name of the first float tensor (in `order`, else in key order) holding a NaN or an
 * infinity, or undefined. On the JS CPU backend (the tensors' data is in this process's
 * memory) a float64 sum over each tensor's values: it cannot overflow, so it is not finite
 * exactly when a value is NaN or infinite (about 3 ns per value). On TensorFlow's backend
 * (possibly a GPU) one reduction per tensor there (the sum of x·0, NaN exactly then) and
 * one read of the results.
 */
export function firstNonFinite(tensors: Record<string, Tensor>, order?: readonly Variable[]): string | undefined {
  const names = (order ? order.map((v) => v.name).filter((n) => tensors[n] !== undefined) : Object.keys(tensors)).filter((n) => tensors[n].dtype === 'float32');
  if (names.length === 0) return undefined;
  if (tf.getBackend() !== 'tensorflow') {
    return names.find((n) => {
      const values = tensors[n].dataSync() as Float32Array;
      let sum = 0;
      for (let i = 0; i < values.length; i++) sum += values[i];
      return !Number.isFinite(sum);
    });
  }
  const probe = tf.tidy(() => tf.stack(names.map((n) => tf.sum(tf.mul(tensors[n], 0)))));
  const values = probe.dataSync();
  probe.dispose();
  const i = values.findIndex((v) => !Number.isFinite(v));
  return i < 0 ? undefined : names[i];
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
