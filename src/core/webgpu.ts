/**
 * The WebGPU engine: TensorFlow.js's WebGPU backend (`@tensorflow/tfjs-backend-webgpu`) on
 * Dawn (the `webgpu` package: Vulkan on Linux, Metal on macOS, D3D12 on Windows), in Node.
 *
 * Adapters: Dawn lists the adapters of the platform's GPU API (on Linux, every Vulkan
 * driver the loader finds: `VK_ICD_FILENAMES` / `VK_DRIVER_FILES`, else the standard
 * `icd.d` folders). The listing runs in a child process, because Vulkan drivers print to the
 * process's stderr while they are probed. A rank takes the adapter at its local rank among
 * the hardware adapters (software ones, SwiftShader or llvmpipe, only when allowed). Dawn opens
 * an adapter by name: where several have one name, ./webgpu-select.ts isolates each rank's
 * device through Mesa's Vulkan device-select layer.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { UserError } from './errors.js';
import { tf } from './tf.js';
import { enableSyncRead, installDawnPumpCapture } from './webgpu-backend.js';
import {
  adapterOpening,
  applyEnv,
  checkIsolated,
  DEVICE_SELECT_LIST_HEADER,
  hasNamesake,
  isolationEnv,
  parseDeviceSelectList,
  type AdapterOpening,
  type GpuAdapterEntry,
  type LayerDevice,
} from './webgpu-select.js';

export type { GpuAdapterEntry } from './webgpu-select.js';

const require = createRequire(import.meta.url);

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
  /** The PCI tag the process was isolated to, when another adapter has the same name. */
  pciTag?: string;
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

/** The prefix of the one line of the probe's stdout that carries its result. */
const PROBE_MARK = 'ssl-zoo-adapters:';

/** The script the child process runs: prints `PROBE_MARK {adapters}` on a line of its own. */
const PROBE_SCRIPT = `
const { create } = await import(process.argv[1]);
let text = '';
try { const a = await create(['adapter=${LIST_PROBE}']).requestAdapter(); text = a ? '' : 'none'; }
catch (e) { text = String(e); }
const adapters = [...text.matchAll(/backend: '([^']*)', name: '([^']*)'/g)].map((m) => ({ api: m[1], name: m[2] }));
process.stdout.write('\\n${PROBE_MARK}' + JSON.stringify({ adapters }) + '\\n');
`;

/** Runs the probe in a child process with `env`: its stdout, stderr and exit status. */
function runProbe(env: NodeJS.ProcessEnv): { stdout: string; stderr: string; status: number | null; error?: Error } {
  const entry = webgpuEntry();
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', PROBE_SCRIPT, new URL(`file://${entry}`).href], {
    encoding: 'utf8',
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });
  return { stdout: child.stdout ?? '', stderr: child.stderr ?? '', status: child.status, error: child.error };
}

/**
 * The adapters Dawn finds, listed in a child process (drivers print while probed), and
 * whether the Vulkan loader itself was missing. Only the probe's marked line is read; without
 * it, one line says why (e.g. `MESA_VK_DEVICE_SELECT=list`, which ends the child early).
 */
export function listGpuAdapters(env: NodeJS.ProcessEnv = process.env): { adapters: GpuAdapterEntry[]; loaderMissing: boolean } {
  const { stdout, stderr, status, error } = runProbe(env);
  const line = stdout.split('\n').find((l) => l.startsWith(PROBE_MARK));
  let parsed: { adapters?: Array<{ api: string; name: string }> } | undefined;
  try {
    parsed = line ? (JSON.parse(line.slice(PROBE_MARK.length)) as typeof parsed) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!Array.isArray(parsed?.adapters)) {
    const what = 'backend: "webgpu": listing the GPU adapters failed';
    if (`${stdout}\n${stderr}`.includes(DEVICE_SELECT_LIST_HEADER)) {
      throw new UserError(
        `${what}: MESA_VK_DEVICE_SELECT=${env.MESA_VK_DEVICE_SELECT ?? ''} made Mesa's Vulkan device-select layer print its devices and end the process; unset MESA_VK_DEVICE_SELECT`,
      );
    }
    const last = (error?.message ?? `${stderr}\n${stdout}`).trim().split('\n').at(-1) || 'no output';
    throw new UserError(`${what}: the listing process (exit status ${status ?? 'none'}) printed no adapter list; its last line: ${last}`);
  }
  const adapters = parsed.adapters.map((a) => ({ api: String(a.api), name: String(a.name), software: SOFTWARE.test(String(a.name)) }));
  return { adapters, loaderMissing: adapters.length === 0 && !hasVulkanLoader() };
}

