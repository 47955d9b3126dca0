import { spawnSync } from 'node:child_process';
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

/** Runs `ssl-train args...` to completion (bounded by `timeoutMs`, with `env` added) and returns its output. */
export function runCli(args: string[], timeoutMs = 120_000, env: NodeJS.ProcessEnv = {}): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, FORCE_COLOR: '0', ...env } });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
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
