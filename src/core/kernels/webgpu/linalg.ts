/**
 * The `webgpu` kernels of src/core/linalg.ts: the Cholesky factor (`SslZooCholesky`) and the
 * lower-triangular solve (`SslZooSolveLowerTriangular`, with its `transpose` attribute), as
 * WGSL programs in float32, one workgroup per matrix of the batch (K up to a few hundred).
 * The `cpu` kernels (float64 JS loops, src/core/linalg.ts) are their reference.
 *
 * Where the CPU kernels throw (a matrix that is not positive definite, a zero pivot), these
 * give NaN (or Inf): throwing would need a read of the device.
 */
import { CHOLESKY, SOLVE_LOWER_TRIANGULAR } from '../../linalg.js';
import { tf } from '../../tf.js';
import type { WebGpuKernelArgs, WgslProgram } from './program.js';

/** Threads per workgroup (one workgroup per matrix). */
const THREADS = 64;

/** The most matrices in a batch: one workgroup each, along x only (WebGPU's default limit per dimension). */
const MAX_BATCH = 65535;

/** Refuses a batch of more matrices than {@link MAX_BATCH}. */
function checkBatch(kernel: string, batch: number): void {
  if (batch > MAX_BATCH) throw new Error(`${kernel} (webgpu): at most ${MAX_BATCH} matrices per batch, got ${batch}`);
}

/** A program over a batch of matrices, output `[S, K, M]`: one workgroup of {@link THREADS} per matrix. */
abstract class PerMatrixProgram implements WgslProgram {
  readonly dispatchLayout = { x: [0, 1, 2] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [THREADS, 1, 1];
  readonly shaderKey: string;

  constructor(
    readonly variableNames: string[],
    readonly outputShape: [number, number, number],
    key: string,
  ) {
    this.dispatch = [outputShape[0], 1, 1];
    this.shaderKey = `${key}_${outputShape.join('_')}`;
  }

  abstract getUserCode(): string;
}

/**
 * `L` `[S, K, K]` with `A = L Lᵀ` from `a` `[S, K, K]` (lower triangle read): left-looking,
 * column j after column j − 1; the threads share the rows of each column.
 */
class CholeskyProgram extends PerMatrixProgram {
  constructor(
    batch: number,
    private readonly k: number,
  ) {
    super(['a'], [batch, k, k], 'sslZooCholesky');
  }

  getUserCode(): string {
    const k = this.k;
    return `
      fn main(index : i32) {
        let s = i32(workgroupId.x);
        let t = i32(localId.x);
        let base = s * ${k * k};
        for (var e = t; e < ${k * k}; e = e + ${THREADS}) {
          let i = e / ${k};
          result[base + e] = select(0.0, a[base + e], e - i * ${k} <= i);
        }
        storageBarrier();
        for (var j = 0; j < ${k}; j = j + 1) {
          for (var i = j + t; i < ${k}; i = i + ${THREADS}) {
            var sum = result[base + i * ${k} + j];
            for (var c = 0; c < j; c = c + 1) {
              sum = sum - result[base + i * ${k} + c] * result[base + j * ${k} + c];
            }
            result[base + i * ${k} + j] = sum;
          }
          storageBarrier();
          let d = result[base + j * ${k} + j];
          storageBarrier();
          let pivot = select(uniforms.NAN, sqrt(d), d > 0.0);
          for (var i = j + t; i < ${k}; i = i + ${THREADS}) {
            let at = base + i * ${k} + j;
            result[at] = select(result[at] / pivot, pivot, i == j);
          }
          storageBarrier();
        }
      }
    `;
  }
}

/**
 * `X` `[S, K, M]` with `L X = B` (forward substitution) or, with `transpose`, `Lᵀ X = B`
 * (back substitution), from `l` `[S, K, K]` (lower triangle read) and `b` `[S, K, M]`; each
 * thread solves its columns of B on its own.
 */
class SolveLowerTriangularProgram extends PerMatrixProgram {
  constructor(
    batch: number,
    private readonly k: number,
    private readonly m: number,
    private readonly transpose: boolean,
  ) {
    super(['l', 'b'], [batch, k, m], `sslZooSolveLowerTriangular_${transpose}`);
  }

  getUserCode(): string {
    const { k, m } = this;
    // Row i's equation: entries j < i of row i of L (forward), or j > i of column i of L (Lᵀ).
    const [rows, others, entry] = this.transpose
      ? [`var i = ${k - 1}; i >= 0; i = i - 1`, `var j = i + 1; j < ${k}; j = j + 1`, `l[lb + j * ${k} + i]`]
      : [`var i = 0; i < ${k}; i = i + 1`, 'var j = 0; j < i; j = j + 1', `l[lb + i * ${k} + j]`];
    return `
      fn main(index : i32) {
        let s = i32(workgroupId.x);
        let lb = s * ${k * k};
        let xb = s * ${k * m};
        // M from the uniforms (tfjs binds them only when the shader reads them).
        for (var c = i32(localId.x); c < uniforms.outShape.z; c = c + ${THREADS}) {
          for (${rows}) {
            var sum = b[xb + i * ${m} + c];
            for (${others}) {
              sum = sum - ${entry} * result[xb + j * ${m} + c];
            }
            result[xb + i * ${m} + c] = sum / l[lb + i * ${k} + i];
          }
        }
      }
    `;
  }
}

function choleskyKernel({ inputs, backend }: WebGpuKernelArgs): tf.TensorInfo {
  const a = inputs.a!;
  checkBatch(CHOLESKY, a.shape[0]!);
  return backend.runWebGPUProgram(new CholeskyProgram(a.shape[0]!, a.shape[1]!), [a], 'float32');
}

function solveKernel({ inputs, backend, attrs }: WebGpuKernelArgs): tf.TensorInfo {
  const [l, b] = [inputs.l!, inputs.b!];
  checkBatch(SOLVE_LOWER_TRIANGULAR, b.shape[0]!);
  const program = new SolveLowerTriangularProgram(b.shape[0]!, b.shape[1]!, b.shape[2]!, attrs?.transpose === true);
  return backend.runWebGPUProgram(program, [l, b], 'float32');
}

/** The WGSL Cholesky and triangular solve, for `webgpu` (installed by installWebGpuKernels). */
export const linalgWebGpuKernels: tf.KernelConfig[] = [
  { kernelName: CHOLESKY, backendName: 'webgpu', kernelFunc: choleskyKernel as unknown as tf.KernelFunc },
  { kernelName: SOLVE_LOWER_TRIANGULAR, backendName: 'webgpu', kernelFunc: solveKernel as unknown as tf.KernelFunc },
];
