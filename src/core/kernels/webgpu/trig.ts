/**
 * `Sin` and `Cos` on the webgpu backend to float32 accuracy.
 *
 * tfjs's webgpu kernels call WGSL's `sin`/`cos`, whose accuracy the WebGPU spec leaves at an
 * absolute error of 2^-11 on [-π, π] (and unbounded outside): SwiftShader's differ from
 * float32 by ~1e-4 relative, and LeJEPA's SIGReg (characteristic functions `cos(t·x)`,
 * `sin(t·x)`) missed the CPU engine's loss by 1.25e-4. These reduce the argument by
 * Cody-Waite to [-π/4, π/4] around the nearest multiple of π/2 (three-part π/2, exact for
 * |x| up to ~1e4) and evaluate Cephes' `sinf`/`cosf` minimax polynomials there: ~1 ulp.
 */
import { tf } from '../../tf.js';
import { ELEMENTWISE_WORKGROUP, elementwiseDispatch, type WebGpuKernelArgs, type WgslProgram } from './program.js';

type TensorInfo = tf.TensorInfo;

/** WGSL: `sin(x)` (`cosine` false) or `cos(x)` from the reduced argument and its quadrant. */
const TRIG_WGSL = `
  fn sslZooTrig(x : f32, cosine : bool) -> f32 {
    let k = round(x * 0.636619772367581343);
    let r = ((x - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
    let z = r * r;
    let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    let c = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    let q = (i32(k) + select(0, 1, cosine)) & 3;
    if (q == 0) { return s; }
    if (q == 1) { return c; }
    if (q == 2) { return -s; }
    return -c;
  }`;

function trigProgram(cosine: boolean, size: number): WgslProgram {
  return {
    variableNames: ['x'],
    outputShape: [size],
    shaderKey: `sslZooTrig_${cosine}`,
    dispatchLayout: { x: [0] },
    dispatch: elementwiseDispatch(size),
    workgroupSize: [ELEMENTWISE_WORKGROUP, 1, 1],
    size: true,
    getUserCode: () => `
      ${TRIG_WGSL}
      fn main(index : i32) {
        if (index < uniforms.size) {
          result[index] = sslZooTrig(x[index], ${cosine});
        }
      }`,
  };
}

function trigKernel(kernelName: 'Sin' | 'Cos'): tf.KernelConfig {
  const kernelFunc = ((args: WebGpuKernelArgs) => {
    const x = args.inputs.x as TensorInfo;
    const size = x.shape.reduce((a, b) => a * b, 1);
    const out = args.backend.runWebGPUProgram(trigProgram(kernelName === 'Cos', size), [x], 'float32');
    return { ...out, shape: x.shape.slice() };
  }) as unknown as tf.KernelFunc;
  return { kernelName, backendName: 'webgpu', kernelFunc };
}

/** The accurate `Sin` and `Cos` kernels. */
export const trigWebGpuKernels: tf.KernelConfig[] = [trigKernel('Sin'), trigKernel('Cos')];
