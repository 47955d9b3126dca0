/**
 * The SimCLR training step the benchmarks time (`bench:step`, `bench:grad-cache`) and
 * `profile-step` breaks down: two views, forward, NT-Xent, backward, LARS update, on a fixed
 * noise batch; `bench:step`'s configuration is the one scripts/bench/step_torch.py runs in
 * PyTorch.
 */
import { createBackbone } from '../../src/backbones/index.js';
import type { NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { resolveMethodArgs, SimCLR } from '../../src/methods/index.js';
import { SslTask } from '../../src/methods/task.js';
import { noiseBatch } from './common.js';

export interface StepModelSpec {
  batch: number;
  size: number;
  channels: number;
  cifarStem: boolean;
}

/**
 * The benchmark models with their bench:step batch size and input `[size, size, channels]`.
 * `vit_tiny` (4 px patches: 65 tokens) runs at batch 64 like resnet18: at 256 its activation
 * tape would take several GB.
 */
export const STEP_MODELS: Record<string, StepModelSpec> = {
  tiny_resnet: { batch: 256, size: 28, channels: 1, cifarStem: false },
  resnet18: { batch: 64, size: 32, channels: 3, cifarStem: true },
  vit_tiny: { batch: 64, size: 32, channels: 3, cifarStem: false },
};

export interface SimclrStepOptions {
  /** Local batch (default the model's bench:step batch). */
  batch?: number;
  /** Normalisation of backbone and heads (default batch norm). */
  norm?: NormKind;
  /** Gradient-cache chunk (default none: one pass over the batch). */
  gradCacheChunk?: number;
  /** SimCLR arguments over solo-learn's defaults, e.g. smaller projector dimensions. */
  methodArgs?: MethodArgs;
  /** Image side instead of the model's (`[size, size, channels]` inputs; ViT patches stay 4 px). */
  size?: number;
}

/**
 * Builds the model, optimizer and batch on the active engine; returns one training step,
 * which returns the method's loss (without the online classifier's).
 */
export function buildSimclrStep(model: string, options: SimclrStepOptions = {}): () => number {
  const { task, optimizer, data, variables } = setup(model, options);
  return () => {
    if (task.computeGradients) {
      const { grads, metrics } = task.computeGradients(data, variables);
      optimizer.step(grads);
      const loss = metrics.loss!.dataSync()[0]!;
      tf.dispose([...Object.values(grads), ...Object.values(metrics)]);
      return loss;
    }
    let loss = 0;
    const { value, grads } = tf.variableGrads(() => {
      const out = task.trainingStep(data);
      loss = out.metrics.loss.dataSync()[0]; // the SSL loss, as the gradient cache reports it
      tf.dispose(Object.values(out.metrics));
      return out.loss;
    }, variables);
    optimizer.step(grads);
    value.dataSync();
    tf.dispose([value, ...Object.values(grads)]);
    return loss;
  };
}

/** {@link buildSimclrDeviceStep}'s step, and the forward pass alone (for counting FLOPs). */
export interface DeviceStep {
  /** One training step; returns its loss (SSL + online classifier) for the caller to await and dispose. */
  step: () => tf.Tensor;
  /** The forward pass and loss of the step, without gradients or update (disposes everything). */
  forward: () => void;
}

/**
 * The same step without any synchronous read (the WebGPU engine cannot read synchronously):
 * the step returns its loss as a scalar tensor that the caller awaits (`await loss.data()`)
 * and disposes, the one sync point per step. No gradient cache.
 */
export function buildSimclrDeviceStep(model: string, options: SimclrStepOptions = {}): DeviceStep {
  if (options.gradCacheChunk) throw new Error('buildSimclrDeviceStep: no gradient cache');
  const { task, optimizer, data, variables } = setup(model, options);
  return {
    step: () => {
      const { value, grads } = tf.variableGrads(() => {
        const out = task.trainingStep(data);
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, variables);
      optimizer.step(grads);
      tf.dispose(Object.values(grads));
      return value;
    },
    forward: () =>
      tf.tidy(() => {
        task.trainingStep(data);
      }),
  };
}

function setup(model: string, options: SimclrStepOptions) {
  const spec = STEP_MODELS[model];
  if (spec == null) throw new Error(`unknown benchmark model '${model}' (allowed: ${Object.keys(STEP_MODELS).join(', ')})`);
  const batch = options.batch ?? spec.batch;
  const size = options.size ?? spec.size;
  const norm = options.norm ?? 'batch';
  const rng = new Rng(0);
  const method = new SimCLR({
    createBackbone: (r) => createBackbone(model, { inChannels: spec.channels, imageSize: size, cifarStem: spec.cifarStem, rng: r, norm }),
    numClasses: 10,
    rng,
    args: resolveMethodArgs('simclr', options.methodArgs ?? {}),
    norm,
  });
  const task = new SslTask(
    method,
    {
      optimizer: 'lars',
      lr: 0.4,
      classifierLr: 0.1,
      weightDecay: 1e-4,
      momentum: 0.9,
      larsEta: 0.02,
      larsClipLr: true,
      warmupEpochs: 0,
      warmupStartLr: 0,
      minLr: 0,
      globalBatch: batch,
    },
    undefined,
    options.gradCacheChunk,
  );
  const { optimizer } = task.configureOptimizers({ totalSteps: 100, stepsPerEpoch: 10 });
  const data = noiseBatch(rng, batch, size, spec.channels);
  const variables = method.trainableParameters();
  return { task, optimizer, data, variables };
}
