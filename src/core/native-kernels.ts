/**
 * Native oneDNN kernels for tfjs's `cpu` backend.
 *
 * The addon `native/dnnl` (built at install time from Debian/Ubuntu's `libdnnl-dev`) is
 * loaded lazily. {@link installNativeKernels} replaces the hot pure-JS kernels of the `cpu`
 * backend (matmul, convolutions and their gradients, ...) with native ones; every native
 * kernel hands calls it does not support (other dtypes, NCHW, prelu, ...) to the original
 * JS kernel, which stays registered as the fallback and the reference.
 * {@link restoreJsKernels} puts the JS kernels back (the `cpu-js` backend, tests).
 *
 * Gathers and their gradient (`GatherV2`, `UnsortedSegmentSum`) are replaced by typed-array
 * row copies in JS (kernels/gather.ts), and strided slices, splits and pads (`Slice`, `SplitV`,
 * `PadV2`) by block copies (kernels/slice.ts), installed with the rest.
 *
 * Besides replacing kernels, installing adds a fused training batch norm (see
 * {@link batchNormTraining}: two passes each way instead of tfjs's ~30 element-wise
 * kernels), a fused group/layer norm ({@link groupNorm}, likewise) and routes ReLU's
 * gradient through a one-pass kernel.
 *
 * Threads: oneDNN (Debian builds it with OpenMP) and the element-wise kernels share one
 * OpenMP team of `SSL_ZOO_NUM_THREADS` threads if set, else `OMP_NUM_THREADS`, else
 * `os.availableParallelism()`; {@link setNativeThreads} changes it at run time. A launcher
 * running W ranks on C cores should give each floor(C / W) (e.g. SSL_ZOO_NUM_THREADS in the
 * children's environment) so that the ranks do not oversubscribe the cores.
 */
import { createRequire } from 'node:module';
import os from 'node:os';
import { join } from 'node:path';
import { registerCpuKernelInstaller } from './engine.js';
import { packageRoot } from './package-root.js';
import { batchNormKernels, registerBatchNormGradient } from './kernels/batch-norm.js';
import { gatherKernels } from './kernels/gather.js';
import { sliceKernels } from './kernels/slice.js';
import { topKKernels } from './kernels/topk.js';
import { geluKernels } from './kernels/gelu.js';
import { groupNormKernels, registerGroupNormGradient } from './kernels/group-norm.js';
import type { DnnlAddon, KernelArgs, NativeKernel } from './kernels/common.js';
import { convKernels } from './kernels/conv.js';
import { cpuOpKernels } from './kernels/cpu-ops.js';
import { matmulKernels } from './kernels/matmul.js';
import { overrideReluGradient, RELU_GRAD, reluGradKernel, restoreReluGradient } from './kernels/relu-grad.js';
import { softmaxKernels } from './kernels/softmax.js';
import { tf } from './tf.js';

const require = createRequire(import.meta.url);

/** Environment variable: number of threads for the native kernels. */
export const NUM_THREADS_ENV = 'SSL_ZOO_NUM_THREADS';
/** Environment variable: explicit path of `ssl_zoo_dnnl.node` (otherwise found under the package root). */
export const ADDON_PATH_ENV = 'SSL_ZOO_DNNL_ADDON';
/**
 * Environment variable: comma-separated tfjs kernel names to keep on their JS implementation
 * (e.g. `SSL_ZOO_NATIVE_DISABLE=Conv2D,Sum`), for narrowing down a numerical question.
 */
export const DISABLE_ENV = 'SSL_ZOO_NATIVE_DISABLE';
/** Environment variable: set to 0 to keep 3x3 stride-1 convolutions off Winograd (see {@link setWinogradConvolutions}). */
export const WINOGRAD_ENV = 'SSL_ZOO_WINOGRAD';

export { batchNormTraining, type BatchNormTrainingResult } from './kernels/batch-norm.js';
export { groupNorm } from './kernels/group-norm.js';

/** Native replacements of tfjs cpu kernels (the JS kernel stays as their fallback). */
const REPLACING: NativeKernel[] = [...matmulKernels, ...convKernels, ...cpuOpKernels, ...gatherKernels, ...sliceKernels, ...topKKernels];
/** Kernels that tfjs does not have (fused training batch norm, ReLU gradient, GELU, softmax), added with the others. */
const ADDING: NativeKernel[] = [...batchNormKernels, ...groupNormKernels, reluGradKernel, ...geluKernels, ...softmaxKernels];

/** Names of the tfjs kernels that have a native implementation. */
export const NATIVE_KERNEL_NAMES: readonly string[] = REPLACING.map((k) => k.kernelName);

let addon: DnnlAddon | null | undefined;
let loadError: string | undefined;
const originals = new Map<string, tf.KernelConfig>();
const added = new Set<string>();
const stats = new Map<string, { native: number; fallback: number }>();

