/**
 * The engine of the browser build, in place of ./engine.ts (which loads the native oneDNN
 * kernels and `@tensorflow/tfjs-node`, neither of which exists in a page): tfjs's WebGPU
 * backend on the page's `navigator.gpu`, or tfjs's pure-JS cpu backend.
 */
import { BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './engine-choices.js';
import { invalidValue, UserError } from './errors.js';
import { tf } from './tf.js';
import type { GpuSelection } from './webgpu.js';

export { BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './engine-choices.js';

const SOFTWARE = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render|warp/i;

let current: EngineInfo | undefined;

/** The page's WebGPU adapter, or undefined when the browser offers none (no API, not a secure context, no adapter). */
async function pageAdapter(): Promise<GPUAdapter | undefined> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  return (await gpu?.requestAdapter()) ?? undefined;
}

/**
 * Selects the tensor backend in a page. `webgpu`: tfjs's WebGPU backend with ssl-zoo's WGSL
 * kernels, failing with a clear message when the page has no adapter (or only a software one
 * and `gpu.allowSoftware` is false); `auto`: `webgpu` when the page has an adapter, else
 * `cpu`; `cpu` and `cpu-js`: tfjs's pure-JS cpu backend (there are no native kernels in a
 * page); `tensorflow` is Node-only and refused.
 */
export async function initEngine(requested: BackendChoice = 'auto', gpu: GpuSelection = { allowSoftware: true }): Promise<EngineInfo> {
  if (!BACKEND_CHOICES.includes(requested)) {
    throw invalidValue('backend', requested, BACKEND_CHOICES.join(' | '));
  }
  if (requested === 'tensorflow') {
    throw new UserError('backend: "tensorflow" (@tensorflow/tfjs-node) runs only in Node; in the browser use webgpu, cpu or auto');
  }
  if (requested === 'webgpu' || requested === 'auto') {
    const adapter = await pageAdapter();
    const name = adapter ? [adapter.info.vendor, adapter.info.architecture, adapter.info.description].filter(Boolean).join(' ') : '';
    const software = SOFTWARE.test(name);
    if (adapter && (gpu.allowSoftware || !software)) {
      await import('@tensorflow/tfjs-backend-webgpu');
      await tf.setBackend('webgpu');
      await tf.ready();
      (await import('./kernels/webgpu/index.js')).installWebGpuKernels();
      const entry = { name, api: 'webgpu', software };
      current = { backend: 'webgpu', requested, nativeKernels: false, gpu: { adapter: entry, adapters: [entry] } };
      return current;
    }
    if (requested === 'webgpu') {
      throw new UserError(
        adapter
          ? `${gpu.flag ?? 'backend: "webgpu"'}: the page's only WebGPU adapter is a software one (${name}); allow software adapters or use cpu`
          : `${gpu.flag ?? 'backend: "webgpu"'}: this page has no WebGPU adapter (no navigator.gpu, not a secure context, or no GPU); use cpu`,
      );
    }
  }
  await tf.setBackend('cpu');
  await tf.ready();
  current = { backend: 'cpu', requested, nativeKernels: false };
  return current;
}

/** The engine selected by the last {@link initEngine}, or undefined before it. */
export function engineInfo(): EngineInfo | undefined {
  return current;
}
