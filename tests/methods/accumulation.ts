/**
 * The harness of the accumulation tests (accumulation-state.test.ts and its .full twin): one
 * optimizer step of a method through the trainer's own step sequence ({@link StepSequence}),
 * either on one batch of 2N samples or with `--accumulate-grad-batches 2` on its two halves of
 * N, in process with the single-device strategy, and the state it leaves (parameters, buffers,
 * queues, centres). The rule under test (docs/methods.md, "State under gradient accumulation"):
 * state written from data advances once per optimizer step, from all its micro-batches, so
 * that accumulation k equals one batch of kN for everything not coupled inside a micro-batch.
 *
 * A negative control runs the accumulated step with the state written after every
 * micro-batch instead ({@link PerMicroBatchState}).
 */
import { createBackbone } from '../../src/backbones/index.js';
import { VisionTransformer } from '../../src/backbones/vit.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import type { MultiViewBatch } from '../../src/data/loader.js';
import type { BaseMethod, MethodArgs, MethodContext } from '../../src/methods/base.js';
import { cosineTau } from '../../src/methods/momentum.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SslTask } from '../../src/methods/task.js';
import type { Progress, TrainingModule } from '../../src/trainer/interfaces.js';
import { readMetrics, StepSequence } from '../../src/trainer/step.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

/** Samples per micro-batch. */
export const N = 6;

/** The context every method of these tests is built from: the mlp backbone, per-sample norms (`layer`), a fixed seed. */
export function methodContext(name: string, args: MethodArgs, seed = 3): MethodContext {
  return {
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs(name, args),
    norm: 'layer',
    datasetSize: 2 * N,
  };
}

/** A one-block ViT of the masked-token tests (ibot, msn, dinov2): 8 x 8 single-channel images, 2 x 2 patches of 4 px, width 16. */
export const tinyVit = (rng: Rng) =>
  new VisionTransformer({ embedDim: 16, depth: 1, numHeads: 2, mlpRatio: 2, patchSize: 4 }, { inChannels: 1, imageSize: 8, rng });

/** `name` built from {@link methodContext}. */
export function buildMethod(name: string, args: MethodArgs, seed = 3): BaseMethod {
  return new (getMethodClass(name))(methodContext(name, args, seed));
}

/** `views` synthetic 8 x 8 x 1 views of samples `from .. from + count - 1` of a fixed 2N-sample batch. */
export function batchOf(views: number, from: number, count: number): MultiViewBatch {
  const all = Array.from({ length: views }, (_, v) => new Rng(100 + v).normalArray(2 * N * 64));
  const shape: [number, number, number, number] = [count, 8, 8, 1];
  return {
    views: all.map((a) => Float32Array.from(a.slice(from * 64, (from + count) * 64))),
    shape,
    shapes: all.map(() => shape),
    labels: Int32Array.from({ length: count }, (_, i) => (from + i) % 3),
    indices: Int32Array.from({ length: count }, (_, i) => from + i),
    index: 0,
    epoch: 0,
    seed: 7,
  };
}

/** A method's state after a step: every parameter and buffer by name, and the step's loss (mean over its micro-batches). */
export interface StepResult {
  state: Record<string, Float32Array | Int32Array>;
  loss: number;
}

/**
 * Wraps a task so that the method's data-written state is written after every micro-batch
 * (the bug class of lightly #2062 / lightly-train #968): `afterMicroBatch` runs after each
 * micro-batch's gradients, outside the tape, e.g. flushing the queues.
 */
export class PerMicroBatchState implements TrainingModule<MultiViewBatch> {
  constructor(
    private readonly task: SslTask,
    private readonly afterMicroBatch: (method: BaseMethod) => void,
  ) {}

  get model(): BaseMethod {
    return this.task.method;
  }

  trainingStep(batch: MultiViewBatch): ReturnType<SslTask['trainingStep']> {
    return this.task.trainingStep(batch);
  }

  computeGradients(batch: MultiViewBatch, variables: tf.Variable[]): { grads: Record<string, Tensor>; metrics: Record<string, tf.Scalar> } {
    let metrics: Record<string, tf.Scalar> = {};
    const { value, grads } = tf.variableGrads(() => {
      const out = this.task.trainingStep(batch);
      metrics = out.metrics;
      return out.loss;
    }, variables);
    value.dispose();
    this.afterMicroBatch(this.task.method);
    return { grads, metrics };
  }

  setup(context: { group: SingleDeviceStrategy['group'] }): void {
    this.task.setup(context);
  }

  onTrainEpochStart(progress: Progress): void {
    this.task.onTrainEpochStart(progress);
  }

  configureOptimizers(info: { totalSteps: number; stepsPerEpoch: number }): ReturnType<SslTask['configureOptimizers']> {
    return this.task.configureOptimizers(info);
  }

  onTrainBatchStart(progress: Progress): void {
    this.task.onTrainBatchStart(progress);
  }

  adjustGradients(grads: Record<string, Tensor>, progress: Progress): Record<string, Tensor> {
    return this.task.adjustGradients(grads, progress);
  }

  onTrainBatchEnd(progress: Progress): void {
    this.task.onTrainBatchEnd(progress);
  }
}

/** Flushes the method's queues: the per-micro-batch negative control of a queue. */
export const flushQueues = (method: BaseMethod): void => {
  for (const [, queue] of method.queues()) queue.flush();
};

/**
 * The first optimizer step (of 4; in epoch `epoch`, its first batch) of `method` through the
 * trainer's step sequence on `batches` (its micro-batches): SGD with momentum, lr 20 per 256
 * samples scaled for a global batch of 2N whatever the micro-batches (so the same on both sides
 * of a comparison). With `perMicroBatch`, the state is also written after every micro-batch (the
 * negative control). Disposes the method.
 */
