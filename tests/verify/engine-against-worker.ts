/**
 * Worker of tests/verify/engine-against.test.ts: runs `verify --engine-against` in this process
 * (one process per check: a WebGPU device that failed a step is not reused by later tests),
 * optionally with the negative control's wrong kernel registered on the webgpu backend first.
 *
 * argv[2]: a JSON {@link EngineWorkerSpec}. Prints the report, then one line
 * `@@result <EngineCheckResult as JSON, with originalRelu: whether webgpu's Relu kernel is
 * the one registered before the control>`, and exits.
 */
import 'reflect-metadata';
import { initEngine } from '../../src/core/engine.js';
import { tf } from '../../src/core/tf.js';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { formatEngineResult, runEngineAgainst, type EngineCheckOptions } from '../../src/verify/engine-against.js';

/** What the worker runs. */
export interface EngineWorkerSpec {
  config: TrainConfigInput;
  options: EngineCheckOptions;
  /** `leaky-relu`: the webgpu backend's Relu replaced by its LeakyRelu with alpha 0.05 (a wrong kernel). */
  control?: 'leaky-relu';
}

/**
 * Runs `check` with the webgpu Relu kernel replaced by a leaky one (5% of negative inputs
 * pass), then registers the original again; returns `check`'s result.
 */
async function withLeakyRelu<T>(check: () => Promise<T>): Promise<T> {
  const original = tf.getKernel('Relu', 'webgpu');
  const leaky = tf.getKernel('LeakyRelu', 'webgpu');
  if (!original || !leaky) throw new Error('the webgpu backend has no Relu or LeakyRelu kernel');
  tf.unregisterKernel('Relu', 'webgpu');
  tf.registerKernel({
    kernelName: 'Relu',
    backendName: 'webgpu',
    kernelFunc: ({ inputs, backend }) => leaky.kernelFunc({ inputs, backend, attrs: { alpha: 0.05 } }),
  });
  try {
    return await check();
  } finally {
    tf.unregisterKernel('Relu', 'webgpu');
    tf.registerKernel(original);
  }
}

const spec = JSON.parse(process.argv[2]!) as EngineWorkerSpec;
await initEngine('cpu');
// The control replaces a kernel of tfjs's webgpu backend: its package registers its kernels
// when imported (the engine starts in the run, and reuses this registry).
await import('@tensorflow/tfjs-backend-webgpu');
const reluBefore = tf.getKernel('Relu', 'webgpu')?.kernelFunc;
const config = buildConfig(spec.config);
const check = () => runEngineAgainst(config, spec.options);
const result = spec.control === 'leaky-relu' ? await withLeakyRelu(check) : await check();
const originalRelu = reluBefore !== undefined && tf.getKernel('Relu', 'webgpu')?.kernelFunc === reluBefore;
process.stdout.write(`${formatEngineResult(result, config.method)}\n@@result ${JSON.stringify({ ...result, originalRelu })}\n`);
// Dawn's device keeps the event loop alive: exit once the output is flushed.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
process.exit(0);
