/**
 * `npm run bench:grad-cache`: peak resident memory and step time of a SimCLR training step
 * (two views, `tiny_resnet` with group norm, 28x28x1) at local batches 256, 1024, 4096 and
 * 8192, with the gradient cache (chunk 128) and, where it fits, without. Every
 * configuration runs in its own process (peak RSS = `process.resourceUsage().maxRSS`).
 *
 * Flags: --batches 256,1024,4096,8192  --chunk 128  --plain-batches 256,1024 (the unchunked
 * runs; larger ones need many GB of activations)  --reps 5 (timed steps after a warm-up
 * step, for batches <= 1024, reported as their median; larger batches time a single step).
 * Prints one JSON object as its last line and writes bench-results/grad-cache.json, with
 * `memory_ratio_8192_vs_256` (chunked peak RSS at 8192 over that at 256) and
 * `time_per_sample_ratio` (the worst, over batches where both ran, of chunked over
 * unchunked step time per sample).
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { initEngine } from '../../src/core/engine.js';
import { flag, median, timeSteps, writeReport } from './common.js';
import { buildSimclrStep } from './simclr-step.js';

interface Measurement {
  batch: number;
  chunk: number | null;
  /** Median of `steps_s`. */
  step_s: number;
  steps_s: number[];
  per_sample_ms: number;
  peak_rss_mb: number;
  loss: number;
}

async function child(batch: number, chunk: number | undefined, reps: number): Promise<Measurement> {
  await initEngine('cpu');
  const step = buildSimclrStep('tiny_resnet', {
    batch,
    norm: 'group',
    gradCacheChunk: chunk,
    methodArgs: { projHiddenDim: 512, projOutputDim: 128 },
  });
  let loss = 0;
  const steps = timeSteps(() => {
    loss = step();
  }, reps);
  const stepS = median(steps);
  return {
    batch,
    chunk: chunk ?? null,
    step_s: stepS,
    steps_s: steps,
    per_sample_ms: (stepS / batch) * 1000,
    peak_rss_mb: process.resourceUsage().maxRSS / 1024,
    loss,
  };
}

async function main(): Promise<void> {
  if (process.argv.includes('--child')) {
    const chunk = flag('chunk', 'none');
    const result = await child(Number(flag('batch', '256')), chunk === 'none' ? undefined : Number(chunk), Number(flag('reps', '5')));
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return;
  }
  const batches = flag('batches', '256,1024,4096,8192').split(',').map(Number);
  const plainBatches = flag('plain-batches', '256,1024').split(',').map(Number);
  const chunk = flag('chunk', '128');
  const reps = flag('reps', '5');
  const self = fileURLToPath(import.meta.url);
  const measure = (batch: number, chunkArg: string): Measurement => {
    const r = spawnSync(process.execPath, [self, '--child', '--batch', String(batch), '--chunk', chunkArg, '--reps', batch <= 1024 ? reps : '1'], {
      encoding: 'utf8',
      maxBuffer: 1 << 24,
    });
    if (r.status !== 0) throw new Error(`batch ${batch} chunk ${chunkArg} failed:\n${r.stderr}`);
    const m = JSON.parse(r.stdout.trim().split('\n').pop() as string) as Measurement;
    process.stderr.write(
      `batch ${batch} chunk ${chunkArg}: ${m.step_s.toFixed(2)} s/step, ${m.per_sample_ms.toFixed(2)} ms/sample, peak RSS ${m.peak_rss_mb.toFixed(0)} MB\n`,
    );
    return m;
  };
  const chunked = batches.map((b) => measure(b, chunk));
  const plain = plainBatches.map((b) => measure(b, 'none'));
  const byBatch = (ms: Measurement[], b: number) => ms.find((m) => m.batch === b);
  const memoryRatio =
    byBatch(chunked, 8192) && byBatch(chunked, 256)
      ? (byBatch(chunked, 8192) as Measurement).peak_rss_mb / (byBatch(chunked, 256) as Measurement).peak_rss_mb
      : null;
  const timeRatios = plain.map((p) => (byBatch(chunked, p.batch) as Measurement).per_sample_ms / p.per_sample_ms);
  const report = {
    benchmark: 'grad-cache',
    method: 'simclr',
    model: 'tiny_resnet (group norm), 28x28x1, two views',
    chunk: Number(chunk),
    chunked,
    unchunked: plain,
    unchunked_skipped: batches
      .filter((b) => !plainBatches.includes(b))
      .map((b) => ({ batch: b, reason: 'not run: activations of the whole batch need many GB' })),
    memory_ratio_8192_vs_256: memoryRatio,
    time_per_sample_ratio: timeRatios.length ? Math.max(...timeRatios) : null,
    targets: { memory_ratio_8192_vs_256: 2, time_per_sample_ratio: 1.4 },
    date: new Date().toISOString(),
  };
  writeReport('grad-cache', report);
}

await main();
