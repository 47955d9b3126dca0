/**
 * What ssl-zoo's WGSL kernels use of tfjs-backend-webgpu: its program contract (the
 * package exports no program types from its Node entry, so the slice we rely on is
 * declared here) and the backend's `runWebGPUProgram`.
 *
 * A program's `getUserCode()` is WGSL appended to a header tfjs generates: one storage
 * buffer per name in `variableNames` (`array<f32>` named as the variable), the output
 * buffer `result`, a `uniforms` struct (each input's shape, `outShape`, `size` when
 * `size` is set, then the program's own `uniforms`, in the order their values are passed)
 * and `fn main(index : i32)`, called once per invocation with the global index when
 * `dispatchLayout` is flat (`{ x: [...] }`); `localId`, `workgroupId` are globals.
 */
import { tf } from '../../tf.js';

type TensorInfo = tf.TensorInfo;

/** A tfjs-backend-webgpu program (the fields its `runWebGPUProgram` reads). */
export interface WgslProgram {
  variableNames: string[];
  outputShape: number[];
  shaderKey: string;
  dispatchLayout: { x: number[]; y?: number[]; z?: number[] };
  dispatch: [number, number, number];
  workgroupSize: [number, number, number];
  /** Declares `uniforms.size` (the output's element count). */
  size?: boolean;
  /** Extra uniform fields, e.g. `'channels : i32, eps : f32,'`. */
  uniforms?: string;
  getUserCode(): string;
}

/** A uniform value passed to `runWebGPUProgram`, in the order of `WgslProgram.uniforms`. */
export interface UniformValue {
  type: 'int32' | 'float32';
  data: number[];
}

/** The slice of tfjs-backend-webgpu's `WebGPUBackend` the kernels use. */
export interface WebGpuBackend {
  runWebGPUProgram(program: WgslProgram, inputs: TensorInfo[], outputDtype: tf.DataType, uniforms?: UniformValue[]): TensorInfo;
  disposeData(dataId: object): boolean;
}

/** What tfjs passes to a kernel function on the webgpu backend. */
export interface WebGpuKernelArgs {
  inputs: Record<string, TensorInfo | undefined>;
  backend: WebGpuBackend;
  attrs?: Record<string, unknown>;
}

/** Elements per workgroup of the element-wise programs. */
export const ELEMENTWISE_WORKGROUP = 64;

/** Invocations per workgroup of the per-channel reductions (one workgroup per channel). */
export const REDUCE_WORKGROUP = 64;

/** Workgroups covering `n` elements of an element-wise program (flat layout). */
export function elementwiseDispatch(n: number): [number, number, number] {
  return [Math.ceil(n / ELEMENTWISE_WORKGROUP), 1, 1];
}

/** Runs another kernel registered for the webgpu backend (e.g. tfjs's `Slice`) on tensor infos. */
export function runWebGpuKernel(name: string, args: WebGpuKernelArgs): TensorInfo {
  const kernel = tf.getKernel(name, 'webgpu');
  if (kernel == null) throw new Error(`the webgpu backend has no ${name} kernel`);
  return kernel.kernelFunc(args as unknown as Parameters<tf.KernelFunc>[0]) as TensorInfo;
}
