/**
 * `AddN` on the webgpu backend for any number of inputs.
 *
 * tfjs-backend-webgpu 4.22.0's `AddNPackedProgram` binds every input and the output as
 * storage buffers of one shader, so `tf.addN` of 8 or more tensors needs 9 or more storage
 * buffers per shader stage: more than WebGPU's default limit of 8, which tfjs requests, and
 * the pipeline is invalid (every later command fails; MMCR's mean of 8 views hit it). Here
 * the inputs are summed in groups of at most {@link ADD_N_MAX_INPUTS} by tfjs's kernel, then
 * the partial sums likewise; fewer inputs go to tfjs's kernel unchanged.
 */
import { tf } from '../../tf.js';
import type { WebGpuKernelArgs } from './program.js';

type TensorInfo = tf.TensorInfo;

/** Inputs one tfjs AddN program may take: 8 storage buffers (WebGPU's default limit) less the output. */
export const ADD_N_MAX_INPUTS = 7;

let tfjsAddN: tf.KernelFunc | undefined;

function groupedAddN(original: tf.KernelFunc): tf.KernelFunc {
  const sum = (args: WebGpuKernelArgs, inputs: TensorInfo[]): TensorInfo => original({ ...args, inputs } as never) as TensorInfo;
  return ((args: WebGpuKernelArgs) => {
    let inputs = args.inputs as unknown as TensorInfo[];
    if (inputs.length <= ADD_N_MAX_INPUTS) return original(args as never);
    const partials: TensorInfo[] = [];
    try {
      while (inputs.length > ADD_N_MAX_INPUTS) {
        const next: TensorInfo[] = [];
        for (let i = 0; i < inputs.length; i += ADD_N_MAX_INPUTS) {
          const group = inputs.slice(i, i + ADD_N_MAX_INPUTS);
          const partial = group.length === 1 ? group[0]! : sum(args, group);
          if (group.length > 1) partials.push(partial);
          next.push(partial);
        }
        inputs = next;
      }
      return sum(args, inputs);
    } finally {
      for (const p of partials) args.backend.disposeData(p.dataId);
    }
  }) as unknown as tf.KernelFunc;
}

/** The grouped AddN kernel (wrapping tfjs's, looked up on the first call). */
export function addNWebGpuKernels(): tf.KernelConfig[] {
  if (!tfjsAddN) {
    const kernel = tf.getKernel('AddN', 'webgpu');
    if (kernel == null) throw new Error('the webgpu backend has no AddN kernel to wrap');
    tfjsAddN = kernel.kernelFunc;
  }
  return [{ kernelName: 'AddN', backendName: 'webgpu', kernelFunc: groupedAddN(tfjsAddN) }];
}
