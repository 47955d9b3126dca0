import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { BATCH_NORM_TRAIN, BATCH_NORM_TRAIN_GRAD, batchNormTraining } from '../../src/core/kernels/batch-norm.js';
import { installWebGpuKernels } from '../../src/core/kernels/webgpu/index.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { useCpu } from '../helpers/webgpu.js';
import { useWebGpu } from '../helpers/webgpu.js';
import { assertMatches, randn, readAll, relativeNormError, TOLERANCE, type Computation, type ReadBack } from './webgpu-helpers.js';

/**
 * The WGSL training batch norm (src/core/kernels/webgpu/batch-norm.ts) against the tfjs
 * composition on cpu-js. Shapes: fewer rows than a workgroup (64), one more than a
 * workgroup, more channels than an element-wise workgroup, one channel, rank 2 to 4.
 *
 * Everything on webgpu runs in one `before`, then the references on cpu-js: each
 * `initEngine('webgpu')` creates a new Dawn device, so tests switch engines once.
 */
const SHAPES: number[][] = [
  [3, 1],
  [65, 3],
  [2, 3, 5, 7],
  [1, 130, 67],
  [4, 4, 4, 1],
];

/** The kernels run directly: `[y, mean, variance]` and the gradient kernel's `[dx, dscale, doffset]`. */
function viaKernels(shape: number[], seed: number, affine: boolean, statGrads: boolean): Tensor[] {
  const C = shape[shape.length - 1];
  const x = randn(shape, seed, 3, -1);
  const [scale, offset] = affine ? [randn([C], seed + 1, 0.5, 1), randn([C], seed + 2)] : [undefined, undefined];
  const eps = 1e-3;
  const fwd = tf.engine().runKernel(BATCH_NORM_TRAIN, { x, ...(affine ? { scale, offset } : {}) }, { varianceEpsilon: eps }) as Tensor[];
  const [, mean, variance] = fwd;
  const inputs: tf.NamedTensorMap = { dy: randn(shape, seed + 3), x, mean, variance };
  if (affine) inputs.scale = scale as Tensor;
  if (statGrads) Object.assign(inputs, { dmean: randn([C], seed + 4), dvariance: randn([C], seed + 5) });
  const grads = tf.engine().runKernel(BATCH_NORM_TRAIN_GRAD, inputs, { varianceEpsilon: eps }) as Tensor[];
  return [...fwd, ...grads];
}

/** The same through the tfjs composition and `tf.grads` (the reference, on cpu-js). */
function viaComposition(shape: number[], seed: number, affine: boolean, statGrads: boolean): Tensor[] {
  const C = shape[shape.length - 1];
  const x = randn(shape, seed, 3, -1);
  const [scale, offset] = affine ? [randn([C], seed + 1, 0.5, 1), randn([C], seed + 2)] : [tf.ones([C]), tf.zeros([C])];
  const axes = shape.slice(0, -1).map((_, i) => i);
  const f = (xi: Tensor, s: Tensor, o: Tensor) => {
    const { mean, variance } = tf.moments(xi, axes);
    return { y: tf.batchNorm(xi, mean, variance, o, s, 1e-3), mean, variance };
  };
  const { y, mean, variance } = f(x, scale, offset);
  const dy = randn(shape, seed + 3);
  const [dmean, dvariance] = statGrads ? [randn([C], seed + 4), randn([C], seed + 5)] : [tf.zeros([C]), tf.zeros([C])];
  const grads = tf.grads((xi: Tensor, s: Tensor, o: Tensor) => {
    const r = f(xi, s, o);
    return tf.addN([tf.sum(tf.mul(r.y, dy)), tf.sum(tf.mul(r.mean, dmean)), tf.sum(tf.mul(r.variance, dvariance))]);
  })([x, scale, offset]);
  return [y, mean, variance, ...grads];
}

function tableName(shape: number[], affine: boolean, statGrads: boolean): string {
  const parts = affine ? ' with scale and offset' : ' without scale and offset';
  return `[${shape}]${parts}${statGrads ? ', gradients into mean and variance' : ''}: y, mean, variance, dx, dscale, doffset`;
}

const VARIANTS: Array<[boolean, boolean]> = [
  [true, true],
  [false, false],
];

/** `[16, 16, 16, 32]` (tiny_resnet's bn1 on a SimCLR batch), through batchNormTraining and tf.grads. */
function simclrSized(): Tensor[] {
  const x = randn([16, 16, 16, 32], 21, 2, 0.3);
  const [g, b] = [randn([32], 22, 0.2, 1), randn([32], 23, 0.1)];
  const r = randn([16, 16, 16, 32], 24);
  const { y, mean, variance } = batchNormTraining(x, g, b, 1e-5);
  return [y, mean, variance, ...tf.grads((xi: Tensor, gi: Tensor, bi: Tensor) => tf.sum(tf.mul(batchNormTraining(xi, gi, bi, 1e-5).y, r)))([x, g, b])];
}

