/**
 * The run directory, the source of truth for a run: its layout, the writers of its files
 * and their readers. A run writes
 *
 * - `config.json`: the resolved configuration, once at the start;
 * - `metrics.jsonl`: one JSON object per logging call, `{"step", "time", ...metrics}`;
 * - `summary.json`: `{"status", "reason" (when failed or interrupted), "signal" (when
 *   interrupted), ...summary}`, at the end;
 * - `checkpoints/`: `epoch-<n>.ckpt` and `last.ckpt` (the file format is in checkpoint.ts).
 * - `ssl-train.lock`: while a run writes the directory (run-lock.ts).
 *
 * Other components may keep their own files next to these.
 */
import { accessSync, constants, existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { atPath, IoFailure, UserError } from '../core/errors.js';
import { appendFileReported, writeFileAtomic, writeFileReported } from './files.js';

/**
 * How a run ended: it finished, it failed (`reason` says why), or a signal stopped it
 * (SIGTERM, SIGINT, SIGUSR1: `last.ckpt` holds the step it stopped at; resume it).
 */
export type RunStatus = 'success' | 'failed' | 'interrupted';

/** The checkpoint that is rewritten at every checkpoint and at the end of a run. */
export const LAST_CHECKPOINT = 'last.ckpt';

/** The paths of a run directory's files. */
export interface RunDirPaths {
  config: string;
  metrics: string;
  summary: string;
  /** The checkpoint directory. */
  checkpoints: string;
  /** `checkpoints/last.ckpt`. */
  lastCheckpoint: string;
}

/** Where the files of the run directory `runDir` are. */
export function runDirPaths(runDir: string): RunDirPaths {
  const checkpoints = join(runDir, 'checkpoints');
  return {
    config: join(runDir, 'config.json'),
    metrics: join(runDir, 'metrics.jsonl'),
    summary: join(runDir, 'summary.json'),
    checkpoints,
    lastCheckpoint: join(checkpoints, LAST_CHECKPOINT),
  };
}

/** The name of the checkpoint saved at the end of epoch `epoch`. */
export function epochCheckpointName(epoch: number): string {
  return `epoch-${epoch}.ckpt`;
}

// ---------------------------------------------------------------------------------------
// Writing (the directory must exist). A failed write throws an `IoFailure` naming the file.

/**
 * Checks, before anything is trained and without creating anything, that the run directory
 * can be written: its folders that exist (the run directory and `checkpoints/`), else the
 * nearest existing folder above it, where it would be created. A read-only, unwritable or
 * impossible `--run-dir` is a bad input (exit code 2): an `IoFailure` naming it.
 */
export function checkRunDirWritable(runDir: string): void {
  let above = resolve(runDir);
  while (!existsSync(above) && dirname(above) !== above) above = dirname(above);
  if (!statSync(above).isDirectory()) throw new IoFailure(runDir, 'creating', 'ENOTDIR', 'not a directory', 2);
  if (above !== resolve(runDir)) {
    atPath(runDir, 'creating', () => accessSync(above, constants.W_OK), 2);
    return;
  }
  const { checkpoints } = runDirPaths(runDir);
  for (const dir of existsSync(checkpoints) ? [runDir, checkpoints] : [runDir]) atPath(dir, 'writing to', () => accessSync(dir, constants.W_OK), 2);
}

/** Writes `config.json`. */
export function writeRunConfig(runDir: string, config: Record<string, unknown>): void {
  writeFileReported(runDirPaths(runDir).config, `${JSON.stringify(config, null, 2)}\n`);
}

/** Appends one record to `metrics.jsonl`, stamped with the time. */
export function appendMetrics(runDir: string, step: number, metrics: Record<string, number>): void {
  appendFileReported(runDirPaths(runDir).metrics, `${JSON.stringify({ step, time: Date.now() / 1000, ...metrics })}\n`);
}

/** Writes `summary.json` atomically (`signal`: what stopped an interrupted run, e.g. `SIGTERM`). */
export function writeRunSummary(runDir: string, status: RunStatus, summary: Record<string, number>, reason?: string, signal?: string): void {
  const record = { status, ...(reason === undefined ? {} : { reason }), ...(signal === undefined ? {} : { signal }), ...summary };
  writeFileAtomic(runDirPaths(runDir).summary, [`${JSON.stringify(record, null, 2)}\n`]);
}

/**
 * Makes the run directory that of a run continuing after `step`: cuts `metrics.jsonl`
 * back to the rows of steps <= `step` (rewritten atomically; lines that are not JSON,
 * such as one cut short by a crash, go too) and removes the `summary.json` of an earlier
 * attempt: until this run ends, the run is unfinished.
 */
export function rewindRunDir(runDir: string, step: number): void {
  const paths = runDirPaths(runDir);
  atPath(paths.summary, 'removing', () => rmSync(paths.summary, { force: true }));
  if (!existsSync(paths.metrics)) return;
  const lines = atPath(paths.metrics, 'reading', () => readFileSync(paths.metrics, 'utf8'))
    .split('\n')
    .filter((l) => l.trim() !== '');
  const kept = lines.filter((line) => {
    try {
      const row = JSON.parse(line) as { step?: unknown };
      return typeof row.step === 'number' && row.step <= step;
    } catch {
      return false;
    }
  });
  if (kept.length === lines.length) return;
  writeFileAtomic(paths.metrics, [kept.map((l) => `${l}\n`).join('')]);
}

// ---------------------------------------------------------------------------------------
// Reading.

/** One parsed line of `metrics.jsonl`. */
export interface MetricsRecord {
  step: number;
  /** Unix seconds when it was logged. */
  time?: number;
  values: Record<string, number>;
}

/** One history row: every metric logged at one optimizer step. */
export interface HistoryRow {
  step: number;
  values: Record<string, number>;
}

/**
 * Parses `metrics.jsonl` (one `{"step", "time", ...metrics}` object per line; `null`, a
 * non-finite value as JSON writes it, reads as NaN). A malformed line is a user error
 * naming the file and line, except a last line without its newline that is not JSON: a
 * row a running training is appending right now (or one a crash cut short), left out.
 */
export function parseMetricsJsonl(content: string, path: string): MetricsRecord[] {
  const records: MetricsRecord[] = [];
  const lines = content.split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    let object: unknown;
    try {
      object = JSON.parse(line);
    } catch {
      if (i === lines.length - 1) return; // no newline after it: still being written
      throw new UserError(`${path}:${i + 1}: not a JSON object`);
    }
    if (typeof object !== 'object' || object === null || Array.isArray(object)) throw new UserError(`${path}:${i + 1}: not a JSON object`);
    const { step, time, ...rest } = object as Record<string, unknown>;
    if (typeof step !== 'number' || !Number.isInteger(step) || step < 0) {
      throw new UserError(`${path}:${i + 1}: "step" must be an integer >= 0, got ${JSON.stringify(step)}`);
    }
    const values: Record<string, number> = {};
    for (const [key, value] of Object.entries(rest)) {
      if (typeof value === 'number') values[key] = value;
      else if (value === null) values[key] = NaN;
    }
    records.push({ step, time: typeof time === 'number' ? time : undefined, values });
  });
  return records;
}