export async function runStep(
  method: BaseMethod,
  batches: MultiViewBatch[],
  options: { epoch?: number; perMicroBatch?: (m: BaseMethod) => void } = {},
): Promise<StepResult> {
  const task = new SslTask(method, {
    ...{ optimizer: 'sgd', lr: 20, classifierLr: 20, weightDecay: 0, momentum: 0.9, larsEta: 0.02, larsClipLr: true },
    ...{ warmupEpochs: 0, warmupStartLr: 0, minLr: 0, globalBatch: 2 * N },
  });
  const module: TrainingModule<MultiViewBatch> = options.perMicroBatch ? new PerMicroBatchState(task, options.perMicroBatch) : task;
  const strategy = new SingleDeviceStrategy();
  module.setup!({ group: strategy.group });
  const { optimizer, scheduler } = module.configureOptimizers({ totalSteps: 4, stepsPerEpoch: 1 });
  const steps = new StepSequence({ module, strategy, optimizer, scheduler, variables: method.trainableParameters() });
  const epoch = options.epoch ?? 0;
  const progress: Progress = { epoch, step: 0, batchInEpoch: 0, totalSteps: 4 };
  for (const batch of batches) steps.addBatch(batch, progress);
  const { metrics } = await steps.finishStep(progress);
  const [read] = await readMetrics([metrics], strategy);
  tf.dispose(Object.values(metrics.tensors));
  const state = Object.fromEntries(Object.entries(method.stateDict()).map(([name, t]) => [name, t.dataSync().slice() as Float32Array | Int32Array]));
  optimizer.dispose();
  method.dispose();
  return { state, loss: read!.local.loss! };
}

/** The largest difference between `a[name]` and `b[name]` over `names`, relative to b's largest magnitude (at least 1e-3), with the worst name. */
export function worstDifference(a: StepResult['state'], b: StepResult['state'], names: string[]): { name: string; difference: number } {
  let worst = { name: '', difference: 0 };
  for (const name of names) {
    const [x, y] = [a[name]!, b[name]!];
    let scale = 1e-3;
    for (let i = 0; i < y.length; i++) scale = Math.max(scale, Math.abs(y[i]!));
    for (let i = 0; i < x.length; i++) {
      const d = Math.abs(x[i]! - y[i]!) / scale;
      if (d > worst.difference) worst = { name, difference: d };
    }
  }
  return worst;
}

/** The base tau of the methods given to {@link emaUnderAccumulation} (a large EMA step, so that it shows). */
export const EMA_BASE_TAU = 0.5;

/** What {@link emaUnderAccumulation} measured: how far each target is from one EMA update, and the losses. */
export interface EmaUnderAccumulation {
  /** max |target − (tau · target at the start + (1 − tau) · student after)| over `momentumBackbone.*`, accumulated (k = 2). */
  accumulatedError: number;
  /** The same with the target moved after every micro-batch (the negative control). */
  perMicroBatchError: number;
  /** The accumulated step's loss, the mean of each micro-batch's loss run alone from the step's start, and the control's. */
  accumulatedLoss: number;
  ownLoss: number;
  perMicroBatchLoss: number;
}

/**
 * The EMA-target rule under accumulation for a method whose state written from data is its EMA
 * target alone: `build()` (base tau {@link EMA_BASE_TAU}; the same initial weights on every call), its student moved away from the target
 * (0.3 · N(0, 1) on every backbone parameter, as after some steps), takes one step on k = 2
 * micro-batches of N (`views` views), each micro-batch alone from the same start, and the control
 * moving the target after every micro-batch.
 */
export async function emaUnderAccumulation(build: () => BaseMethod, views: number): Promise<EmaUnderAccumulation> {
  const diverged = () => {
    const m = build();
    const rng = new Rng(5);
    for (const p of m.backbone.parameters()) p.assign(tf.tidy(() => tf.add(p, tf.mul(tf.tensor(rng.normalArray(p.size), p.shape), 0.3))));
    return m;
  };
  const halves = [batchOf(views, 0, N), batchOf(views, N, N)];
  const start = diverged();
  const targetStart = Object.fromEntries(Object.entries(start.stateDict()).map(([n, t]) => [n, t.dataSync().slice()]));
  start.dispose();
  const accumulated = await runStep(diverged(), halves);
  const alone = [await runStep(diverged(), [halves[0]!]), await runStep(diverged(), [halves[1]!])];
  const perMicroBatch = await runStep(diverged(), halves, { perMicroBatch: (m) => m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 }) });
  const tau = cosineTau(EMA_BASE_TAU, 1, 0, 4);
  const emaError = (state: StepResult['state']) => {
    const names = Object.keys(state).filter((n) => n.startsWith('momentumBackbone.'));
    if (names.length === 0) throw new Error('emaUnderAccumulation: no momentumBackbone.* in the state');
    let worst = 0;
    for (const name of names) {
      const student = state[name.replace('momentumBackbone.', 'backbone.')]!;
      state[name]!.forEach((t, i) => (worst = Math.max(worst, Math.abs(t - (tau * targetStart[name]![i]! + (1 - tau) * student[i]!)))));
    }
    return worst;
  };
  return {
    accumulatedError: emaError(accumulated.state),
    perMicroBatchError: emaError(perMicroBatch.state),
    accumulatedLoss: accumulated.loss,
    ownLoss: (alone[0]!.loss + alone[1]!.loss) / 2,
    perMicroBatchLoss: perMicroBatch.loss,
  };
}
