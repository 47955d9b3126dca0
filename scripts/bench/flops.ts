/**
 * Counts the floating-point operations of the convolutions and matrix products a piece of
 * work runs, from the shapes of each kernel call (no device read): a multiply-add counts as
 * 2 FLOPs, as in PyTorch's `torch.utils.flop_counter` and the usual "TFLOP/s" figures.
 * Element-wise kernels (batch norm, activations, softmax, the optimizer's update) are not
 * counted: on these models they are a few percent of the arithmetic, and they are bound by
 * memory traffic, not by the FP32 peak.
 */
import { tf } from '../../src/core/tf.js';

type Info = { shape: number[] };

const prod = (xs: readonly number[]): number => xs.reduce((a, b) => a * b, 1);

/** FLOPs of one call of `kernel`, or 0 for kernels that are not convolutions or matrix products. */
export function kernelFlops(kernel: string, inputs: Record<string, Info | undefined>, attrs: Record<string, unknown>, output: Info): number {
  switch (kernel) {
    case 'Conv2D':
    case 'FusedConv2D': {
      const [kh, kw, ci] = inputs.filter!.shape; // filter [kh, kw, ci, co]
      return 2 * prod(output.shape) * kh * kw * ci;
    }
    case 'Conv2DBackpropInput': {
      const [kh, kw, ci] = inputs.filter!.shape;
      return 2 * prod(inputs.dy!.shape) * kh * kw * ci;
    }
    case 'Conv2DBackpropFilter': {
      const [kh, kw, ci] = attrs.filterShape as number[];
      return 2 * prod(inputs.dy!.shape) * kh * kw * ci;
    }
    case 'DepthwiseConv2dNative':
    case 'FusedDepthwiseConv2D': {
      const [kh, kw] = inputs.filter!.shape;
      return 2 * prod(output.shape) * kh * kw;
    }
    case 'BatchMatMul':
    case '_FusedMatMul': {
      const a = inputs.a!.shape;
      const k = attrs.transposeA ? a[a.length - 2] : a[a.length - 1];
      return 2 * prod(output.shape) * k;
    }
    default:
      return 0;
  }
}

/** A switchable FLOP counter wrapped around every kernel of `backendName`. */
export interface FlopCounter {
  /** Runs `f` with counting on; returns its result and the FLOPs it ran, by kernel. */
  count<T>(f: () => T): { result: T; flops: number; byKernel: Record<string, number> };
}

export function installFlopCounter(backendName: string): FlopCounter {
  let on = false;
  let byKernel: Record<string, number> = {};
  for (const config of tf.getKernelsForBackend(backendName)) {
    const inner = config.kernelFunc;
    const counted: typeof inner = (args) => {
      const out = inner(args);
      if (on) {
        const first = (Array.isArray(out) ? out[0] : out) as Info;
        const f = kernelFlops(config.kernelName, args.inputs as Record<string, Info>, (args.attrs ?? {}) as Record<string, unknown>, first);
        if (f > 0) byKernel[config.kernelName] = (byKernel[config.kernelName] ?? 0) + f;
      }
      return out;
    };
    (config as { kernelFunc: typeof inner }).kernelFunc = counted;
  }
  return {
    count<T>(f: () => T) {
      byKernel = {};
      on = true;
      try {
        const result = f();
        return { result, flops: Object.values(byKernel).reduce((a, b) => a + b, 0), byKernel: { ...byKernel } };
      } finally {
        on = false;
      }
    },
  };
}
