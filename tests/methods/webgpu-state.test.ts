/**
 * Method state on the WebGPU engine (SwiftShader): a training step (forward, backward and the
 * end-of-batch state writes) of one method per family, from a loaded state, updates the state
 * exactly as the pure-JS cpu engine does, to float32 round-off: MoCo v2+'s queue and pointer
 * (wrapping around), NNCLR's queue with labels and its nearest-neighbour search, DINO's centre,
 * SwAV's queues and Sinkhorn assignments, W-MSE's call count (restored, then counted) and
 * whitening (the WGSL Cholesky and solve), DeepCluster v2's bank writes and targets, and MAE's
 * mask handling in its loss. During the step a synchronous read of the device (`readSync`,
 * `dataSync`, `arraySync`) throws, failing the test. (One step each: SwiftShader runs a step of
 * these tiny models in about 2 s.)
 */
import assert from 'node:assert/strict';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { maeLoss } from '../../src/losses/mae.js';
import type { BaseMethod, MethodArgs, StepInfo } from '../../src/methods/base.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { forbidSyncReads } from '../../src/core/sync-reads.js';
import { useCpu, useWebGpu } from '../helpers/webgpu.js';

type Engine = 'cpu-js' | 'webgpu';

/** B samples per step, of 8 x 8 x 1 images; N samples in the (fake) dataset; K rows per queue. */
const [B, N, K] = [8, 16, 12];

/** The step's dataset indices: 0, 3, 6, ..., 5 (DeepCluster v2: sample 0 has no cluster, the others have). */
const SAMPLES = Int32Array.from({ length: B }, (_, i) => (i * 3) % N);

/** A queue's pointer at slot 8 of 12, so that the step's 8 rows wrap around. */
const pointerAt8 = (): Record<string, Tensor> => ({ 'queue.pointer': tf.tensor1d([8], 'int32') });
/** ... and after the step at (8 + 8) mod 12. */
const pointerAt4 = (state: Record<string, Float32Array | Int32Array>): void => assert.deepEqual(Array.from(state['queue.pointer']!), [4]);

interface Case {
  method: string;
  args: MethodArgs;
  /** What the step must have done to the state (checked on both engines). */
  check?: (state: Record<string, Float32Array | Int32Array>) => void;
  /** Host-made state loaded before the step (the same on both engines). */
  state?: () => Record<string, Tensor>;
}

const CASES: Case[] = [
  { method: 'mocov2plus', args: { projHiddenDim: 8, projOutputDim: 4, queueSize: K }, state: pointerAt8, check: pointerAt4 },
  { method: 'nnclr', args: { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8, queueSize: K }, state: pointerAt8, check: pointerAt4 },
  { method: 'dino', args: { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 6 } },
  { method: 'swav', args: { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 5, queueSize: K, epochQueueStarts: 0 }, state: pointerAt8, check: pointerAt4 },
  {
    method: 'wmse',
    args: { projHiddenDim: 8, projOutputDim: 3, whiteningSize: 4, whiteningIters: 2 },
    state: () => ({ lossCalls: tf.tensor1d([5], 'int32') }),
  },
  {
    method: 'deepclusterv2',
    args: { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 3, heads: 2 },
    // Clusters of every sample (sample 0 of each head: none), as a previous epoch's k-means leaves them.
    state: () => ({
      'memory.assignments': tf.tensor2d(
        Int32Array.from({ length: 2 * N }, (_, i) => (i % N === 0 ? -1 : (i * 7) % 3)),
        [2, N],
        'int32',
      ),
    }),
  },
];

/**
 * Runs `fn` with every synchronous read of the device throwing, on the WebGPU engine (the
 * cpu backend's own kernels read their inputs with `readSync`: there `fn` just runs).
 */
function withoutSyncReads<T>(fn: () => T): T {
  if (tf.getBackend() !== 'webgpu') return fn();
  const restore = forbidSyncReads();
  try {
    return fn();
  } finally {
    restore();
  }
}

async function select(engine: Engine): Promise<void> {
  if (engine === 'cpu-js') await initEngine('cpu-js');
  else await tf.setBackend('webgpu');
}