/** Path of the compiled addon that {@link loadAddon} tries. */
export function nativeAddonPath(): string {
  return process.env[ADDON_PATH_ENV] || join(packageRoot(), 'native', 'dnnl', 'build', 'Release', 'ssl_zoo_dnnl.node');
}

/** `SSL_ZOO_NUM_THREADS`, else `OMP_NUM_THREADS` (its first value), else the CPUs available to this process. */
function defaultThreads(): number {
  for (const name of [NUM_THREADS_ENV, 'OMP_NUM_THREADS']) {
    const raw = process.env[name];
    if (raw == null || raw === '') continue;
    const n = Number(raw.split(',')[0]);
    if (Number.isInteger(n) && n > 0) return n;
    console.warn(`ssl-zoo: ignoring ${name}=${raw} (expected a positive integer)`);
  }
  return os.availableParallelism();
}

/** Every function of the addon that the kernels call: a stale build lacking one is not loaded. */
const ADDON_FUNCTIONS = [
  'matmul',
  'conv2d',
  'conv2dBackpropInput',
  'conv2dBackpropFilter',
  'setNumThreads',
  'numThreads',
  'binary',
  'unary',
  'softmax',
  'softmaxGrad',
  'reduce',
  'tile',
  'transpose',
  'batchNorm',
  'bnTrain',
  'bnTrainGrad',
  'gnTrain',
  'gnTrainGrad',
  'maxPool',
  'avgPool',
  'maxPoolGrad',
  'avgPoolGrad',
  'tuneMalloc',
];

function loadAddon(): DnnlAddon | null {
  if (addon !== undefined) return addon;
  try {
    const path = nativeAddonPath();
    const loaded = require(path) as DnnlAddon;
    const missing = ADDON_FUNCTIONS.filter((name) => typeof loaded[name] !== 'function');
    if (missing.length > 0) {
      throw new Error(`the addon ${path} is older than this ssl-zoo (it lacks ${missing.join(', ')}): rebuild it with \`npm run build:native\``);
    }
    addon = loaded;
    addon.setNumThreads(defaultThreads());
    (addon as unknown as WinogradAddon).setWinograd(process.env[WINOGRAD_ENV] !== '0');
  } catch (err) {
    addon = null;
    loadError = err instanceof Error ? err.message.split('\n')[0] : String(err);
  }
  return addon;
}

/** Whether the oneDNN addon is built and loads (it is loaded on first call). */
export function nativeKernelsAvailable(): boolean {
  return loadAddon() != null;
}

/** Why the addon did not load, or undefined when it did (or was not tried yet). */
export function nativeKernelsError(): string | undefined {
  loadAddon();
  return loadError;
}

/** Whether the native kernels are currently registered on the cpu backend. */
export function nativeKernelsInstalled(): boolean {
  return originals.size > 0 || added.size > 0;
}

/** Version of the oneDNN library the addon runs on, e.g. "2.6.3", or undefined without addon. */
export function oneDnnVersion(): string | undefined {
  return loadAddon()?.dnnlVersion;
}

/**
 * The instruction set oneDNN's kernels run with here, e.g. "avx2", "avx512_core",
 * "avx512_core_amx": the CPU's best, capped by `ONEDNN_MAX_CPU_ISA`. Undefined without addon.
 */
export function oneDnnCpuIsa(): string | undefined {
  return loadAddon()?.cpuIsa;
}

/**
 * Sets the number of threads of the native kernels (oneDNN's OpenMP team; they run on the
 * calling thread plus n - 1 workers). Default: `SSL_ZOO_NUM_THREADS`, else `OMP_NUM_THREADS`,
 * else the CPUs available to this process. A launcher of W ranks on C cores should give each
 * floor(C / W).
 */
export function setNativeThreads(n: number): void {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`native threads must be a positive integer, got ${n}`);
  const a = loadAddon();
  if (a == null) throw new Error(`native kernels are not available: ${loadError}`);
  a.setNumThreads(n);
}

interface WinogradAddon {
  setWinograd(on: boolean): void;
  winograd(): boolean;
}

/**
 * Lets oneDNN run 3x3 stride-1 convolutions (and their gradients) with Winograd's algorithm
 * when it expects it to be faster (AVX-512 machines): about 1.2-1.5x on ResNet layers, at
 * the cost of larger rounding errors (about 1e-6 of the largest output instead of 3e-7) than
 * direct convolution (which PyTorch uses). Applies to the next calls (primitives are cached
 * per setting). On by default; `SSL_ZOO_WINOGRAD=0` turns it off (e.g. to compare bit for
 * bit with a direct-convolution reference).
 */
export function setWinogradConvolutions(on: boolean): void {
  const a = loadAddon();
  if (a == null) throw new Error(`native kernels are not available: ${loadError}`);
  (a as unknown as WinogradAddon).setWinograd(on);
}

/** Whether 3x3 stride-1 convolutions may use Winograd. */
export function winogradConvolutions(): boolean {
  const a = loadAddon();
  return a != null && (a as unknown as WinogradAddon).winograd();
}

