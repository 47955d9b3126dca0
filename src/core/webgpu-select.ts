/**
 * Telling identical GPUs apart. dawn.node opens an adapter by its *name*
 * (`create(['adapter=<name>'])`), so on a node with several GPUs of the same model every rank
 * would open the first of them (and the Vulkan driver ignores CUDA_VISIBLE_DEVICES).
 *
 * Mesa's Vulkan device-select layer (an implicit layer, Debian/Ubuntu package
 * `mesa-vulkan-drivers`) sits between Dawn and the drivers and can hide all devices but one:
 * `DRI_PRIME=pci-DDDD_BB_DD_F` makes the device at that PCI address the default, and
 * `MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1` exposes the default alone. Its list
 * (`MESA_VK_DEVICE_SELECT=list`, printed to stderr, after which it ends the process) gives
 * each device's PCI address when the driver has `VK_EXT_pci_bus_info` (NVIDIA's and AMD's
 * do; SwiftShader and llvmpipe do not).
 *
 * So a rank whose adapter shares its name with another of Dawn's adapters takes the k-th
 * device of that name in the layer's list for the k-th adapter of that name in Dawn's, sets
 * those two variables in its own environment before Dawn's instance exists, and checks that
 * Dawn then lists exactly one adapter of that name. Both lists follow the drivers' order
 * (the layer may move its default device first in Dawn's; the mapping stays one to one, so
 * ranks still get distinct devices). Formats: Mesa 22.3's
 * src/vulkan/device-select-layer/device_select_layer.c (`print_gpu`,
 * `device_select_find_dri_prime_tag_default`).
 */
import { UserError } from './errors.js';

/** One adapter as Dawn lists it. */
export interface GpuAdapterEntry {
  /** The device name, e.g. `NVIDIA H100 80GB HBM3` or `SwiftShader Device (Subzero)`. */
  name: string;
  /** Dawn's backend: `vulkan`, `metal`, `d3d12`, ... */
  api: string;
  /** A CPU implementation (SwiftShader, llvmpipe/lavapipe, WARP): correct but slow. */
  software: boolean;
}

/** One device as Mesa's device-select layer lists it. */
export interface LayerDevice {
  /** Its position in the layer's list (the drivers' order). */
  index: number;
  /** PCI vendor and device ids, hex as printed (`10de`, `2330`). */
  vendorId: string;
  deviceId: string;
  /** Vulkan's deviceName: the name Dawn lists. */
  name: string;
  /** `discrete GPU`, `integrated GPU`, `virtual GPU`, `CPU` or `other`. */
  type: string;
  /** The `DRI_PRIME` tag of its PCI address, e.g. `pci-0000_18_00_0`; absent without bus info. */
  pciTag?: string;
}

/** The line the layer prints before its devices. */
export const DEVICE_SELECT_LIST_HEADER = 'selectable devices:';

/** `  GPU 0: 10de:2330 "NVIDIA H100 80GB HBM3" discrete GPU 0000:18:00.0` (the address only with bus info). */
const DEVICE_LINE =
  /^\s*GPU (\d+): ([0-9a-f]+):([0-9a-f]+) "(.*)" (other|integrated GPU|discrete GPU|virtual GPU|CPU)(?: ([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7]))?\s*$/i;

/**
 * The devices in the output of `MESA_VK_DEVICE_SELECT=list` (other lines, such as drivers'
 * warnings, are passed over); undefined when the output has no such list (no layer). When one
 * driver has bus info the layer prints an address for every device, 0000:00:00.0 for those
 * without (SwiftShader beside an NVIDIA GPU): that one counts as none.
 */
export function parseDeviceSelectList(output: string): LayerDevice[] | undefined {
  const lines = output.split('\n');
  const start = lines.findIndex((line) => line.trim() === DEVICE_SELECT_LIST_HEADER);
  if (start < 0) return undefined;
  const devices: LayerDevice[] = [];
  for (const line of lines.slice(start + 1)) {
    const m = DEVICE_LINE.exec(line);
    if (!m) continue;
    const [, index, vendorId, deviceId, name, type, domain, bus, device, fn] = m;
    devices.push({
      index: Number(index),
      vendorId: vendorId!.toLowerCase(),
      deviceId: deviceId!.toLowerCase(),
      name: name!,
      type: type!,
      ...(domain && `${domain}${bus}${device}${fn}` !== '000000000' ? { pciTag: `pci-${domain}_${bus}_${device}_${fn}`.toLowerCase() } : {}),
    });
  }
  return devices;
}