/** The method's buffers after a step on `engine`, and the loss. */
async function stepsOn(engine: Engine, c: Case): Promise<Record<string, Float32Array | Int32Array>> {
  await select(engine);
  const cls = getMethodClass(c.method);
  const method = new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(11),
    args: resolveMethodArgs(c.method, c.args),
    norm: 'layer',
    datasetSize: N,
  }) as BaseMethod;
  method.setup({ group: new SingleDeviceStrategy().group });
  if (c.state) {
    const state = c.state();
    method.loadStateDict(state, false);
    tf.dispose(Object.values(state));
  }
  const rng = new Rng(100);
  const views = [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1]));
  const labels = tf.tensor1d(
    Int32Array.from({ length: B }, (_, i) => i % 3),
    'int32',
  );
  const samples = { seed: 5, epoch: 1, indices: SAMPLES };
  const info: StepInfo = { step: 1, totalSteps: 2, epoch: 1 };
  method.onTrainBatchStart(info);
  const metrics: Tensor[] = [];
  const { value, grads } = withoutSyncReads(() => {
    const out = tf.variableGrads(() => {
      const { loss, metrics: m } = method.trainingStep(views, labels, samples);
      metrics.push(...Object.values(m));
      return loss;
    });
    method.onTrainBatchEnd(info);
    return out;
  });
  const state: Record<string, Float32Array | Int32Array> = { loss: (await value.data()) as Float32Array };
  assert.ok(Object.keys(grads).length > 0, `${c.method}: no gradient`);
  tf.dispose([value, ...Object.values(grads), ...metrics, ...views, labels]);
  for (const [name, buffer] of method.namedBuffers()) state[name] = (await buffer.data()) as Float32Array | Int32Array;
  method.dispose();
  return state;
}

/** max |a − b| / max(1, max |b|). */
function relative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let [worst, scale] = [0, 1];
  for (let i = 0; i < b.length; i++) {
    worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return Number.isNaN(worst) ? Infinity : worst / scale;
}

describe('method state on the WebGPU engine (SwiftShader): equal to the cpu-js engine, no synchronous read in a step', function () {
  this.timeout(120_000);
  before(async () => {
    await useWebGpu();
  });
  after(async () => {
    await useCpu();
  });

  for (const c of CASES) {
    it(`${c.method}: a step's state and loss`, async () => {
      const reference = await stepsOn('cpu-js', c);
      const gpu = await stepsOn('webgpu', c);
      assert.deepEqual(Object.keys(gpu).sort(), Object.keys(reference).sort());
      assert.ok(Object.keys(reference).length > 1, `${c.method}: no state buffers`);
      c.check?.(reference);
      c.check?.(gpu);
      for (const [name, expected] of Object.entries(reference)) {
        const actual = gpu[name]!;
        if (expected instanceof Int32Array) assert.deepEqual(Array.from(actual), Array.from(expected), `${c.method}: ${name}`);
        else assert.ok(relative(actual, expected) < 1e-4, `${c.method}: ${name}: relative error ${relative(actual, expected)}`);
      }
    });
  }

  it("mae: the loss's masked mean (and its NaN for a mask without masked patch) with the mask left on the device", async () => {
    const rng = new Rng(4);
    const [images, predictions] = [rng.normalArray(2 * 64), rng.normalArray(2 * 16 * 4)];
    const mask = Float32Array.from({ length: 32 }, (_, i) => (i % 3 === 0 ? 0 : 1));
    const lossOn = async (engine: Engine, m: Float32Array): Promise<number> => {
      await select(engine);
      const inputs = [tf.tensor4d(images, [2, 8, 8, 1]), tf.tensor3d(predictions, [2, 16, 4]), tf.tensor2d(m, [2, 16])] as const;
      const loss = withoutSyncReads(() => maeLoss(...inputs, { patchSize: 2 }));
      const value = (await loss.data())[0]!;
      tf.dispose([loss, ...inputs]);
      return value;
    };
    const reference = await lossOn('cpu-js', mask);
    const gpu = await lossOn('webgpu', mask);
    assert.ok(Number.isFinite(reference) && Math.abs(gpu - reference) <= 1e-5 * Math.abs(reference), `${gpu} vs ${reference}`);
    assert.ok(Number.isNaN(await lossOn('webgpu', new Float32Array(32))));
  });
});
