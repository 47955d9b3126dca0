/**
 * `BatchMatMul` and `_FusedMatMul` on the webgpu backend, corrected.
 *
 * The bug (tfjs-backend-webgpu 4.22.0, `batchMatMulImpl` + `MatMulSplitKProgram`): a
 * product `[M, K] x op(B)` with batch 1, `K >= 2000` and few output tiles (at most
 * `thresholdToIncreaseWorkgroups`, 8 on most adapters, 32x32 tiles, and more than 128
 * outputs) runs the split-K program. That program reads `B` four values at a time
 * (`outputComponent = 4`) when `N % 4 == 0` and `K % 4 == 0` (or `M % 4 == 0` with
 * `transposeA`), but unlike `MatMulPackedProgram` (whose vec4 test has `&& !transposeB`)
 * it does not exclude `transposeB`: with `B` stored `[N, K]`, its `mm_readB(k, n)` returns
 * `B[n, k..k+3]` (four consecutive *inner* values of one output column) where the vec4 tile
 * needs `B[n..n+3, k]` (one inner value of four columns). The sums mix the wrong products:
 * e.g. `dy [16, 2048] x W^T` with `W [128, 2048]`, the input gradient of a `Linear(128,
 * 2048)`, is off by 135 % relative (SimCLR's projector, so every backbone gradient of a
 * SimCLR step with a 128-wide backbone is wrong while the loss is right).
 *
 * The correction: when the split-K program can be chosen (`transposeB`, batch 1,
 * `K >= 2000`), `B` is transposed explicitly (tfjs's `Transpose` kernel) and the original
 * kernel runs with `transposeB = false`, which its split-K program reads correctly. Every
 * other call goes to tfjs's kernel unchanged.
 */
import { tf } from '../../tf.js';
import { runWebGpuKernel, type WebGpuKernelArgs } from './program.js';

type TensorInfo = tf.TensorInfo;

/** The inner size from which tfjs 4.22 may choose its split-K program (`innerShapeB >= 2000`). */
export const SPLIT_K_MIN_INNER = 2000;

/** Kernels wrapped here; tfjs's own functions are kept from the first install. */
const WRAPPED = ['BatchMatMul', '_FusedMatMul'];
const tfjsKernels = new Map<string, tf.KernelFunc>();

/** Whether tfjs's split-K program may run `a x b^T` (the case it computes wrong). */
export function splitKTransposedB(a: TensorInfo, b: TensorInfo, transposeA: boolean, transposeB: boolean): boolean {
  if (!transposeB) return false;
  const batch = (s: number[]) => s.slice(0, -2).reduce((x, y) => x * y, 1);
  const inner = transposeA ? a.shape[a.shape.length - 2] : a.shape[a.shape.length - 1];
  return Math.max(batch(a.shape), batch(b.shape)) === 1 && inner >= SPLIT_K_MIN_INNER;
}

function corrected(original: tf.KernelFunc): tf.KernelFunc {
  return ((args: WebGpuKernelArgs) => {
    const { a, b } = args.inputs as { a: TensorInfo; b: TensorInfo };
    const transposeA = args.attrs?.transposeA === true;
    if (!splitKTransposedB(a, b, transposeA, args.attrs?.transposeB === true)) return original(args as never);
    const perm = b.shape.map((_, i) => i);
    [perm[perm.length - 2], perm[perm.length - 1]] = [perm[perm.length - 1], perm[perm.length - 2]];
    const bT = runWebGpuKernel('Transpose', { inputs: { x: b }, backend: args.backend, attrs: { perm } });
    try {
      return original({ ...args, inputs: { ...args.inputs, b: bT }, attrs: { ...args.attrs, transposeB: false } } as never);
    } finally {
      args.backend.disposeData(bT.dataId);
    }
  }) as unknown as tf.KernelFunc;
}

/** The corrected matmul kernels (wrapping tfjs's, looked up on the first call). */
export function matMulWebGpuKernels(): tf.KernelConfig[] {
  return WRAPPED.map((kernelName) => {
    if (!tfjsKernels.has(kernelName)) {
      const kernel = tf.getKernel(kernelName, 'webgpu');
      if (kernel == null) throw new Error(`the webgpu backend has no ${kernelName} kernel to correct`);
      tfjsKernels.set(kernelName, kernel.kernelFunc);
    }
    return { kernelName, backendName: 'webgpu', kernelFunc: corrected(tfjsKernels.get(kernelName)!) };
  });
}
