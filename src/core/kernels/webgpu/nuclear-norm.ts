/**
 * The `webgpu` kernel of the nuclear norm (`SslZooNuclearNorm`, src/core/eigen.ts): for each
 * matrix `X` `[R, C]` of a batch, `U Vᵀ` of its reduced SVD and `‖X‖_*`, as `[S, R·C + 1]`,
 * in float32 with nothing read back. The `cpu` kernel (the float64 eigen-decomposition of
 * the Gram matrix, src/core/eigen.ts) is its reference.
 *
 * How: one-sided (Hestenes) Jacobi, one workgroup per matrix, on X or Xᵀ, whichever has the
 * fewer columns c. Each round rotates c/2 disjoint pairs of columns (a round-robin schedule:
 * every pair once in c − 1 rounds, one thread per pair) until each pair is orthogonal to
 * float32 round-off, accumulating the rotations in V `[c, c]`. Then X V = W has orthogonal
 * columns, `σ_k = ‖w_k‖ / ‖v_k‖` (the ratio cancels the drift of the columns' lengths over
 * hundreds of float32 rotations: 1e-5 of the norm without it, at 256 x 128), and
 * `U Vᵀ = Σ_k (w_k / ‖w_k‖) (v_k / ‖v_k‖)ᵀ` over the σ above 1e-6 of the largest (as the
 * cpu kernel's cut of the eigenvalues at 1e-12). Working directly on X, not on its Gram
 * matrix, keeps the small singular values to float32's relative accuracy. Measured against
 * the cpu kernel (tests/core/eigen-webgpu.test.ts): the norm to 1e-7, `U Vᵀ` to 3e-6.
 */
import { NUCLEAR_NORM } from '../../eigen.js';
import { tf } from '../../tf.js';
import { runWebGpuKernel, type WebGpuKernelArgs, type WgslProgram } from './program.js';

/** Threads per workgroup (one workgroup per matrix; one thread per pair of columns in a round). */
const THREADS = 64;

/** The most matrices in a batch: one workgroup each, along x only (WebGPU's default limit per dimension). */
const MAX_BATCH = 65535;

/** The most Jacobi sweeps (convergence is quadratic: about 6 to 10 for c ≤ 512). */
const MAX_SWEEPS = 30;

/** Singular values at most this fraction of the largest count as zero (the cpu kernel's 1e-12 on eigenvalues). */
const RELATIVE_CUT = 1e-6;

/**
 * The Jacobi program of a batch of S matrices; its output `[S, P]` holds, per matrix, the
 * working columns W `[r, c]`, V `[c, c]`, σ `[c]`, ‖v_k‖² `[c]`, then `U Vᵀ` in X's layout `[R·C]` and the
 * norm: the kernel's output is the last `R·C + 1`.
 */