/** The environment that leaves a process's Vulkan loader one device: the one at `pciTag`. */
export function isolationEnv(pciTag: string): Record<string, string | undefined> {
  return {
    DRI_PRIME: pciTag,
    MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: '1',
    // The layer obeys MESA_VK_DEVICE_SELECT before DRI_PRIME: a user's choice there would
    // give every rank the same device.
    MESA_VK_DEVICE_SELECT: undefined,
  };
}

/** Sets (or, for undefined, removes) variables in this process's real environment. */
export function applyEnv(vars: Record<string, string | undefined>, env: NodeJS.ProcessEnv = process.env): void {
  for (const [key, value] of Object.entries(vars)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
}

/** How a process opens Dawn's adapter at some index of its list. */
export type AdapterOpening =
  /** By name: the name is unique, or it is the first of its name and nothing can isolate it. */
  | { how: 'by-name' }
  /** By name, though it is not the first of its name: a software adapter, shared with the first. */
  | { how: 'shared-software' }
  /** By name after {@link isolationEnv}: the layer leaves the process this device alone. */
  | { how: 'isolated'; pciTag: string; device: LayerDevice };

/** Whether another of Dawn's adapters has the same name as the one at `index`. */
export function hasNamesake(adapters: GpuAdapterEntry[], index: number): boolean {
  const name = adapters[index]!.name;
  return adapters.some((a, i) => i !== index && a.name === name);
}

/**
 * How to open Dawn's adapter `index` (pure: `layer` is the device-select layer's list, or
 * undefined without the layer). Throws the one-line user error when the adapter is a hardware
 * one that Dawn cannot open by name and the layer cannot isolate; `flag` names the request.
 */
export function adapterOpening(adapters: GpuAdapterEntry[], index: number, layer: LayerDevice[] | undefined, flag: string): AdapterOpening {
  const adapter = adapters[index]!;
  const namesakes = adapters.flatMap((a, i) => (a.name === adapter.name ? [i] : []));
  if (namesakes.length === 1) return { how: 'by-name' };
  const k = namesakes.indexOf(index);
  const devices = (layer ?? []).filter((d) => d.name === adapter.name);
  let why: string;
  if (!layer) why = "Mesa's Vulkan device-select layer is not installed (or NODEVICE_SELECT disables it)";
  else if (devices.length !== namesakes.length) why = `Mesa's device-select layer lists ${devices.length} devices of that name`;
  else if (devices.some((d) => !d.pciTag)) why = "their Vulkan driver gives Mesa's device-select layer no PCI bus info";
  else return { how: 'isolated', pciTag: devices[k]!.pciTag!, device: devices[k]! };
  if (k === 0) return { how: 'by-name' };
  if (adapter.software) return { how: 'shared-software' };
  const remedy = layer
    ? 'use --gpus 1 per machine or container'
    : 'install mesa-vulkan-drivers (its Vulkan device-select layer tells them apart by PCI address), or use --gpus 1 per machine or container';
  throw new UserError(
    `${flag}: Dawn opens adapters by name and this node has ${namesakes.length} named "${adapter.name}" (adapters ${namesakes.join(', ')} of Dawn's list): adapter ${index} would be opened as adapter ${namesakes[0]}; ${why}; ${remedy}`,
  );
}

/** Whether Dawn's listing after {@link isolationEnv} shows the isolated adapter alone. */
export function checkIsolated(listed: GpuAdapterEntry[], name: string, pciTag: string, flag: string): void {
  const count = listed.filter((a) => a.name === name).length;
  if (count !== 1) {
    throw new UserError(
      `${flag}: with DRI_PRIME=${pciTag} and MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1 Dawn lists ${count} adapters named "${name}", expected 1 (Dawn lists: ${listed.map((a) => a.name).join('; ') || 'none'}); Mesa's device-select layer did not isolate the device`,
    );
  }
}
