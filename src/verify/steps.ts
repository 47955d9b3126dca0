/**
 * The runs `ssl-train verify` compares, driven as the trainer drives them: one optimizer step
 * at a time through the trainer's step sequence (src/trainer/step.ts), every result read
 * back asynchronously (`await data()`: the WebGPU engine cannot read synchronously), so the
 * checks run on every engine.
 */
import { tf, type Tensor, type Variable } from '../core/tf.js';
import type { MultiViewBatch, MultiViewLoader } from '../data/loader.js';
import { Rng } from '../core/random.js';
import type { BaseMethod } from '../methods/base.js';
import type { SslTask } from '../methods/task.js';
import type { Progress, TrainerOptimizer } from '../trainer/interfaces.js';
import { readMetrics, StepSequence } from '../trainer/step.js';
import type { Strategy } from '../trainer/strategy.js';
import { permuteRows, perturbByOneUlp } from './roundoff.js';

/** One step's result on this rank. */
export interface StepResult {
  /** The loss: mean over the step's micro-batches and over ranks. */
  loss: number;
  /** The gradients the optimizer applied, by parameter name (each flattened from the parameter's shape). */
  grads: Record<string, Float32Array>;
}

/** A run of `task` as the trainer drives it: its optimizer, schedule and step sequence. */
export interface TaskRun {
  task: SslTask;
  optimizer: TrainerOptimizer;
  steps: StepSequence<MultiViewBatch>;
}

/** The optimizer, scheduler and {@link StepSequence} of `task` (set up already) under `strategy`, for `schedule`. */
export function taskRun(task: SslTask, strategy: Strategy, schedule: { totalSteps: number; stepsPerEpoch: number }): TaskRun {
  const { optimizer, scheduler } = task.configureOptimizers(schedule);
  return { task, optimizer, steps: new StepSequence({ module: task, strategy, optimizer, scheduler, variables: task.method.trainableParameters() }) };
}

/**
 * One optimizer step of `run` through the trainer's step sequence (src/trainer/step.ts): the
 * hooks, the gradients of `batches` (the step's micro-batches; the gradient cache when the task
 * has one) summed on this rank, the scheduler's lr, one sync, the task's adjustment, the
 * update. `progress` is the step's start (its `step` counts the steps before it). Returns the
 * loss (mean over micro-batches and ranks) and the gradients the optimizer applied, by
 * parameter name, read back after the update.
 */
export async function step(run: TaskRun, batches: MultiViewBatch[], progress: Progress): Promise<StepResult> {
  const names = new Map(run.task.method.namedParameters().map(([name, v]) => [v.name, name]));
  const applied: Record<string, Tensor> = {};
  const inspect = (gradients: Record<string, Tensor>) => {
    for (const [id, g] of Object.entries(gradients)) {
      const name = names.get(id);
      if (name) applied[name] = tf.keep(tf.clone(g));
    }
  };
  const at = { ...progress };
  try {
    for (const batch of batches) run.steps.addBatch(batch, at);
    const { metrics } = await run.steps.finishStep(at, { inspect });
    const [{ reduced }] = await readMetrics([metrics], run.steps.context.strategy);
    tf.dispose(Object.values(metrics.tensors));
    const grads: Record<string, Float32Array> = {};
    for (const [name, g] of Object.entries(applied)) grads[name] = Float32Array.from(await g.data<'float32'>());
    return { loss: reduced.loss!, grads };
  } finally {
    tf.dispose(Object.values(applied));
  }
}

/** Tensors' values by name, each flattened from its tensor's shape. */
export type StateArrays = Record<string, Float32Array | Int32Array>;

/** `method`'s state (`stateDict()`: parameters, buffers, queues), copied to this process's memory. */
export async function stateArrays(method: BaseMethod): Promise<StateArrays> {
  return Object.fromEntries(Object.entries(await hostTensors(method.stateDict())).map(([name, t]) => [name, t.values]));
}

/** A tensor read back: its values (flattened) and shape. */
export interface HostTensor {
  values: Float32Array | Int32Array;
  shape: number[];
}

/** A run's model and optimizer state (a checkpoint's worth) in this process's memory: tensors by name, the optimizer's metadata. */
export interface RunState {
  model: Record<string, HostTensor>;
  slots: Record<string, HostTensor>;
  /** The optimizer's metadata (JSON-serialisable: type, iterations, groups, step counts). */
  meta: unknown;
}

/** `tensors` read back, each value copied (on the CPU engines `data()` can return the backend's own array, which in-place kernels write). */
async function hostTensors(tensors: Record<string, Tensor>): Promise<Record<string, HostTensor>> {
  const entries = Object.entries(tensors);
  const values = await Promise.all(entries.map(([, t]) => t.data()));
  return Object.fromEntries(entries.map(([name, t], i) => [name, { values: (values[i] as Float32Array | Int32Array).slice(), shape: t.shape }]));
}

/** `run`'s model and optimizer state (parameters, buffers, queues, centres, optimizer slots and step counts), read back. */
export async function runState(run: TaskRun): Promise<RunState> {
  const optimizer = run.optimizer.stateDict();
  return { model: await hostTensors(run.task.model.stateDict()), slots: await hostTensors(optimizer.tensors), meta: optimizer.meta };
}

