/**
 * Native Conv2D, FusedConv2D (bias + activation fused), Conv2DBackpropInput and
 * Conv2DBackpropFilter: oneDNN direct convolutions on tfjs's plain NHWC / HWIO buffers.
 * NCHW data and dilated gradients are left to the JS kernels.
 */
import { tf } from '../tf.js';
import { allPositiveInts, f32, fusedEpilogue, NO_EPILOGUE, outputArray, sizeOf, type DnnlAddon, type KernelArgs, type NativeKernel } from './common.js';

type Conv2DInfo = tf.backend_util.Conv2DInfo;

/**
 * The addon's 17 convolution parameters for a tfjs conv info, or null when oneDNN cannot
 * express it. tfjs pads are kept at the top/left; the bottom/right pad is re-derived from the
 * output size (floor((in + pt + pb - effK) / s) + 1 == out is what oneDNN checks). Windows
 * are anchored at the top/left pad, so this gives the same values as tfjs.
 */
export function convParams(info: Conv2DInfo): Int32Array | null {
  if (info.dataFormat !== 'channelsLast') return null;
  const { batchSize, inHeight, inWidth, inChannels, outHeight, outWidth, outChannels } = info;
  const { filterHeight, filterWidth, strideHeight, strideWidth, dilationHeight, dilationWidth } = info;
  const dims = [
    batchSize,
    inHeight,
    inWidth,
    inChannels,
    outHeight,
    outWidth,
    outChannels,
    filterHeight,
    filterWidth,
    strideHeight,
    strideWidth,
    dilationHeight,
    dilationWidth,
  ];
  if (!allPositiveInts(dims)) return null;
  const pt = info.padInfo.top;
  const pl = info.padInfo.left;
  if (!Number.isInteger(pt) || !Number.isInteger(pl) || pt < 0 || pl < 0) return null;
  const pb = endPad(inHeight, outHeight, info.effectiveFilterHeight, strideHeight, pt);
  const pr = endPad(inWidth, outWidth, info.effectiveFilterWidth, strideWidth, pl);
  if (pb == null || pr == null) return null;
  return Int32Array.from([...dims, pt, pl, pb, pr]);
}

function endPad(size: number, out: number, effFilter: number, stride: number, start: number): number | null {
  const pad = Math.max(0, (out - 1) * stride + effFilter - size - start);
  return Math.floor((size + start + pad - effFilter) / stride) + 1 === out ? pad : null;
}

function dataFormat(attrs: Record<string, unknown>): 'channelsLast' | null {
  const fmt = attrs.dataFormat ?? 'NHWC';
  return fmt === 'NHWC' || fmt === 'channelsLast' ? 'channelsLast' : null;
}

function convInfo(xShape: number[], filterShape: number[], attrs: Record<string, unknown>, dilations: unknown): Conv2DInfo | null {
  if (xShape.length !== 4 || filterShape.length !== 4 || dataFormat(attrs) == null) return null;
  try {
    return tf.backend_util.computeConv2DInfo(
      xShape as [number, number, number, number],
      filterShape as [number, number, number, number],
      attrs.strides as [number, number] | number,
      (dilations ?? 1) as [number, number] | number,
      attrs.pad as 'valid' | 'same' | number,
      attrs.dimRoundingMode as 'floor' | 'round' | 'ceil' | undefined,
      false,
      'channelsLast',
    );
  } catch {
    return null; // let the JS kernel report the problem
  }
}

function conv2d(args: KernelArgs, addon: DnnlAddon, fused: boolean): tf.TensorInfo | null {
  const { inputs, backend, attrs = {} } = args;
  const { x, filter } = inputs;
  if (x == null || filter == null) return null;
  const xVals = f32(backend, x);
  const wVals = f32(backend, filter);
  if (xVals == null || wVals == null) return null;
  const info = convInfo(x.shape, filter.shape, attrs, attrs.dilations);
  if (info == null || filter.shape[2] !== x.shape[3]) return null;
  const params = convParams(info);
  if (params == null) return null;
  const epilogue = fused ? fusedEpilogue(args, 4, info.outChannels) : NO_EPILOGUE;
  if (epilogue == null) return null;
  const out = outputArray(sizeOf(info.outShape));
  if (!addon.conv2d(xVals, wVals, epilogue.bias, out, params, epilogue.activation, epilogue.alpha)) return null;
  return backend.makeTensorInfo(info.outShape, 'float32', out);
}

function conv2dBackpropInput(args: KernelArgs, addon: DnnlAddon): tf.TensorInfo | null {
  const { inputs, backend, attrs = {} } = args;
  const { dy, filter } = inputs;
  if (dy == null || filter == null) return null;
  const dyVals = f32(backend, dy);
  const wVals = f32(backend, filter);
  if (dyVals == null || wVals == null) return null;
  const inputShape = attrs.inputShape as number[] | undefined;
  if (!Array.isArray(inputShape)) return null;
  const info = convInfo(inputShape, filter.shape, attrs, 1);
  if (info == null || !sameShape(info.outShape, dy.shape) || filter.shape[2] !== inputShape[3]) return null;
  const params = convParams(info);
  if (params == null) return null;
  const out = outputArray(sizeOf(inputShape));
  if (!addon.conv2dBackpropInput(dyVals, wVals, out, params)) return null;
  return backend.makeTensorInfo(inputShape.slice(), 'float32', out);
}

function conv2dBackpropFilter(args: KernelArgs, addon: DnnlAddon): tf.TensorInfo | null {
  const { inputs, backend, attrs = {} } = args;
  const { x, dy } = inputs;
  if (x == null || dy == null) return null;
  const xVals = f32(backend, x);
  const dyVals = f32(backend, dy);
  if (xVals == null || dyVals == null) return null;
  const filterShape = attrs.filterShape as number[] | undefined;
  if (!Array.isArray(filterShape)) return null;
  const info = convInfo(x.shape, filterShape, attrs, 1);
  if (info == null || !sameShape(info.outShape, dy.shape) || filterShape[2] !== x.shape[3]) return null;
  const params = convParams(info);
  if (params == null) return null;
  const out = outputArray(sizeOf(filterShape));
  if (!addon.conv2dBackpropFilter(xVals, dyVals, out, params)) return null;
  return backend.makeTensorInfo(filterShape.slice(), 'float32', out);
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export const convKernels: NativeKernel[] = [
  { kernelName: 'Conv2D', func: (args, addon) => conv2d(args, addon, false) },
  { kernelName: 'FusedConv2D', func: (args, addon) => conv2d(args, addon, true) },
  { kernelName: 'Conv2DBackpropInput', func: conv2dBackpropInput },
  { kernelName: 'Conv2DBackpropFilter', func: conv2dBackpropFilter },
];
