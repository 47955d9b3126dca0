/**
 * The WebGPU engine: TensorFlow.js's WebGPU backend (`@tensorflow/tfjs-backend-webgpu`) on
 * Dawn (the `webgpu` package: Vulkan on Linux, Metal on macOS, D3D12 on Windows), in Node.
 *
 * Adapters: Dawn lists the adapters of the platform's GPU API (on Linux, every Vulkan
 * driver the loader finds: `VK_ICD_FILENAMES` / `VK_DRIVER_FILES`, else the standard
 * `icd.d` folders). The listing runs in a child process, because Vulkan drivers print to the
 * process's stderr while they are probed. A rank takes the adapter at its local rank among
 * the hardware adapters (software ones, SwiftShader or llvmpipe, only when allowed).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { UserError } from './errors.js';
import { tf } from './tf.js';
import { enableSyncRead, installDawnPumpCapture } from './webgpu-backend.js';

const require = createRequire(import.meta.url);

/** One adapter as Dawn lists it. */
export interface GpuAdapterEntry {
  /** The device name, e.g. `NVIDIA H100 80GB HBM3` or `SwiftShader Device (Subzero)`. */
  name: string;
  /** Dawn's backend: `vulkan`, `metal`, `d3d12`, ... */
  api: string;
  /** A CPU implementation (SwiftShader, llvmpipe/lavapipe, WARP): correct but slow. */
  software: boolean;
}

/** How a process picks its adapter. */
export interface GpuSelection {
  /** Index among the eligible adapters (a rank's local rank); undefined: the first. */
  index?: number;
  /** Whether software adapters are eligible (always true for a plain `--backend webgpu`). */
  allowSoftware: boolean;
  /** Ranks beyond the eligible adapters share them round-robin (tests on one software adapter). */
  shareAdapters?: boolean;
  /** The flag named in errors: `--gpus 2`, `--backend webgpu`. */
  flag?: string;
}

/** What {@link initWebGpu} chose. */
export interface WebGpuInfo {
  adapter: GpuAdapterEntry;
  /** All adapters Dawn listed. */
  adapters: GpuAdapterEntry[];
}

const SOFTWARE = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render|warp/i;
const LIST_PROBE = 'ssl-zoo:list-adapters';

/** Path of the `webgpu` package's entry (throws a user error when it is not installed). */
function webgpuEntry(): string {
  try {
    return require.resolve('webgpu');
  } catch {
    throw new UserError('backend: "webgpu" needs the npm package webgpu, which is not installed; run npm ci (it is a dependency of ssl-zoo)');
  }
}

/**
 * Folders and files the Vulkan loader searches for drivers (its documented order on Linux),
 * or the explicit list in `VK_DRIVER_FILES` / `VK_ICD_FILENAMES`.
 */
export function vulkanDriverSearchPaths(env: NodeJS.ProcessEnv = process.env): string[] {
  const explicit = env.VK_DRIVER_FILES ?? env.VK_ICD_FILENAMES;
  if (explicit) return explicit.split(':').filter(Boolean);
  const configHome = env.XDG_CONFIG_HOME ?? join(homedir(), '.config');
  const dataHome = env.XDG_DATA_HOME ?? join(homedir(), '.local/share');
  const configDirs = (env.XDG_CONFIG_DIRS ?? '/etc/xdg').split(':');
  const dataDirs = (env.XDG_DATA_DIRS ?? '/usr/local/share:/usr/share').split(':');
  return [configHome, ...configDirs, '/etc', dataHome, ...dataDirs].map((d) => join(d, 'vulkan/icd.d'));
}

/** The script the child process runs: prints `{adapters, loaderMissing}` as JSON. */
const PROBE_SCRIPT = `
const { create } = await import(process.argv[1]);
let text = '';
try { const a = await create(['adapter=${LIST_PROBE}']).requestAdapter(); text = a ? '' : 'none'; }
catch (e) { text = String(e); }
const adapters = [...text.matchAll(/backend: '([^']*)', name: '([^']*)'/g)].map((m) => ({ api: m[1], name: m[2] }));
process.stdout.write(JSON.stringify({ adapters }));
`;

/**
 * The adapters Dawn finds, listed in a child process (drivers print while probed), and
 * whether the Vulkan loader itself was missing.
 */