/** Every record of `<runDir>/metrics.jsonl`, in order (none when there is no such file). */
export function readMetrics(runDir: string): MetricsRecord[] {
  const path = runDirPaths(runDir).metrics;
  return existsSync(path) ? parseMetricsJsonl(readFileSync(path, 'utf8'), path) : [];
}

/**
 * The run's history: one row per optimizer step holding every metric logged at that step
 * (training and validation), in increasing step order. When a step was logged again (a
 * resumed run repeats the steps after its last checkpoint), the later values win.
 */
export function historyRows(records: MetricsRecord[]): HistoryRow[] {
  const byStep = new Map<number, Record<string, number>>();
  for (const r of records) byStep.set(r.step, { ...(byStep.get(r.step) ?? {}), ...r.values });
  return [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([step, values]) => ({ step, values }));
}

/** A run directory as a command reads it back. */
export interface RunDirContents {
  /** `config.json`. */
  config: Record<string, unknown>;
  /** Every line of `metrics.jsonl`, in order. */
  records: MetricsRecord[];
}

function readJsonObject(path: string, command: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UserError(`${command}: ${path} is not valid JSON (${(e as Error).message.split('\n')[0]})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UserError(`${command}: ${path} must hold a JSON object`);
  return value as Record<string, unknown>;
}

/**
 * Reads what every run directory holds, `config.json` and `metrics.jsonl`, for `command`:
 * a missing directory or file, or a malformed one, is a user error naming it.
 */
export function readRunDir(runDir: string, command: string): RunDirContents {
  if (!existsSync(runDir) || !statSync(runDir).isDirectory()) throw new UserError(`${command}: ${runDir} is not a run directory (it does not exist)`);
  const paths = runDirPaths(runDir);
  if (!existsSync(paths.config)) throw new UserError(`${command}: ${runDir} is not a run directory (no config.json)`);
  if (!existsSync(paths.metrics)) throw new UserError(`${command}: ${runDir} has no metrics.jsonl (nothing was logged)`);
  const config = readJsonObject(paths.config, command);
  return { config, records: readMetrics(runDir) };
}

/** `summary.json`, or undefined when the run did not finish; a malformed one is a user error of `command`. */
export function readRunSummary(runDir: string, command: string): Record<string, unknown> | undefined {
  const path = runDirPaths(runDir).summary;
  return existsSync(path) ? readJsonObject(path, command) : undefined;
}

/** The status a run's summary records (`success`, `failed`, `interrupted`), or `unfinished`. */
export function runStatus(summary: Record<string, unknown> | undefined): string {
  return typeof summary?.status === 'string' ? summary.status : 'unfinished';
}
