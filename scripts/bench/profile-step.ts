/**
 * `node dist/scripts/bench/profile-step.js [--model tiny_resnet] [--backend cpu] [--reps 2] [--batch B]
 * [--norm group --chunk C]` (the bench:grad-cache step):
 * where a SimCLR training step (the bench:step step) spends its time, per tfjs kernel.
 * Wraps every kernel registered on the active backend with a timer, runs one warm-up step
 * and `reps` timed steps, and prints a table (kernel, calls, total ms, share) sorted by time,
 * plus the time outside kernels (JS glue, tape bookkeeping). `--trace Kernel` prints the
 * distinct call sites of one kernel; `--by-shape` splits the table by input shapes.
 */
import { initEngine, type BackendChoice } from '../../src/core/engine.js';
import type { NormKind } from '../../src/core/layers.js';
import { tf } from '../../src/core/tf.js';
import { flag } from './common.js';
import { buildSimclrStep } from './simclr-step.js';

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

async function main(): Promise<void> {
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
