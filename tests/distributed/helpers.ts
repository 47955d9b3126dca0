/**
 * Test-side helpers for real multi-process runs: spawn one `node` worker per rank (each with
 * a hard kill timeout, so a test can fail but never hang), collect exit codes and output.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** Compiled worker script `dist/tests/distributed/workers/<name>.js`. */
export function workerPath(name: string): string {
  return join(here, 'workers', `${name}.js`);
}

/** A fresh temporary directory for one test. */
export function freshDir(label: string): string {
  return mkdtempSync(join(tmpdir(), `ssl-zoo-${label}-`));
}

/** A TCP port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** What one rank's process did. */
export interface RankOutcome {
  rank: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Killed by the harness after `killAfterMs`. */
  killed: boolean;
  /** Wall time from spawn to exit. */
  elapsedMs: number;
  /** Last stdout line parsed as JSON (the worker's result), if any. */
  result?: unknown;
  /** Last stderr line parsed as JSON (the worker's error report), if any. */
  error?: { error: string; name?: string; elapsedMs: number };
}

function lastJson(text: string): unknown {
  const lines = text.trim().split('\n').filter(Boolean);
  for (let i = lines.length - 1; i >= 0; i--) {
    try {
      return JSON.parse(lines[i]!);
    } catch {
      // not JSON: keep looking
    }
  }
  return undefined;
}

/** Runs one process to completion (or kills it after `killAfterMs`). */
export function runProcess(args: string[], options: { killAfterMs: number; env?: NodeJS.ProcessEnv; rank?: number; cwd?: string }): Promise<RankOutcome> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let killed = false;
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, options.killAfterMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        rank: options.rank ?? 0,
        code,
        signal,
        stdout,
        stderr,
        killed,
        elapsedMs: Date.now() - started,
        result: lastJson(stdout),
        error: lastJson(stderr) as RankOutcome['error'],
      });
    });
  });
}

/**
 * Spawns `worker` for ranks 0..worldSize-1 with the same spec (written to `<dir>/spec.json`)
 * and waits for all of them. Each process is SIGKILLed after `killAfterMs`.
 */
export async function runRanks(
  worker: string,
  spec: { dir: string; worldSize: number } & Record<string, unknown>,
  killAfterMs = 60_000,
): Promise<RankOutcome[]> {
  const specPath = join(spec.dir, 'spec.json');
  writeFileSync(specPath, JSON.stringify(spec));
  return Promise.all(Array.from({ length: spec.worldSize }, (_, rank) => runProcess([workerPath(worker), specPath, String(rank)], { killAfterMs, rank })));
}

/** Throws with every rank's output when a rank did not exit 0. */
export function expectAllOk(outcomes: RankOutcome[]): void {
  const bad = outcomes.filter((o) => o.code !== 0);
  if (bad.length > 0) {
    const detail = bad.map((o) => `rank ${o.rank}: code ${o.code} signal ${o.signal}${o.killed ? ' (killed: timeout)' : ''}\n${o.stderr}`).join('\n');
    throw new Error(`worker(s) failed:\n${detail}`);
  }
}

/** max |a - b| / max(1, max |b|) over two equal-length arrays. */
export function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length mismatch: ${a.length} vs ${b.length}`);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / Math.max(scale, 1e-30);
}

export { SMALL_PROJECTOR } from '../helpers/run.js';
/** A small CLI setting with batch norm everywhere (mlp backbone, BN heads: SyncBatchNorm matters): synthetic 16x16 data, no workers, no validation. */
export const SMALL_RUN = ['--backbone', 'mlp', '--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '192', '--workers', '0', '--val-every', '0'];
/** Small predictor flags (hidden 32), for the methods with one. */
export const SMALL_PREDICTOR = ['--method-arg', 'predHiddenDim=32'];
