/** Shared pieces of the benchmark scripts (docs/design.md: one JSON line, bench-results/<name>.json). */
import { mkdirSync, writeFileSync } from 'node:fs';
import type { Rng } from '../../src/core/random.js';
import type { MultiViewBatch } from '../../src/data/loader.js';

/** The value after `--name` on the command line, or `fallback`. */
export function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

/** The median of `xs`. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** A two-view batch of normal noise `[batch, size, size, channels]` with labels 0..9. */
export function noiseBatch(rng: Rng, batch: number, size: number, channels: number): MultiViewBatch {
  const n = batch * size * size * channels;
  return {
    views: [rng.normalArray(n), rng.normalArray(n)],
    shape: [batch, size, size, channels],
    shapes: [],
    labels: new Int32Array(batch).map((_, i) => i % 10),
    indices: new Int32Array(batch),
    index: 0,
  };
}

/** Seconds of each of `reps` calls of `step`, after one warm-up call when reps > 1. */
export function timeSteps(step: () => void, reps: number): number[] {
  if (reps > 1) step();
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const start = performance.now();
    step();
    times.push((performance.now() - start) / 1000);
  }
  return times;
}

/** Writes bench-results/<name>.json and prints the report as the last stdout line. */
export function writeReport(name: string, report: object): void {
  mkdirSync('bench-results', { recursive: true });
  writeFileSync(`bench-results/${name}.json`, `${JSON.stringify(report, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

/**
 * Exits once stdout and stderr are flushed: on the WebGPU engine Dawn's device keeps the
 * event loop alive (as src/cli/bin.ts does for the CLI).
 */
export async function exitWhenFlushed(code = 0): Promise<never> {
  await new Promise<void>((resolve) => process.stdout.write('', () => process.stderr.write('', () => resolve())));
  process.exit(code);
}
