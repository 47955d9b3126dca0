/**
 * ssl-zoo's kernels for tfjs's `webgpu` backend (the sibling of the native cpu kernels):
 * the fused training batch norm, the Cholesky factor / triangular solve and the nuclear norm in WGSL, tfjs's matmul with its split-K bug corrected
 * (see ./matmul.ts), tfjs's AddN for more inputs than one shader may bind (./add-n.ts), and `Sin`/`Cos` to float32
 * accuracy (./trig.ts). Each is tested against the pure-JS reference in tests/kernels/webgpu-*.
 */
import { registerBatchNormGradient } from '../batch-norm.js';
import { tf } from '../../tf.js';
import { addNWebGpuKernels } from './add-n.js';
import { batchNormWebGpuKernels } from './batch-norm.js';
import { linalgWebGpuKernels } from './linalg.js';
import { matMulWebGpuKernels } from './matmul.js';
import { nuclearNormWebGpuKernels } from './nuclear-norm.js';
import { trigWebGpuKernels } from './trig.js';

/**
 * Registers the kernels for the `webgpu` backend, replacing whatever is registered under
 * their names (a deliberately wrong kernel a test registered with `tf.registerKernel`, or
 * a previous install): idempotent. Call after the backend is ready.
 */
export function installWebGpuKernels(): void {
  for (const config of [
    ...batchNormWebGpuKernels,
    ...matMulWebGpuKernels(),
    ...linalgWebGpuKernels,
    ...nuclearNormWebGpuKernels,
    ...addNWebGpuKernels(),
    ...trigWebGpuKernels,
  ]) {
    if (tf.getKernel(config.kernelName, 'webgpu') != null) tf.unregisterKernel(config.kernelName, 'webgpu');
    tf.registerKernel(config);
  }
  registerBatchNormGradient();
}
