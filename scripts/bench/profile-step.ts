/**
 * `node dist/scripts/bench/profile-step.js [--model tiny_resnet] [--backend cpu] [--reps 2] [--batch B]
 * [--norm group --chunk C]` (the bench:grad-cache step):
 * where a SimCLR training step (the bench:step step) spends its time, per tfjs kernel.
 * Wraps every kernel registered on the active backend with a timer, runs one warm-up step
 * and `reps` timed steps, and prints a table (kernel, calls, total ms, share) sorted by time,
 * plus the time outside kernels (JS glue, tape bookkeeping). `--trace Kernel` prints the
 * distinct call sites of one kernel; `--by-shape` splits the table by input shapes.
 *
 * `--backend webgpu`: kernels run asynchronously on the device, so a host-side timer would
 * only measure encoding. Instead one step (after a warm-up step that compiles the shaders)
 * runs under `tf.profile`, which on WebGPU times each kernel's compute passes with
 * timestamp queries (`timestamp-query`, which the engine requests when the adapter has it:
 * SwiftShader has it too); each timed kernel ends its own compute pass, so the profiled step
 * is slower than a plain one. Flags: `--size S`, `--batch B`, `--top 30`, `--name
 * profile-step-webgpu` (bench-results/<name>.json, JSON as its last stdout line). Without
 * `timestamp-query` the GPU times would be zeros; the profile then falls back to the
 * host-side time of each kernel call (encoding and dispatch only, said in `timing`): a sync
 * after each kernel is not possible, since kernels are synchronous calls and WebGPU in Node
 * can only wait asynchronously.
 */
import { initEngine, type BackendChoice } from '../../src/core/engine.js';
import type { NormKind } from '../../src/core/layers.js';
import { tf } from '../../src/core/tf.js';
import { exitWhenFlushed, flag, writeReport } from './common.js';
import { buildSimclrDeviceStep, buildSimclrStep } from './simclr-step.js';

interface Entry {
  calls: number;
  ms: number;
}

/** `--trace Kernel` prints where each distinct call site of that kernel comes from. */
function instrument(backendName: string, trace: string, byShape: boolean): Map<string, Entry> {
  const sites = new Set<string>();
  const table = new Map<string, Entry>();
  for (const config of tf.getKernelsForBackend(backendName)) {
    const inner = config.kernelFunc;
    const timed: typeof inner = (args) => {
      if (config.kernelName === trace) {
        const site = (new Error().stack ?? '')
          .split('\n')
          .filter((l) => !l.includes('profile-step') && !l.includes('engine.js'))
          .slice(1, 14)
          .join('\n');
        if (!sites.has(site)) {
          sites.add(site);
          console.log(
            `${trace} [${
              args.inputs &&
              Object.values(args.inputs)
                .map((t) => `[${t?.shape}]`)
                .join(' ')
            }] from\n${site}\n`,
          );
        }
      }
      const start = performance.now();
      const out = inner(args);
      const key = byShape
        ? `${config.kernelName} ${Object.values(args.inputs)
            .map((t) => `[${t?.shape}]`)
            .join('')}`
        : config.kernelName;
      const entry = table.get(key) ?? { calls: 0, ms: 0 };
      entry.calls++;
      entry.ms += performance.now() - start;
      table.set(key, entry);
      return out;
    };
    (config as { kernelFunc: typeof inner }).kernelFunc = timed;
  }
  return table;
}

interface KernelRow {
  name: string;
  calls: number;
  ms: number;
  share: number;
  shapes?: string;
}