/** Threads the native kernels use, or 0 without addon. */
export function nativeThreads(): number {
  return loadAddon()?.numThreads() ?? 0;
}

/** Per kernel: how many calls ran natively and how many fell back to the JS kernel. */
export function nativeKernelStats(): Record<string, { native: number; fallback: number }> {
  return Object.fromEntries([...stats].map(([k, v]) => [k, { ...v }]));
}

/** Zeroes the counters of {@link nativeKernelStats}. */
export function resetNativeKernelStats(): void {
  for (const count of stats.values()) {
    count.native = 0;
    count.fallback = 0;
  }
}

/** Drops cached oneDNN primitives (they are keyed by shape; each holds a little memory). */
export function clearNativeKernelCache(): void {
  addon?.clearCache();
}

/** Internal: the raw addon, for benchmarks and diagnostics (null when not built). */
export function nativeAddon(): DnnlAddon | null {
  return loadAddon();
}

/** The call counter of a kernel (kept across install / restore). */
function counter(kernelName: string): { native: number; fallback: number } {
  let count = stats.get(kernelName);
  if (count == null) {
    count = { native: 0, fallback: 0 };
    stats.set(kernelName, count);
  }
  return count;
}

function wrap(kernel: NativeKernel, original: tf.KernelConfig, a: DnnlAddon): tf.KernelFunc {
  const count = counter(kernel.kernelName);
  const fallback = original.kernelFunc;
  return (args) => {
    const result = kernel.func(args as unknown as KernelArgs, a);
    if (result != null) {
      count.native++;
      return result;
    }
    count.fallback++;
    return fallback(args);
  };
}

/**
 * Registers the native kernels on tfjs's `cpu` backend in place of the JS ones. Returns
 * false (and changes nothing) when the addon is not built. Idempotent.
 */
export function installNativeKernels(): boolean {
  const a = loadAddon();
  if (a == null) return false;
  if (nativeKernelsInstalled()) return true;
  const disabled = new Set(
    (process.env[DISABLE_ENV] ?? '')
      .split(',')
      .map((k) => k.trim())
      .filter(Boolean),
  );
  for (const kernel of REPLACING) {
    if (disabled.has(kernel.kernelName)) continue;
    const original = tf.getKernel(kernel.kernelName, 'cpu');
    if (original == null) continue; // not in this tfjs version
    originals.set(kernel.kernelName, original);
    tf.unregisterKernel(kernel.kernelName, 'cpu');
    tf.registerKernel({ ...original, kernelFunc: wrap(kernel, original, a) });
  }
  registerBatchNormGradient();
  registerGroupNormGradient();
  for (const kernel of ADDING) {
    if (disabled.has(kernel.kernelName)) continue;
    if (tf.getKernel(kernel.kernelName, 'cpu') != null) tf.unregisterKernel(kernel.kernelName, 'cpu');
    tf.registerKernel({ kernelName: kernel.kernelName, backendName: 'cpu', kernelFunc: addedKernel(kernel, a) });
    added.add(kernel.kernelName);
  }
  if (!disabled.has(RELU_GRAD)) overrideReluGradient();
  tuneMalloc(a);
  return true;
}

/** Environment variable: set to 0 to leave glibc's malloc thresholds alone. */
export const MALLOC_TUNING_ENV = 'SSL_ZOO_MALLOC_TUNING';
let mallocTuned = false;

/**
 * Every kernel output is a fresh Float32Array. glibc serves allocations above its mmap
 * threshold (128 KiB to 32 MiB, adaptive) with fresh mmaps, so each big activation costs
 * page faults and zeroing (about 10 ms per 25 MB here, 10% of a ResNet step). Raising the
 * mmap threshold to its 32 MiB maximum and the trim threshold to 1 GiB lets freed buffers
 * be reused from the heap instead. Process-wide; off with SSL_ZOO_MALLOC_TUNING=0.
 */
function tuneMalloc(a: DnnlAddon): void {
  if (mallocTuned || process.env[MALLOC_TUNING_ENV] === '0') return;
  mallocTuned = true;
  (a as unknown as { tuneMalloc(mmap: number, trim: number): unknown }).tuneMalloc(32 * 2 ** 20, 2 ** 30);
}

function addedKernel(kernel: NativeKernel, a: DnnlAddon): tf.KernelFunc {
  const count = counter(kernel.kernelName);
  return (args) => {
    const result = kernel.func(args as unknown as KernelArgs, a);
    if (result == null) throw new Error(`${kernel.kernelName}: unsupported inputs`);
    count.native++;
    return result;
  };
}

/** Puts back the pure-JS kernels that {@link installNativeKernels} replaced. */
export function restoreJsKernels(): void {
  for (const [name, original] of originals) {
    tf.unregisterKernel(name, 'cpu');
    tf.registerKernel(original);
  }
  originals.clear();
  for (const name of added) tf.unregisterKernel(name, 'cpu');
  added.clear();
  restoreReluGradient();
}

registerCpuKernelInstaller(installNativeKernels);
