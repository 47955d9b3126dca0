/**
 * The training step timed by `bench:step` and broken down by `profile-step`: one SimCLR
 * step (two views, forward, NT-Xent, backward, LARS update) on a fixed noise batch, the
 * same step as scripts/bench/step_torch.py runs in PyTorch.
 */
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { resolveMethodArgs, SimCLR } from '../../src/methods/index.js';
import { SslTask } from '../../src/methods/task.js';
import { noiseBatch } from './common.js';

export interface StepModelSpec {
  batch: number;
  size: number;
  channels: number;
  cifarStem: boolean;
}

/** The two benchmark models with their batch size and input `[size, size, channels]`. */
export const STEP_MODELS: Record<string, StepModelSpec> = {
  tiny_resnet: { batch: 256, size: 28, channels: 1, cifarStem: false },
  resnet18: { batch: 64, size: 32, channels: 3, cifarStem: true },
};

/** Builds the model, optimizer and batch on the active engine; returns one training step. */
export function buildSimclrStep(model: string): () => void {
  const spec = STEP_MODELS[model];
  if (spec == null) throw new Error(`unknown benchmark model '${model}' (allowed: ${Object.keys(STEP_MODELS).join(', ')})`);
  const rng = new Rng(0);
  const method = new SimCLR({
    createBackbone: (r) => createBackbone(model, { inChannels: spec.channels, imageSize: spec.size, cifarStem: spec.cifarStem, rng: r }),
    numClasses: 10,
    rng,
    args: resolveMethodArgs('simclr', {}),
  });
  const task = new SslTask(method, {
    optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-4, momentum: 0.9, larsEta: 0.02, larsClipLr: true,
    warmupEpochs: 0, warmupStartLr: 0, minLr: 0, globalBatch: spec.batch,
  });
  const { optimizer } = task.configureOptimizers({ totalSteps: 100, stepsPerEpoch: 10 });
  const batch = noiseBatch(rng, spec.batch, spec.size, spec.channels);
  const variables = method.trainableParameters();
  return () => {
    const { value, grads } = tf.variableGrads(() => {
      const out = task.trainingStep(batch);
      tf.dispose(Object.values(out.metrics));
      return out.loss;
    }, variables);
    optimizer.step(grads);
    value.dataSync();
    tf.dispose([value, ...Object.values(grads)]);
  };
}
