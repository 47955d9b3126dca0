/**
 * Worker of tests/verify/engine-against.test.ts: runs `verify --engine-against` in this process
 * (one process per check: a WebGPU device that failed a step is not reused by later tests),
 * optionally with a negative control's kernel registered on the webgpu backend first.
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
  /**
   * The webgpu backend's Relu replaced: `leaky-relu` by its LeakyRelu with alpha 0.05 (a wrong
   * kernel); `sync-read` by one that first reads its input synchronously (`readSync`), then runs
   * the original (right values, a step that stalls a GPU's queue).
   */
  control?: 'leaky-relu' | 'sync-read';
}

/**
 * Runs `check` with the webgpu Relu kernel replaced as `control` says, then registers the
 * original again; returns `check`'s result.
 */
async function withRelu<T>(control: NonNullable<EngineWorkerSpec['control']>, check: () => Promise<T>): Promise<T> {
  const original = tf.getKernel('Relu', 'webgpu');
  const leaky = tf.getKernel('LeakyRelu', 'webgpu');
  if (!original || !leaky) throw new Error('the webgpu backend has no Relu or LeakyRelu kernel');
  tf.unregisterKernel('Relu', 'webgpu');
  tf.registerKernel({
    kernelName: 'Relu',
    backendName: 'webgpu',
    kernelFunc: (args) => {
      if (control === 'leaky-relu') return leaky.kernelFunc({ ...args, attrs: { alpha: 0.05 } });
      (args.backend as tf.KernelBackend).readSync((args.inputs as { x: tf.TensorInfo }).x.dataId);
      return original.kernelFunc(args);
    },
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
const result = spec.control ? await withRelu(spec.control, check) : await check();
const originalRelu = reluBefore !== undefined && tf.getKernel('Relu', 'webgpu')?.kernelFunc === reluBefore;
process.stdout.write(`${formatEngineResult(result, config.method)}\n@@result ${JSON.stringify({ ...result, originalRelu })}\n`);
// Dawn's device keeps the event loop alive: exit once the output is flushed.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
process.exit(0);