const CONTROL_SHAPE = [2, 3, 5, 7];

describe('kernels/webgpu: training batch norm (WGSL) against cpu-js', function () {
  const webgpu: Record<string, ReadBack> = {};
  const reference: Record<string, ReadBack> = {};
  let kernelNames: string[] = [];
  const memory: tf.MemoryInfo[] = [];
  let wrong: ReadBack;

  before(async () => {
    await useWebGpu();
    for (const shape of SHAPES) {
      for (const [affine, statGrads] of VARIANTS) {
        Object.assign(webgpu, await readAll({ [tableName(shape, affine, statGrads)]: () => viaKernels(shape, 11, affine, statGrads) }));
      }
    }
    Object.assign(webgpu, await readAll({ simclr: simclrSized }));

    const x = randn([4, 3, 3, 5], 3);
    const info = await tf.profile(() => tf.grads((xi: Tensor) => tf.sum(batchNormTraining(xi, tf.ones([5]), tf.zeros([5]), 1e-5).y))([x]));
    kernelNames = info.kernelNames;
    const step = () => tf.tidy(() => tf.grads((xi: Tensor) => tf.sum(tf.square(batchNormTraining(xi, undefined, undefined, 1e-5).y)))([x]));
    tf.dispose(step());
    for (let i = 0; i < 4; i++) {
      tf.dispose(step());
      await x.data(); // submits the queue, which frees the buffers of disposed tensors
      memory.push(tf.memory());
    }
    x.dispose();

    // The negative control: a deliberately wrong gradient kernel (that of another epsilon),
    // registered with plain tf.registerKernel, then ours again with installWebGpuKernels().
    const control: Record<string, Computation> = { control: () => viaKernels(CONTROL_SHAPE, 5, true, true) };
    const ours = tf.getKernel(BATCH_NORM_TRAIN_GRAD, 'webgpu');
    assert.ok(ours, 'the gradient kernel is registered on webgpu');
    tf.unregisterKernel(BATCH_NORM_TRAIN_GRAD, 'webgpu');
    tf.registerKernel({ ...ours, kernelFunc: (args) => ours.kernelFunc({ ...args, attrs: { varianceEpsilon: 0.5 } }) });
    wrong = (await readAll(control)).control;
    installWebGpuKernels();
    installWebGpuKernels(); // idempotent
    Object.assign(webgpu, await readAll(control));

    await initEngine('cpu-js');
    for (const shape of SHAPES) {
      for (const [affine, statGrads] of VARIANTS) {
        Object.assign(reference, await readAll({ [tableName(shape, affine, statGrads)]: () => viaComposition(shape, 11, affine, statGrads) }));
      }
    }
    Object.assign(reference, await readAll({ simclr: simclrSized, control: () => viaComposition(CONTROL_SHAPE, 5, true, true) }));
  });
  after(useCpu);

  for (const shape of SHAPES) {
    for (const [affine, statGrads] of VARIANTS) {
      const name = tableName(shape, affine, statGrads);
      // Without scale, the reference's dscale/doffset are those of an identity scale and
      // offset, which the kernel reports too.
      it(name, () => assertMatches(webgpu[name], reference[name], name));
    }
  }

  it('SimCLR-sized activations [16, 16, 16, 32] through batchNormTraining match', () => {
    assertMatches(webgpu.simclr, reference.simclr, 'batch norm [16, 16, 16, 32]');
  });

  it('batchNormTraining runs the WGSL kernels on webgpu, forward and backward', () => {
    assert.ok(kernelNames.includes(BATCH_NORM_TRAIN), `kernels run: ${kernelNames.join(', ')}`);
    assert.ok(kernelNames.includes(BATCH_NORM_TRAIN_GRAD), `kernels run: ${kernelNames.join(', ')}`);
  });

  it('does not leak tensors or their GPU data over steps', () => {
    // (numBytesInGPU also counts pooled uniform buffers, which vary from step to step.)
    assert.equal(memory[3].numTensors, memory[0].numTensors);
    assert.equal(memory[3].numDataBuffers, memory[0].numDataBuffers);
  });

  it('detects a wrong kernel registered with tf.registerKernel, and installWebGpuKernels() restores ours', () => {
    const err = relativeNormError(wrong.values[3], reference.control.values[3], 'wrong dx');
    assert.ok(err > 100 * TOLERANCE, `the wrong kernel's dx is off by only ${err.toExponential(2)}`);
    assertMatches(webgpu.control, reference.control, 'after installWebGpuKernels()');
  });
});
