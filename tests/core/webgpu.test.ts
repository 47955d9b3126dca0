/**
 * The WebGPU engine itself, on SwiftShader: adapters as Dawn lists them, the engine computing
 * on the device, and the adapter checks `--gpus` runs before spawning ranks.
 */
import assert from 'node:assert/strict';
import { engineInfo } from '../../src/core/engine.js';
import { tf } from '../../src/core/tf.js';
import { checkGpuAdapters, eligibleAdapters, listGpuAdapters, vulkanDriverSearchPaths } from '../../src/core/webgpu.js';
import { SWIFTSHADER_ICD, useCpu, useWebGpu } from '../helpers/webgpu.js';

describe('core: the WebGPU engine (SwiftShader)', () => {
  before(() => {
    process.env.VK_ICD_FILENAMES ??= SWIFTSHADER_ICD;
  });
  after(async () => {
    await useCpu();
  });

  it('lists SwiftShader as a software Vulkan adapter', () => {
    const { adapters, loaderMissing } = listGpuAdapters();
    assert.equal(loaderMissing, false);
    assert.deepEqual(adapters, [{ name: 'SwiftShader Device (Subzero)', api: 'vulkan', software: true }]);
  });

  it('computes on the device: a matrix product equals the CPU engine to float32 round-off', async () => {
    const a = [
      [1, 2, 3],
      [4, 5, 6],
    ];
    const b = [[0.5], [-1], [2]];
    const info = await useWebGpu();
    assert.equal(info.backend, 'webgpu');
    assert.equal(tf.getBackend(), 'webgpu');
    assert.equal(info.gpu?.adapter.name, 'SwiftShader Device (Subzero)');
    const onGpu = await tf.matMul(tf.tensor2d(a), tf.tensor2d(b)).data();
    await useCpu();
    assert.equal(engineInfo()?.backend, 'cpu');
    const onCpu = tf.matMul(tf.tensor2d(a), tf.tensor2d(b)).dataSync();
    assert.deepEqual(Array.from(onGpu), Array.from(onCpu));
    assert.deepEqual(Array.from(onCpu), [4.5, 9]);
  });

  it('--gpus N needs N adapters unless ranks may share them', () => {
    assert.throws(
      () => checkGpuAdapters(2, { allowSoftware: true }),
      /^UserError: --gpus 2: asks for one adapter per rank, but this node has 1 \(SwiftShader Device \(Subzero\)\); use --gpus 1$/,
    );
    assert.doesNotThrow(() => checkGpuAdapters(2, { allowSoftware: true, shareAdapters: true }));
    assert.throws(() => checkGpuAdapters(1, { allowSoftware: false }), /no GPU adapter: Dawn lists: SwiftShader Device \(Subzero\) \(vulkan, software\)/);
  });

  it('names the Vulkan loader search paths: the explicit list, else the standard icd.d folders', () => {
    assert.deepEqual(vulkanDriverSearchPaths({ VK_ICD_FILENAMES: '/a.json:/b.json' }), ['/a.json', '/b.json']);
    assert.deepEqual(vulkanDriverSearchPaths({ VK_DRIVER_FILES: '/c.json', VK_ICD_FILENAMES: '/a.json' }), ['/c.json']);
    const standard = vulkanDriverSearchPaths({ XDG_CONFIG_HOME: '/h/.config', XDG_DATA_HOME: '/h/.local/share' });
    assert.deepEqual(standard, [
      '/h/.config/vulkan/icd.d',
      '/etc/xdg/vulkan/icd.d',
      '/etc/vulkan/icd.d',
      '/h/.local/share/vulkan/icd.d',
      '/usr/local/share/vulkan/icd.d',
      '/usr/share/vulkan/icd.d',
    ]);
  });
});

describe('core: which adapters ranks take', () => {
  const gpus = [
    { name: 'GPU A', api: 'vulkan', software: false },
    { name: 'SwiftShader Device (Subzero)', api: 'vulkan', software: true },
    { name: 'GPU B', api: 'vulkan', software: false },
  ];
  it('hardware adapters in Dawn order; software ones only when allowed', () => {
    assert.deepEqual(
      eligibleAdapters(gpus, { allowSoftware: false }, {}).map((a) => a.name),
      ['GPU A', 'GPU B'],
    );
    assert.equal(eligibleAdapters(gpus, { allowSoftware: true }, {}).length, 3);
  });
  it('SSL_ZOO_VISIBLE_ADAPTERS picks and orders them by index, like CUDA_VISIBLE_DEVICES; a bad index is a one-line user error', () => {
    assert.deepEqual(
      eligibleAdapters(gpus, { allowSoftware: false }, { SSL_ZOO_VISIBLE_ADAPTERS: '2,0' }).map((a) => a.name),
      ['GPU B', 'GPU A'],
    );
    assert.throws(
      () => eligibleAdapters(gpus, { allowSoftware: false }, { SSL_ZOO_VISIBLE_ADAPTERS: '3' }),
      /^UserError: SSL_ZOO_VISIBLE_ADAPTERS: "3" is not allowed; expected indices in \[0, 2\] of Dawn's adapters \(GPU A; SwiftShader Device \(Subzero\); GPU B\)$/,
    );
  });
});

describe('core: synchronous reads on the WebGPU engine (what collectives need)', () => {
  before(() => {
    process.env.VK_ICD_FILENAMES ??= SWIFTSHADER_ICD;
  });
  after(async () => {
    await useCpu();
  });

  it('dataSync returns what the device computed, for float32 and int32, after queued work', async () => {
    await useWebGpu();
    const x = tf.reshape(tf.range(0, 1000, 1, 'float32'), [10, 100]);
    const y = tf.sum(tf.matMul(x, x, false, true), 1);
    const expected = await y.data(); // the asynchronous path, tfjs's own
    const again = tf.sum(tf.matMul(x, x, false, true), 1);
    assert.deepEqual(Array.from(again.dataSync()), Array.from(expected));
    const ints = tf.cast(tf.range(0, 7), 'int32');
    assert.deepEqual(Array.from(tf.add(ints, tf.scalar(3, 'int32')).dataSync()), [3, 4, 5, 6, 7, 8, 9]);
    assert.deepEqual(tf.tensor2d([[1, 2]]).arraySync(), [[1, 2]]);
  });
});