export function listGpuAdapters(): { adapters: GpuAdapterEntry[]; loaderMissing: boolean } {
  const entry = webgpuEntry();
  let stdout: string;
  try {
    stdout = execFileSync(process.execPath, ['--input-type=module', '-e', PROBE_SCRIPT, new URL(`file://${entry}`).href], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 60_000,
    });
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string };
    stdout = err.stdout ?? '';
    const stderr = err.stderr ?? '';
    if (!stdout) throw new UserError(`backend: "webgpu": listing the GPU adapters failed: ${stderr.trim().split('\n').at(-1) ?? 'no output'}`);
  }
  const parsed = JSON.parse(stdout) as { adapters: Array<{ api: string; name: string }> };
  const adapters = parsed.adapters.map((a) => ({ ...a, software: SOFTWARE.test(a.name) }));
  return { adapters, loaderMissing: adapters.length === 0 && !hasVulkanLoader() };
}

function hasVulkanLoader(): boolean {
  if (process.platform !== 'linux') return true;
  const libDirs = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/local/lib'];
  const extra = (process.env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  return [...extra, ...libDirs].some((d) => existsSync(join(d, 'libvulkan.so.1')));
}

/** Environment variable restricting the adapters ranks may take: indices into Dawn's list, e.g. `1,0`. */
export const VISIBLE_ADAPTERS_ENV = 'SSL_ZOO_VISIBLE_ADAPTERS';

/**
 * The adapters ranks take, in order: `SSL_ZOO_VISIBLE_ADAPTERS` (indices into Dawn's list,
 * like CUDA_VISIBLE_DEVICES) when set, else all of them; software ones only when allowed.
 */
export function eligibleAdapters(adapters: GpuAdapterEntry[], selection: GpuSelection, env: NodeJS.ProcessEnv = process.env): GpuAdapterEntry[] {
  let visible = adapters;
  const list = env[VISIBLE_ADAPTERS_ENV];
  if (list !== undefined && list.trim() !== '') {
    visible = list.split(',').map((item) => {
      const i = Number(item.trim());
      if (!Number.isInteger(i) || i < 0 || i >= adapters.length) {
        throw new UserError(
          `${VISIBLE_ADAPTERS_ENV}: ${JSON.stringify(item.trim())} is not allowed; expected indices in [0, ${adapters.length - 1}] of Dawn's adapters (${adapters.map((a) => a.name).join('; ') || 'none'})`,
        );
      }
      return adapters[i]!;
    });
  }
  return visible.filter((a) => selection.allowSoftware || !a.software);
}

/** The driver manifests (`*.json`) in the search paths, by file name. */
function driverManifests(paths: string[]): string[] {
  const found: string[] = [];
  for (const p of paths) {
    if (!existsSync(p)) continue;
    if (statSync(p).isDirectory()) found.push(...readdirSync(p).filter((f) => f.endsWith('.json')));
    else found.push(p);
  }
  return found;
}

/** The one-line explanation of why no adapter fits, naming what was found and where. */
function noAdapterMessage(found: GpuAdapterEntry[], loaderMissing: boolean, selection: GpuSelection, what: string): string {
  const listed = found.length ? found.map((a) => `${a.name} (${a.api}${a.software ? ', software' : ''})`).join('; ') : 'none';
  const paths = vulkanDriverSearchPaths();
  const manifests = driverManifests(paths);
  const loader = loaderMissing ? 'the Vulkan loader libvulkan.so.1 is missing (Debian/Ubuntu: apt install libvulkan1); ' : '';
  const software = !selection.allowSoftware && found.some((a) => a.software) ? '; software adapters are used only with --allow-software-adapter' : '';
  return (
    `${what}: no GPU adapter${selection.index ? ` for local rank ${selection.index}` : ''}: ${loader}Dawn lists: ${listed}` +
    `; Vulkan drivers searched in ${paths.join(', ')} (found: ${manifests.length ? manifests.join(', ') : 'none'})${software}` +
    '; on CPU use --devices instead of --gpus'
  );
}

/**
 * Checks, before `--gpus N` spawns its ranks, that this node has an eligible adapter for each
 * (or at least one, when ranks may share them); throws the one-line user error otherwise.
 */
export function checkGpuAdapters(ranks: number, selection: GpuSelection): void {
  const { adapters, loaderMissing } = listGpuAdapters();
  const eligible = eligibleAdapters(adapters, selection);
  if (eligible.length === 0) throw new UserError(noAdapterMessage(adapters, loaderMissing, selection, selection.flag ?? `--gpus ${ranks}`));
  if (eligible.length < ranks && !selection.shareAdapters) {
    const names = eligible.map((a) => a.name).join('; ');
    throw new UserError(`--gpus ${ranks}: asks for one adapter per rank, but this node has ${eligible.length} (${names}); use --gpus ${eligible.length}`);
  }
}

/**
 * Picks this process's adapter, creates a device with the adapter's limits (as tfjs's own
 * registration does) and registers it as tfjs's `webgpu` backend. Throws a user error with
 * one line naming the adapters found and the driver search paths when none fits.
 */
export async function initWebGpu(selection: GpuSelection): Promise<WebGpuInfo> {
  // One device per process: Dawn does not survive a second instance beside the first, and
  // switching engines (tests, the engine check) returns to the same device.
  if (active) return active;
  const what = selection.flag ?? '--backend webgpu';
  const { adapters, loaderMissing } = listGpuAdapters();
  const eligible = eligibleAdapters(adapters, selection);
  const index = selection.index ?? 0;
  const adapter = eligible[selection.shareAdapters && eligible.length ? index % eligible.length : index];
  if (!adapter) throw new UserError(noAdapterMessage(adapters, loaderMissing, selection, what));
  // Vulkan drivers' window-system code prints "error: XDG_RUNTIME_DIR is invalid" when it is
  // unset (servers, containers): give it a private folder; nothing is displayed.
  if (!process.env.XDG_RUNTIME_DIR) {
    const dir = join(tmpdir(), `ssl-zoo-xdg-${process.getuid?.() ?? 'user'}`);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    process.env.XDG_RUNTIME_DIR = dir;
  }
  installDawnPumpCapture();
  const { create, globals } = (await import('webgpu')) as {
    create: (flags: string[]) => GPU;
    globals: Record<string, unknown>;
  };
  Object.assign(globalThis, globals);
  const gpu = create([`adapter=${adapter.name}`, `backend=${adapter.api}`]);
  // tfjs's WebGPU backend checks for navigator.gpu (Node 20 has no navigator).
  const nav = ((globalThis as { navigator?: { gpu?: GPU } }).navigator ??= {} as { gpu?: GPU });
  if (!nav.gpu) Object.defineProperty(nav, 'gpu', { value: gpu, configurable: true });
  const gpuAdapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!gpuAdapter) throw new UserError(noAdapterMessage(adapters, loaderMissing, selection, what));
  const { WebGPUBackend } = await import('@tensorflow/tfjs-backend-webgpu');
  const limits = gpuAdapter.limits;
  const requiredFeatures = (['timestamp-query'] as GPUFeatureName[]).filter((f) => gpuAdapter.features.has(f));
  const device = await gpuAdapter.requestDevice({
    requiredFeatures,
    requiredLimits: {
      maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
      maxComputeWorkgroupsPerDimension: limits.maxComputeWorkgroupsPerDimension,
      maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
      maxBufferSize: limits.maxBufferSize,
      maxComputeWorkgroupSizeX: limits.maxComputeWorkgroupSizeX,
      maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
    },
  });
  // Everything stays on the device: no forwarding of small ops to the CPU backend (which
  // would read tensors back synchronously, and compute elsewhere than the engine asked for).
  tf.env().set('WEBGPU_CPU_FORWARD', false);
  // Importing tfjs's WebGPU package registers a factory only where navigator.gpu existed.
  if (tf.findBackendFactory('webgpu')) tf.removeBackend('webgpu');
  tf.registerBackend(
    'webgpu',
    () => {
      const backend = new WebGPUBackend(device, gpuAdapter.info as unknown as GPUAdapterInfo);
      enableSyncRead(backend);
      return backend;
    },
    3,
  );
  active = { adapter, adapters };
  return active;
}

/** The adapter this process opened (see {@link initWebGpu}). */
let active: WebGpuInfo | undefined;
