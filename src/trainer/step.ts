/**
 * One optimizer step as the trainer runs it, in two parts that `verify` runs too: sum the
 * gradients of a step's micro-batches on this rank ({@link accumulateBatch}: one tape over
 * the module's training step, or its own `computeGradients`, e.g. the gradient cache), then
 * average them, sync them once through the strategy, reduce the metrics over ranks, let a
 * check veto the step, and apply it ({@link applyStep}).
 */
import { addInto } from '../core/ops.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import type { TrainerOptimizer, TrainingModule } from './interfaces.js';
import type { Strategy } from './strategy.js';

/** Gradients and metrics summed over the batches of one optimizer step. */
export interface Accumulated {
  grads: Record<string, Tensor>;
  metrics: Record<string, number>;
  count: number;
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
 * Averages the accumulated gradients and syncs them through `strategy`, reduces the metrics
 * (with the images/s from `throughput` and the flag "this rank's gradient is not finite")
 * over ranks, lets `check` veto the step (it throws), lets `adjust` change the reduced
 * gradients (the module's `adjustGradients`, e.g. freezing or clipping), lets `inspect` read the
 * gradients about to be applied (keyed by variable name; they are disposed afterwards), then
 * steps the optimizer. Returns this rank's metrics and the metrics reduced over ranks.
 */
export function applyStep(
  strategy: Strategy,
  optimizer: TrainerOptimizer,
  acc: Accumulated,
  variables: Variable[],
  check: (reduced: Record<string, number>, gradient: { flag: number; name?: string }) => void,
  throughput: () => number,
  inspect?: (applied: Record<string, Tensor>) => void,
  adjust?: (reduced: Record<string, Tensor>) => Record<string, Tensor>,
): { local: Record<string, number>; reduced: Record<string, number> } {
  const local = acc.count === 1 ? acc.grads : Object.fromEntries(Object.entries(acc.grads).map(([name, g]) => [name, tf.tidy(() => tf.div(g, acc.count))]));
  let reduced: Record<string, Tensor> = {};
  let applied: Record<string, Tensor> = {};
  try {
    reduced = strategy.reduceGradients(local, variables);
    const metrics: Record<string, number> = Object.fromEntries(Object.entries(acc.metrics).map(([name, sum]) => [name, sum / acc.count]));
    metrics.images_per_sec = throughput();
    const badGradient = firstNonFinite(reduced, variables);
    const all = strategy.reduceMetrics({ ...metrics, [GRADIENT_FLAG]: badGradient === undefined ? 0 : 1 });
    const flag = all[GRADIENT_FLAG];
    delete all[GRADIENT_FLAG];
    check(all, { flag, name: badGradient });
    applied = adjust ? adjust(reduced) : reduced;
    inspect?.(applied);
    optimizer.step(applied);
    return { local: metrics, reduced: all };
  } finally {
    tf.dispose([...new Set([...Object.values(applied), ...Object.values(reduced), ...Object.values(local), ...Object.values(acc.grads)])]);
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