class NuclearNormProgram implements WgslProgram {
  readonly variableNames = ['x'];
  readonly outputShape: [number, number];
  readonly dispatchLayout = { x: [0, 1] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [THREADS, 1, 1];
  readonly shaderKey: string;

  /** `r` × `c`: the matrix worked on (`transpose`: Xᵀ, X being `[c, r]`). */
  constructor(
    batch: number,
    private readonly r: number,
    private readonly c: number,
    private readonly transpose: boolean,
  ) {
    this.outputShape = [batch, NuclearNormProgram.width(r, c)];
    this.dispatch = [batch, 1, 1];
    this.shaderKey = `sslZooNuclearNorm_${r}_${c}_${transpose}`;
  }

  /** Output entries per matrix: W, V, σ, ‖v_k‖², U Vᵀ and the norm. */
  static width(r: number, c: number): number {
    return 2 * r * c + c * c + 2 * c + 1;
  }

  /** Where the kernel's part (U Vᵀ, then the norm) starts in a matrix's row of the output. */
  static resultOffset(r: number, c: number): number {
    return r * c + c * c + 2 * c;
  }

  getUserCode(): string {
    const { r, c } = this;
    const n = c + (c % 2); // players of the round-robin (one idle when c is odd)
    const [v, sigma, vNorm2, direction] = [r * c, r * c + c * c, r * c + c * c + c, r * c + c * c + 2 * c];
    const tolerance = Math.sqrt(r) * 1.2e-7; // a pair counts as orthogonal when |w_p·w_q| ≤ tolerance ‖w_p‖ ‖w_q‖ (LAPACK's sgesvj: sqrt(m)·eps)
    const load = this.transpose ? `x[xb + k * ${r} + i]` : `x[xb + e]`;
    const store = this.transpose ? `j * ${r} + i` : 'e';
    return `
      var<workgroup> rotated : atomic<i32>;
      var<workgroup> again : i32;

      // The column that plays at seat j of round 'turn' (seat 0 fixed, the others rotating).
      fn seat(j : i32, turn : i32) -> i32 {
        if (j == 0) { return 0; }
        return (j - 1 + turn) % ${n - 1} + 1;
      }

      fn main(index : i32) {
        let s = i32(workgroupId.x);
        let t = i32(localId.x);
        let base = s * uniforms.outShape.y; // the width of a matrix's row (read from the uniforms: tfjs binds them, so the shader must use them)
        let xb = s * ${r * c};
        for (var e = t; e < ${r * c}; e = e + ${THREADS}) {
          let i = e / ${c};
          let k = e - i * ${c};
          result[base + e] = ${load};
        }
        for (var e = t; e < ${c * c}; e = e + ${THREADS}) {
          result[base + ${v} + e] = select(0.0, 1.0, e % ${c + 1} == 0);
        }
        storageBarrier();
        for (var sweep = 0; sweep < ${MAX_SWEEPS}; sweep = sweep + 1) {
          if (t == 0) { atomicStore(&rotated, 0); }
          workgroupBarrier();
          for (var turn = 0; turn < ${n - 1}; turn = turn + 1) {
            for (var k = t; k < ${n / 2}; k = k + ${THREADS}) {
              let p = seat(k, turn);
              let q = seat(${n - 1} - k, turn);
              if (p < ${c} && q < ${c}) {
                var a = 0.0;
                var b = 0.0;
                var g = 0.0;
                for (var i = 0; i < ${r}; i = i + 1) {
                  let wp = result[base + i * ${c} + p];
                  let wq = result[base + i * ${c} + q];
                  a = a + wp * wp;
                  b = b + wq * wq;
                  g = g + wp * wq;
                }
                if (abs(g) > ${tolerance} * sqrt(a) * sqrt(b)) {
                  // The rotation that makes columns p and q orthogonal: tan θ = t, the root of t² + 2ζt − 1 of least magnitude.
                  let zeta = (b - a) / (2.0 * g);
                  let tn = select(1.0, -1.0, zeta < 0.0) / (abs(zeta) + sqrt(1.0 + zeta * zeta));
                  let cs = 1.0 / sqrt(1.0 + tn * tn);
                  let sn = cs * tn;
                  for (var i = 0; i < ${r}; i = i + 1) {
                    let wp = result[base + i * ${c} + p];
                    let wq = result[base + i * ${c} + q];
                    result[base + i * ${c} + p] = cs * wp - sn * wq;
                    result[base + i * ${c} + q] = sn * wp + cs * wq;
                  }
                  for (var i = 0; i < ${c}; i = i + 1) {
                    let vp = result[base + ${v} + i * ${c} + p];
                    let vq = result[base + ${v} + i * ${c} + q];
                    result[base + ${v} + i * ${c} + p] = cs * vp - sn * vq;
                    result[base + ${v} + i * ${c} + q] = sn * vp + cs * vq;
                  }
                  atomicAdd(&rotated, 1);
                }
              }
            }
            storageBarrier();
          }
          workgroupBarrier();
          if (t == 0) { again = atomicLoad(&rotated); }
          if (workgroupUniformLoad(&again) == 0) { break; }
        }
        storageBarrier();
        // σ_k = ‖w_k‖ / ‖v_k‖: the rotations' float32 cosines and sines scale W's and V's columns
        // alike (cos² + sin² is 1 to a few ulp, over hundreds of rotations), so the ratio cancels that drift.
        for (var k = t; k < ${c}; k = k + ${THREADS}) {
          var squares = 0.0;
          for (var i = 0; i < ${r}; i = i + 1) {
            let w = result[base + i * ${c} + k];
            squares = squares + w * w;
          }
          var vSquares = 0.0;
          for (var i = 0; i < ${c}; i = i + 1) {
            let vk = result[base + ${v} + i * ${c} + k];
            vSquares = vSquares + vk * vk;
          }
          result[base + ${sigma} + k] = sqrt(squares / vSquares);
          result[base + ${vNorm2} + k] = vSquares;
        }
        storageBarrier();
        var largest = 0.0;
        for (var k = 0; k < ${c}; k = k + 1) { largest = max(largest, result[base + ${sigma} + k]); }
        let cut = largest * ${RELATIVE_CUT};
        if (t == 0) {
          var norm = 0.0;
          for (var k = 0; k < ${c}; k = k + 1) {
            let sg = result[base + ${sigma} + k];
            if (sg > cut) { norm = norm + sg; }
          }
          result[base + ${direction + r * c}] = norm;
        }
        for (var e = t; e < ${r * c}; e = e + ${THREADS}) {
          let i = e / ${c};
          let j = e - i * ${c};
          var sum = 0.0;
          for (var k = 0; k < ${c}; k = k + 1) {
            let sg = result[base + ${sigma} + k];
            // (w_k / ‖w_k‖) (v_k / ‖v_k‖)ᵀ = w_k v_kᵀ / (σ_k ‖v_k‖²)
            if (sg > cut) { sum = sum + result[base + i * ${c} + k] / (sg * result[base + ${vNorm2} + k]) * result[base + ${v} + j * ${c} + k]; }
          }
          result[base + ${direction} + ${store}] = sum;
        }
      }
    `;
  }
}

/** `[S, R, C] -> [S, R·C + 1]`: the Jacobi program, then its last `R·C + 1` entries per matrix. */
function nuclearNormKernel({ inputs, backend }: WebGpuKernelArgs): tf.TensorInfo {
  const x = inputs.x!;
  const [s, r0, c0] = x.shape as [number, number, number];
  if (s > MAX_BATCH) throw new Error(`${NUCLEAR_NORM} (webgpu): at most ${MAX_BATCH} matrices per batch, got ${s}`);
  const transpose = r0 < c0;
  const [r, c] = transpose ? [c0, r0] : [r0, c0];
  const work = backend.runWebGPUProgram(new NuclearNormProgram(s, r, c, transpose), [x], 'float32');
  try {
    const begin = [0, NuclearNormProgram.resultOffset(r, c)];
    return runWebGpuKernel('Slice', { inputs: { x: work }, backend, attrs: { begin, size: [s, r * c + 1] } });
  } finally {
    backend.disposeData(work.dataId);
  }
}

/** The WGSL nuclear norm, for `webgpu` (installed by installWebGpuKernels). */
export const nuclearNormWebGpuKernels: tf.KernelConfig[] = [
  { kernelName: NUCLEAR_NORM, backendName: 'webgpu', kernelFunc: nuclearNormKernel as unknown as tf.KernelFunc },
];
