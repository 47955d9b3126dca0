import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { initEngine } from '../../src/core/engine.js';
import {
  NATIVE_KERNEL_NAMES,
  nativeKernelStats,
  nativeKernelsInstalled,
  nativeThreads,
  oneDnnCpuIsa,
  oneDnnVersion,
  setNativeThreads,
} from '../../src/core/native-kernels.js';
import { tf } from '../../src/core/tf.js';
import { randn, requireNativeKernels } from './helpers.js';

describe('kernels/native engine integration and threads', () => {
  before(requireNativeKernels);
  after(async () => {
    await initEngine('cpu');
  });

  it('initEngine("cpu") installs the native kernels and "cpu-js" puts the JS kernels back', async () => {
    const cpu = await initEngine('cpu');
    assert.equal(cpu.nativeKernels, true);
    assert.ok(nativeKernelsInstalled());
    assert.match(oneDnnVersion() ?? '', /^\d+\.\d+\.\d+$/);
    for (const name of ['BatchMatMul', '_FusedMatMul', 'Conv2D', 'FusedConv2D', 'Conv2DBackpropInput', 'Conv2DBackpropFilter']) {
      assert.ok(NATIVE_KERNEL_NAMES.includes(name), name);
    }

    const js = await initEngine('cpu-js');
    assert.equal(js.nativeKernels, false);
    assert.equal(nativeKernelsInstalled(), false);
    const before = nativeKernelStats().BatchMatMul?.native ?? 0;
    tf.tidy(() => tf.matMul(randn([8, 8], 1), randn([8, 8], 2)).dataSync());
    assert.equal(nativeKernelStats().BatchMatMul?.native ?? 0, before, 'cpu-js must not run native kernels');

    await initEngine('cpu');
    tf.tidy(() => tf.matMul(randn([8, 8], 1), randn([8, 8], 2)).dataSync());
    assert.equal(nativeKernelStats().BatchMatMul.native, before + 1);
  });

  it('reports the instruction set oneDNN runs with, capped by ONEDNN_MAX_CPU_ISA', () => {
    const isa = oneDnnCpuIsa() ?? '';
    assert.match(isa, /^(sse41|avx|avx2|avx2_vnni|avx512_\w+)$/);
    if (process.env.ONEDNN_MAX_CPU_ISA?.toUpperCase() === 'AVX2') assert.equal(isa, 'avx2');
    if (!/\bavx512f\b/.test(readFileSync('/proc/cpuinfo', 'utf8'))) assert.doesNotMatch(isa, /avx512/, 'an AVX2-only CPU');
  });

  it('uses the available CPUs by default, and setNativeThreads changes it', () => {
    const original = nativeThreads();
    try {
      setNativeThreads(1);
      assert.equal(nativeThreads(), 1);
      const one = tf.tidy(() => tf.conv2d(randn([4, 16, 16, 8], 1) as tf.Tensor4D, randn([3, 3, 8, 16], 2) as tf.Tensor4D, 1, 'same').dataSync());
      setNativeThreads(2);
      assert.equal(nativeThreads(), 2);
      const two = tf.tidy(() => tf.conv2d(randn([4, 16, 16, 8], 1) as tf.Tensor4D, randn([3, 3, 8, 16], 2) as tf.Tensor4D, 1, 'same').dataSync());
      let worst = 0;
      for (let i = 0; i < one.length; i++) worst = Math.max(worst, Math.abs(one[i] - two[i]));
      assert.ok(worst < 1e-4, `1 vs 2 threads differ by ${worst}`);
      assert.throws(() => setNativeThreads(0), /positive integer/);
    } finally {
      setNativeThreads(original);
    }
  });

  it('honours SSL_ZOO_NUM_THREADS, else OMP_NUM_THREADS, else os.availableParallelism()', () => {
    const module = fileURLToPath(new URL('../../src/core/native-kernels.js', import.meta.url));
    const script = `import(${JSON.stringify(module)}).then((m) => console.log(m.nativeThreads()))`;
    const run = (env: NodeJS.ProcessEnv) => {
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      return Number(r.stdout.trim());
    };
    assert.equal(run({ ...process.env, SSL_ZOO_NUM_THREADS: '1' }), 1);
    assert.equal(run({ ...process.env, SSL_ZOO_NUM_THREADS: '3' }), 3);
    const env = { ...process.env };
    delete env.SSL_ZOO_NUM_THREADS;
    delete env.OMP_NUM_THREADS;
    assert.equal(run(env), os.availableParallelism());
    assert.equal(run({ ...env, OMP_NUM_THREADS: '1' }), 1);
    assert.equal(run({ ...env, OMP_NUM_THREADS: '1', SSL_ZOO_NUM_THREADS: '2' }), 2);
  });
});
