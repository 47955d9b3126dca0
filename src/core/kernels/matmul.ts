/** Native BatchMatMul and _FusedMatMul (oneDNN matmul primitive, bias and activation fused). */
import { tf } from '../tf.js';
import { f32, fusedEpilogue, NO_EPILOGUE, outputArray, sizeOf, type DnnlAddon, type KernelArgs, type NativeKernel } from './common.js';

function matmul(args: KernelArgs, addon: DnnlAddon, fused: boolean): tf.TensorInfo | null {
  const { inputs, backend, attrs = {} } = args;
  const { a, b } = inputs;
  if (a == null || b == null || a.shape.length < 2 || b.shape.length < 2) return null;
  const aVals = f32(backend, a);
  const bVals = f32(backend, b);
  if (aVals == null || bVals == null) return null;
  const transposeA = attrs.transposeA === true;
  const transposeB = attrs.transposeB === true;
  const ar = a.shape.length;
  const br = b.shape.length;
  const k = transposeA ? a.shape[ar - 2] : a.shape[ar - 1];
  const kB = transposeB ? b.shape[br - 1] : b.shape[br - 2];
  const m = transposeA ? a.shape[ar - 1] : a.shape[ar - 2];
  const n = transposeB ? b.shape[br - 2] : b.shape[br - 1];
  if (k !== kB) return null; // the JS kernel raises the proper error
  const outerA = a.shape.slice(0, -2);
  const outerB = b.shape.slice(0, -2);
  let outer: number[];
  try {
    outer = tf.broadcast_util.assertAndGetBroadcastShape(outerA, outerB);
  } catch {
    return null;
  }
  const batchA = sizeOf(outerA);
  const batchB = sizeOf(outerB);
  const batch = sizeOf(outer);
  if ((batchA !== batch && batchA !== 1) || (batchB !== batch && batchB !== 1)) return null;
  if (m === 0 || n === 0 || k === 0 || batch === 0) return null;

  const outShape = [...outer, m, n];
  const epilogue = fused ? fusedEpilogue(args, outShape.length, n) : NO_EPILOGUE;
  if (epilogue == null) return null;
  const out = outputArray(batch * m * n);
  if (!addon.matmul(aVals, bVals, epilogue.bias, out, batchA, batchB, m, n, k, transposeA, transposeB, epilogue.activation, epilogue.alpha)) {
    return null;
  }
  return backend.makeTensorInfo(outShape, 'float32', out);
}

export const matmulKernels: NativeKernel[] = [
  { kernelName: 'BatchMatMul', func: (args, addon) => matmul(args, addon, false) },
  { kernelName: '_FusedMatMul', func: (args, addon) => matmul(args, addon, true) },
];
