import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint, savedProgress, verifyCheckpoint, type SavedProgress } from '../../src/trainer/checkpoint.js';
import { CLI } from './run.js';

/** One row of a run's `metrics.jsonl`. */
export type MetricsRow = Record<string, number | null>;

/** The rows of `<runDir>/metrics.jsonl` (a line cut short by a kill is left out). */
export function metricsRows(runDir: string): MetricsRow[] {
  const path = join(runDir, 'metrics.jsonl');
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as MetricsRow];
      } catch {
        return [];
      }
    });
}

/** A row without what differs between identical runs (wall-clock time, throughput). */
export function comparableRow(row: MetricsRow): MetricsRow {
  const { time: _time, 'train/images_per_sec': _speed, ...rest } = row;
  return rest;
}

/** Every tensor of the checkpoint at `path`, copied out of the engine, by name. */
export function checkpointArrays(path: string): Record<string, Float32Array | Int32Array> {
  const ckpt = loadCheckpoint(path);
  const out: Record<string, Float32Array | Int32Array> = {};
  for (const [name, t] of Object.entries(ckpt.tensors)) out[name] = (t.dataSync() as Float32Array | Int32Array).slice();
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

/** Where the checkpoint at `path` stands, or undefined when it is not a valid checkpoint (yet). */
export function checkpointProgress(path: string): SavedProgress | undefined {
  const check = verifyCheckpoint(path);
  return check.ok ? savedProgress(check.meta) : undefined;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `ssl-train args...` (which must include `--run-dir runDir`) and kills it with SIGKILL
 * once `<runDir>/checkpoints/last.ckpt` is a mid-epoch checkpoint and training rows after its
 * step are in `metrics.jsonl` (steps a resume must redo). The process is paused (SIGSTOP)
 * while the two files are read, so neither moves meanwhile. Resolves after the process has
 * exited: `killedAt` is the checkpoint's progress, undefined when the run ended first or
 * `timeoutMs` passed (then it is killed too); `signal` is what ended it.
 */
export async function killAfterMidEpochCheckpoint(
  args: string[],
  runDir: string,
  timeoutMs: number,
): Promise<{ killedAt: SavedProgress | undefined; signal: NodeJS.Signals | null }> {
  const last = join(runDir, 'checkpoints', 'last.ckpt');
  const child = spawn(process.execPath, [CLI, ...args], { stdio: 'ignore' });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  let ended = false;
  void exited.then(() => (ended = true));
  let killedAt: SavedProgress | undefined;
  const started = Date.now();
  while (!killedAt && !ended && Date.now() - started < timeoutMs) {
    await sleep(5);
    if (!existsSync(last)) continue;
    child.kill('SIGSTOP');
    const progress = checkpointProgress(last);
    const after = metricsRows(runDir).filter((r) => r['train/loss'] !== undefined && (r.step as number) > (progress?.step ?? Infinity));
    if (progress && progress.batchInEpoch > 0 && after.length > 0) {
      killedAt = progress;
      child.kill('SIGKILL');
    } else {
      child.kill('SIGCONT');
    }
  }
  if (!killedAt && !ended) child.kill('SIGKILL');
  return { killedAt, signal: await exited };
}