/** The WebGPU profile: one step under tf.profile (timestamp queries), kernels by GPU time. */
async function profileDevice(): Promise<void> {
  const engine = await initEngine('webgpu');
  const model = flag('model', 'tiny_resnet');
  const batch = process.argv.includes('--batch') ? Number(flag('batch', '0')) : undefined;
  const size = process.argv.includes('--size') ? Number(flag('size', '0')) : undefined;
  const top = Number(flag('top', '30'));
  const byShape = process.argv.includes('--by-shape');
  const { step } = buildSimclrDeviceStep(model, { batch, size });
  const warm = step();
  await warm.data();
  warm.dispose();
  const plainStart = performance.now();
  const plain = step();
  await plain.data();
  plain.dispose();
  const plainMs = performance.now() - plainStart;
  const device = (tf.backend() as unknown as { device?: GPUDevice }).device;
  const timestamps = device?.features.has('timestamp-query') ?? false;
  const host = timestamps ? undefined : instrument(tf.getBackend(), '', byShape);
  const start = performance.now();
  const info = await tf.profile(async () => {
    const loss = step();
    await loss.data();
    loss.dispose();
  });
  const profiledMs = performance.now() - start;
  const table = new Map<string, { calls: number; ms: number; shapes: string }>();
  if (host) for (const [name, e] of host) table.set(name, { ...e, shapes: '' });
  else {
    for (const k of info.kernels) {
      const key = byShape ? `${k.name} ${k.inputShapes.map((s) => `[${s}]`).join('')}` : k.name;
      const e = table.get(key) ?? { calls: 0, ms: 0, shapes: '' };
      e.calls++;
      e.ms += typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
      table.set(key, e);
    }
  }
  const total = [...table.values()].reduce((s, e) => s + e.ms, 0);
  const rows: KernelRow[] = [...table.entries()]
    .map(([name, e]) => ({ name, calls: e.calls, ms: e.ms, share: total > 0 ? e.ms / total : 0 }))
    .sort((a, b) => b.ms - a.ms);
  console.error(`step ${plainMs.toFixed(0)} ms (profiled ${profiledMs.toFixed(0)} ms); kernels ${total.toFixed(1)} ms, ${info.kernels.length} calls`);
  for (const r of rows.slice(0, top)) {
    console.error(`${r.name.padEnd(32)} ${String(r.calls).padStart(5)} ${r.ms.toFixed(2).padStart(10)} ms ${(100 * r.share).toFixed(1).padStart(5)}%`);
  }
  writeReport(flag('name', 'profile-step-webgpu'), {
    benchmark: 'profile-step',
    backend: 'webgpu',
    adapter: engine.gpu?.adapter,
    model,
    batch: batch ?? null,
    size: size ?? null,
    timing: timestamps ? 'gpu-timestamp-query' : 'host-encode (no timestamp-query: GPU time not measured)',
    step_ms: plainMs,
    profiled_step_ms: profiledMs,
    kernel_ms_total: total,
    kernel_calls: info.kernels.length,
    kernels: rows.slice(0, top),
    date: new Date().toISOString(),
  });
  await exitWhenFlushed();
}

async function main(): Promise<void> {
  if (flag('backend', 'cpu') === 'webgpu') return profileDevice();
  await initEngine(flag('backend', 'cpu') as BackendChoice);
  const model = flag('model', 'tiny_resnet');
  const reps = Number(flag('reps', '2'));
  const batch = process.argv.includes('--batch') ? Number(flag('batch', '0')) : undefined;
  const chunk = process.argv.includes('--chunk') ? Number(flag('chunk', '0')) : undefined;
  const norm = flag('norm', 'batch') as NormKind;
  const methodArgs = norm === 'batch' ? undefined : { projHiddenDim: 512, projOutputDim: 128 }; // as bench:grad-cache
  const step = buildSimclrStep(model, { batch, norm, gradCacheChunk: chunk, methodArgs });
  step();
  const table = instrument(tf.getBackend(), flag('trace', ''), process.argv.includes('--by-shape'));
  const start = performance.now();
  for (let i = 0; i < reps; i++) step();
  const total = (performance.now() - start) / reps;
  const rows = [...table.entries()].map(([name, e]) => ({ name, calls: e.calls / reps, ms: e.ms / reps })).sort((a, b) => b.ms - a.ms);
  const inKernels = rows.reduce((s, r) => s + r.ms, 0);
  console.log(`step ${total.toFixed(0)} ms; in kernels ${inKernels.toFixed(0)} ms; outside ${(total - inKernels).toFixed(0)} ms`);
  const byShapeWidth = Math.max(28, ...rows.slice(0, 40).map((r) => r.name.length + 1));
  for (const r of rows.slice(0, 40)) {
    console.log(
      `${r.name.padEnd(byShapeWidth)} ${String(r.calls).padStart(5)} ${r.ms.toFixed(1).padStart(9)} ms ${((100 * r.ms) / total).toFixed(1).padStart(5)}%`,
    );
  }
}

await main();