/**
 * The devices Mesa's Vulkan device-select layer lists (`MESA_VK_DEVICE_SELECT=list`, in a
 * child process), with their PCI tags where the drivers give bus info; undefined without the
 * layer (not installed, or disabled by `NODEVICE_SELECT=1`).
 */
export function listDeviceSelectLayer(env: NodeJS.ProcessEnv = process.env): LayerDevice[] | undefined {
  const { stdout, stderr } = runProbe({ ...env, MESA_VK_DEVICE_SELECT: 'list', MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: undefined });
  return parseDeviceSelectList(`${stderr}\n${stdout}`);
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

/** The adapter the process at `index` takes among the eligible ones (round-robin when shared). */
function pickAdapter(eligible: GpuAdapterEntry[], selection: GpuSelection, index = selection.index ?? 0): GpuAdapterEntry | undefined {
  return eligible[selection.shareAdapters && eligible.length ? index % eligible.length : index];
}

/** {@link listDeviceSelectLayer}, run at most once, on the first call. */
function layerOnce(): () => LayerDevice[] | undefined {
  let devices: LayerDevice[] | undefined;
  let listed = false;
  return () => {
    if (!listed) devices = listDeviceSelectLayer();
    listed = true;
    return devices;
  };
}

/**
 * How the process opens Dawn's adapter `index`: when another adapter has its name, Mesa's
 * device-select layer is asked for its devices and the adapter is isolated by PCI address,
 * shared (software) or refused (see `adapterOpening`).
 */
function openingOf(adapters: GpuAdapterEntry[], index: number, flag: string, layer: () => LayerDevice[] | undefined): AdapterOpening {
  return hasNamesake(adapters, index) ? adapterOpening(adapters, index, layer(), flag) : { how: 'by-name' };
}

/**
 * Checks, before `--gpus N` spawns its ranks, that this node has an eligible adapter for each
 * (or at least one, when ranks may share them), and that each rank can open its own: with
 * several adapters of one name, through Mesa's device-select layer; throws the one-line user
 * error otherwise.
 */
export function checkGpuAdapters(ranks: number, selection: GpuSelection): void {
  checkRankAdapters(listGpuAdapters(), ranks, selection, layerOnce());
}

/**
 * {@link checkGpuAdapters} on a given listing (pure but for `layer`, called only when two
 * adapters ranks take share a name): Dawn's adapters and the device-select layer's devices.
 */
export function checkRankAdapters(
  listing: { adapters: GpuAdapterEntry[]; loaderMissing: boolean },
  ranks: number,
  selection: GpuSelection,
  layer: () => LayerDevice[] | undefined,
  env: NodeJS.ProcessEnv = process.env,
): void {
  const { adapters, loaderMissing } = listing;
  const flag = selection.flag ?? `--gpus ${ranks}`;
  const eligible = eligibleAdapters(adapters, selection, env);
  if (eligible.length === 0) throw new UserError(noAdapterMessage(adapters, loaderMissing, selection, flag));
  if (eligible.length < ranks && !selection.shareAdapters) {
    const names = eligible.map((a) => a.name).join('; ');
    throw new UserError(`--gpus ${ranks}: asks for one adapter per rank, but this node has ${eligible.length} (${names}); use --gpus ${eligible.length}`);
  }
  for (let rank = 0; rank < ranks; rank++) openingOf(adapters, adapters.indexOf(pickAdapter(eligible, selection, rank)!), flag, layer);
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
  const adapter = pickAdapter(eligible, selection);
  if (!adapter) throw new UserError(noAdapterMessage(adapters, loaderMissing, selection, what));
  const opening = openingOf(adapters, adapters.indexOf(adapter), what, listDeviceSelectLayer);
  if (opening.how === 'isolated') {
    // Before Dawn's instance exists: the layer reads these when Dawn enumerates the devices.
    applyEnv(isolationEnv(opening.pciTag));
    checkIsolated(listGpuAdapters().adapters, adapter.name, opening.pciTag, what);
  }
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
  active = { adapter, adapters, ...(opening.how === 'isolated' ? { pciTag: opening.pciTag } : {}) };
  return active;
}

/** The adapter this process opened (see {@link initWebGpu}). */
let active: WebGpuInfo | undefined;
