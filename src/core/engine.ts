import { createRequire } from 'node:module';
import { BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './engine-choices.js';
import { invalidValue, UserError } from './errors.js';
import { tuneGarbageCollector } from './gc-tuning.js';
import { tf } from './tf.js';
import type { GpuSelection } from './webgpu.js';

export { BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './engine-choices.js';

const require = createRequire(import.meta.url);
const TENSORFLOW_PACKAGES = ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node'];

/** Hooks that replace hot cpu kernels with native ones; installed by the native kernel module. */
const cpuKernelInstallers: Array<() => boolean> = [];

/**
 * Registers a function that overrides cpu-backend kernels with native implementations and
 * returns whether it did (false when its addon is not built). Called by `cpu` at init.
 */
export function registerCpuKernelInstaller(install: () => boolean): void {
  cpuKernelInstallers.push(install);
}

function loadTensorflowPackage(): string | undefined {
  for (const name of TENSORFLOW_PACKAGES) {
    try {
      require(name);
      return name;
    } catch {
      // not installed: try the next one
    }
  }
  return undefined;
}

let current: EngineInfo | undefined;

/**
 * Selects the tensor backend. `tensorflow` loads `@tensorflow/tfjs-node-gpu`, then
 * `@tensorflow/tfjs-node`, and fails with a clear message when neither is installed;
 * `auto` uses them when present, else `cpu`; `cpu` is tfjs's cpu backend with native
 * kernels where built; `cpu-js` is the pure-JS cpu backend (the reference); `webgpu` is
 * tfjs's WebGPU backend on the adapter `gpu` selects (see `initWebGpu`), with ssl-zoo's
 * WGSL kernels registered over tfjs's where they were wrong or slow.
 */
export async function initEngine(requested: BackendChoice = 'auto', gpu: GpuSelection = { allowSoftware: true }): Promise<EngineInfo> {
  if (!BACKEND_CHOICES.includes(requested)) {
    throw invalidValue('backend', requested, BACKEND_CHOICES.join(' | '));
  }
  if (requested === 'webgpu') {
    const { initWebGpu } = await import('./webgpu.js');
    const info = await initWebGpu(gpu);
    await tf.setBackend('webgpu');
    await tf.ready();
    (await import('./kernels/webgpu/index.js')).installWebGpuKernels();
    current = { backend: 'webgpu', requested, nativeKernels: false, gpu: info };
    return current;
  }
  let tensorflowPackage: string | undefined;
  if (requested === 'tensorflow' || requested === 'auto') {
    tensorflowPackage = loadTensorflowPackage();
    if (!tensorflowPackage && requested === 'tensorflow') {
      throw new UserError(
        'backend: "tensorflow" needs @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node, and neither is installed; ' +
          'install one (npm install @tensorflow/tfjs-node) or use --backend cpu',
      );
    }
  }
  const backend = tensorflowPackage ? 'tensorflow' : 'cpu';
  await tf.setBackend(backend);
  await tf.ready();
  // tfjs-backend-cpu greets Node users once with an advert for tfjs-node; keep logs clean.
  (tf.backend() as unknown as { firstUse?: boolean }).firstUse = false;
  let nativeKernels = false;
  if (backend === 'cpu') {
    // Imported here rather than at the top: native-kernels.ts imports this module (to call
    // registerCpuKernelInstaller), and a static import would run it before this module's
    // installer list exists. Also lets `cpu-js` put the JS kernels back after `cpu`.
    const { restoreJsKernels } = await import('./native-kernels.js');
    if (requested === 'cpu-js') restoreJsKernels();
    else for (const install of cpuKernelInstallers) nativeKernels = install() || nativeKernels;
    if (nativeKernels) tuneGarbageCollector();
  }
  current = { backend, requested, tensorflowPackage, nativeKernels };
  return current;
}

/** The engine selected by the last {@link initEngine}, or undefined before it. */
export function engineInfo(): EngineInfo | undefined {
  return current;
}
