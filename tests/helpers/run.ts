import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The compiled CLI entry point. */
export const CLI = fileURLToPath(new URL('../../src/cli/bin.js', import.meta.url));

/** A fresh temporary directory. */
export function tempDir(prefix = 'ssl-zoo-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** What a finished `ssl-train` process left: its exit code (null if killed) and its output. */
export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `ssl-train args...` to completion (bounded by `timeoutMs`, with `env` added) and returns its output. */
export function runCli(args: string[], timeoutMs = 120_000, env: NodeJS.ProcessEnv = {}): CliResult {
  const result = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, FORCE_COLOR: '0', ...env } });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** {@link runCli} without blocking: the process is killed (SIGTERM) after `timeoutMs`. */
function runCliAsync(args: string[], timeoutMs: number): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, FORCE_COLOR: '0' }, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/**
 * Runs every command line of `argvs` as its own `ssl-train` process, `concurrency` at a time
 * (a start is mostly Node loading modules on one core, so two overlap on two cores), and
 * returns their results in the order given.
 */
export async function runClis(argvs: string[][], timeoutMs = 120_000, concurrency = 2): Promise<CliResult[]> {
  const results: CliResult[] = new Array(argvs.length);
  let next = 0;
  const worker = async () => {
    while (next < argvs.length) {
      const i = next++;
      results[i] = await runCliAsync(argvs[i]!, timeoutMs);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, argvs.length) }, worker));
  return results;
}

/** 64 synthetic 16x16 images, batch 8, no workers, a 64-image kNN memory: for runs of a step or two whose backbone the test picks. */
export const TINY_DATA_FLAGS = [
  '--dataset',
  'synthetic',
  '--image-size',
  '16',
  '--synthetic-size',
  '64',
  '--batch-size',
  '8',
  '--workers',
  '0',
  '--knn-train-samples',
  '64',
];

/** A small MAE decoder (its defaults are 512 wide and 8 deep): width 32, 2 heads, `depth` blocks. */
export function smallMaeDecoder(depth = 1): string[] {
  return ['--method-arg', 'decoderEmbedDim=32', '--method-arg', `decoderDepth=${depth}`, '--method-arg', 'decoderNumHeads=2'];
}

/** Small projector flags (hidden 32, output 16). */
export const SMALL_PROJECTOR = ['--method-arg', 'projHiddenDim=32', '--method-arg', 'projOutputDim=16'];

/** Small, fast training flags: synthetic 16x16 data, mlp backbone, small heads, no workers. */
export const SMOKE_FLAGS = [
  '--dataset',
  'synthetic',
  '--image-size',
  '16',
  '--synthetic-size',
  '256',
  '--backbone',
  'mlp',
  '--batch-size',
  '32',
  '--workers',
  '0',
  '--knn-train-samples',
  '256',
  ...SMALL_PROJECTOR,
];
