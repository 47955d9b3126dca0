/**
 * `node dist/scripts/bench/adapter-info.js`: the GPU adapters Dawn lists (ssl-zoo's listing,
 * src/core/webgpu.ts) and, for the one `--backend webgpu` picks, Dawn's GPUAdapterInfo
 * (vendor, architecture, device, description), its features and main limits. Prints one JSON
 * object as its last line (and writes bench-results/adapter.json).
 */
import { initEngine } from '../../src/core/engine.js';
import { listGpuAdapters, vulkanDriverSearchPaths } from '../../src/core/webgpu.js';
import { tf } from '../../src/core/tf.js';
import { exitWhenFlushed, writeReport } from './common.js';

async function main(): Promise<void> {
  const listed = listGpuAdapters();
  const report: Record<string, unknown> = {
    adapters: listed.adapters,
    vulkan_loader_missing: listed.loaderMissing,
    vulkan_driver_search: vulkanDriverSearchPaths(),
  };
  try {
    const engine = await initEngine('webgpu');
    report.chosen = engine.gpu?.adapter;
    const backend = tf.backend() as unknown as { device: GPUDevice; adapterInfo?: unknown };
    const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
    const adapter = await gpu?.requestAdapter({ powerPreference: 'high-performance' });
    if (adapter) {
      const i = adapter.info;
      report.info = { vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description };
      report.features = [...adapter.features].sort();
      const l = adapter.limits;
      report.limits = {
        maxBufferSize: l.maxBufferSize,
        maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
        maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
        maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
      };
    }
    report.device_timestamp_query = backend.device.features.has('timestamp-query');
  } catch (e) {
    report.error = String((e as Error).message ?? e);
  }
  writeReport('adapter', report);
  await exitWhenFlushed();
}

await main();