/**
 * Puts `state` (of another instance of the same method, or of this one earlier) into `to`, so
 * that `to`'s next step starts there. Each value is copied into a buffer of `to`'s own: a
 * variable's `assign` shares its source's buffer, and `to`'s in-place updates (the native
 * engine's scatter writes of queues and banks) must not reach `state`, which may be loaded again.
 */
export function loadRunState(state: RunState, to: TaskRun): void {
  const upload = (tensors: Record<string, HostTensor>) =>
    Object.fromEntries(
      Object.entries(tensors).map(([name, { values, shape }]) => [name, tf.tensor(values.slice(), shape, values instanceof Int32Array ? 'int32' : 'float32')]),
    );
  const model = upload(state.model);
  const slots = upload(state.slots);
  try {
    to.task.model.loadStateDict(model);
    to.optimizer.loadStateDict({ tensors: slots, meta: state.meta });
  } finally {
    tf.dispose([...Object.values(model), ...Object.values(slots)]);
  }
}

/**
 * `state` split into the queues' entries (names under one of `method`'s queues or other memory
 * modules: banks, prototypes, assignments) and the rest (parameters and other buffers): a
 * queue's rows move by O(1) when written, which would drown the parameters' differences if
 * both were measured in one norm.
 */
export function splitQueues(method: BaseMethod, state: StateArrays): { queues: StateArrays; rest: StateArrays } {
  const prefixes = method.memoryModules().map(([name]) => `${name}.`);
  const queues: StateArrays = {};
  const rest: StateArrays = {};
  for (const [name, values] of Object.entries(state)) (prefixes.some((p) => name.startsWith(p)) ? queues : rest)[name] = values;
  return { queues, rest };
}

async function firstBatch(loader: MultiViewLoader, epoch: number, index: number): Promise<MultiViewBatch> {
  for await (const b of loader.batches(epoch, index)) return b;
  throw new Error(`no batch ${index} in epoch ${epoch}`);
}

/**
 * The micro-batches of optimizer step `s` (0-based) from `loader`: `accumulate` batches from
 * step `s × accumulate` on, `perEpoch` batches an epoch.
 */
export async function stepBatches(loader: MultiViewLoader, s: number, accumulate: number, perEpoch: number): Promise<MultiViewBatch[]> {
  const out: MultiViewBatch[] = [];
  for (let j = 0; j < accumulate; j++) {
    const b = s * accumulate + j;
    out.push(await firstBatch(loader, Math.floor(b / perEpoch), b % perEpoch));
  }
  return out;
}

/** The start of optimizer step `s` (0-based) of `totalSteps`, `accumulate` micro-batches a step, `perEpoch` batches an epoch. */
export function stepStart(s: number, accumulate: number, perEpoch: number, totalSteps: number): Progress {
  const epoch = Math.floor((s * accumulate) / perEpoch);
  return { epoch, step: s, batchInEpoch: s * accumulate - epoch * perEpoch, totalSteps };
}

/**
 * A round-off twin's input: `batch` with its samples in an order keyed by `key` (sample i of
 * the twin's batch is sample `order[i]` of `batch`) and every view value moved by one ulp
 * (the crop boxes, integers, are reordered but not moved).
 */
export function twinBatch(batch: MultiViewBatch, key: number): { batch: MultiViewBatch; order: Int32Array } {
  const order = Rng.keyed(key).permutation(batch.labels.length);
  const permute = <T extends Float32Array | Int32Array>(values: T) => permuteRows(values, order);
  return {
    batch: {
      ...batch,
      views: batch.views.map((v, i) => perturbByOneUlp(permute(v), key * 16 + i)),
      labels: permute(batch.labels),
      indices: permute(batch.indices),
      ...(batch.crops && { crops: batch.crops.map((c) => permute(c)) }),
    },
    order,
  };
}

/** Moves every float32 parameter and buffer of `method` by one ulp (a round-off twin's start). */
export async function perturbState(method: BaseMethod, key: number): Promise<void> {
  const state = Object.values(method.stateDict());
  const values = await Promise.all(state.map((v) => (v.dtype === 'float32' ? v.data<'float32'>() : undefined)));
  tf.tidy(() => {
    state.forEach((v, i) => {
      const current = values[i];
      if (current) (v as Variable).assign(tf.tensor(perturbByOneUlp(current, key * 4096 + i), v.shape));
    });
  });
}

/** The key of the twin batch of twin `t` (of `twins`) for micro-batch `j` (of `accumulate`) of step `s` (0-based). */
export function twinKey(s: number, t: number, j: number, twins: number, accumulate: number): number {
  return ((s + 1) * twins + t) * accumulate + j;
}

/**
 * One step of a round-off twin: `batches` (the reference's micro-batches) in the twin's sample
 * orders with every value moved by one ulp (keys {@link twinKey}), the method told of the orders
 * (and `withOrders`, e.g. to replay decisions in that order), and its queues' last writes put
 * back in the reference's order afterwards.
 */
export async function twinStep(
  run: TaskRun,
  method: BaseMethod,
  batches: MultiViewBatch[],
  progress: Progress,
  key: (j: number) => number,
  withOrders?: (orders: Int32Array[]) => void,
): Promise<StepResult> {
  const inputs = batches.map((b, j) => twinBatch(b, key(j)));
  const orders = inputs.map((i) => i.order);
  method.presentSampleOrders(orders);
  withOrders?.(orders);
  const out = await step(
    run,
    inputs.map((i) => i.batch),
    progress,
  );
  for (const [, queue] of method.queues()) queue.reorderLastWrites(orders);
  return out;
}
