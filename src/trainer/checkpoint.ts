/**
 * Checkpoint files: the format of `checkpoint-format.ts` (`SSLZCKP1`, shared with the browser
 * page) written atomically, read, verified and searched for in a run directory.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import type { Tensor } from '../core/tf.js';
import {
  checkChecksum,
  checkpointTensors,
  checksummedBytes,
  CheckpointProblem,
  encodeCheckpoint as encodeCheckpointBytes,
  headerLength,
  parseHeader,
  PREFIX_BYTES,
  tensorValues,
  type CheckpointData,
  type CheckpointHeader,
  type Sha256,
} from './checkpoint-format.js';
import { writeFileAtomic } from './files.js';
import { LAST_CHECKPOINT } from './run-dir.js';

export type { CheckpointData } from './checkpoint-format.js';

/** Node's incremental SHA-256 (no copy of the tensor bytes into one buffer). */
const nodeSha256: Sha256 = async (parts) => {
  const hash = createHash('sha256');
  for (const p of parts) hash.update(p);
  return hash.digest('hex');
};

/** A checkpoint as the bytes of a file (see `checkpoint-format.ts`); the tensors are read asynchronously. */
export function encodeCheckpoint(data: CheckpointData): Promise<Uint8Array[]> {
  return encodeCheckpointBytes(data, nodeSha256);
}

/**
 * Writes a checkpoint atomically (see {@link writeFileAtomic}): a temporary file in the
 * same directory, fsync, then rename, so a crash never leaves a half-written checkpoint
 * under `path`. The format is described at {@link encodeCheckpoint}.
 */
export async function saveCheckpoint(path: string, data: CheckpointData): Promise<void> {
  writeFileAtomic(path, await encodeCheckpoint(data));
}

/** Parses a whole checkpoint file and checks its checksum. */
function parseFile(file: Buffer): { header: CheckpointHeader; base: number } {
  const parsed = parseHeader(file, file.byteLength);
  const { header, base } = parsed;
  if (header.checksum)
    checkChecksum(
      header,
      createHash('sha256')
        .update(checksummedBytes(file, header, base))
        .digest('hex'),
    );
  return parsed;
}

/** Reads a checkpoint written by {@link saveCheckpoint}; the caller disposes the tensors. */
export function loadCheckpoint(path: string): CheckpointData {
  if (!existsSync(path)) throw new UserError(`resume: checkpoint ${path} does not exist`);
  const file = readFileSync(path);
  let parsed: { header: CheckpointHeader; base: number };
  try {
    parsed = parseFile(file);
  } catch (e) {
    if (e instanceof CheckpointProblem) throw new UserError(`resume: ${path} ${e.message}`);
    throw e;
  }
  const { header, base } = parsed;
  return { tensors: checkpointTensors(file, header, base), meta: header.meta };
}

/** The metadata of a checkpoint from its header alone (the tensor bytes are not read). */
function readCheckpointMeta(path: string): Record<string, unknown> {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const prefix = Buffer.alloc(PREFIX_BYTES);
    const got = readSync(fd, prefix, 0, PREFIX_BYTES, 0);
    const length = headerLength(prefix.subarray(0, got));
    const head = Buffer.alloc(PREFIX_BYTES + Math.min(length, Math.max(0, size - PREFIX_BYTES)));
    prefix.copy(head);
    readSync(fd, head, PREFIX_BYTES, head.byteLength - PREFIX_BYTES, PREFIX_BYTES);
    return parseHeader(head, size).header.meta;
  } finally {
    closeSync(fd);
  }
}

/** Result of {@link verifyCheckpoint}. */
export type CheckpointCheck = { ok: true; meta: Record<string, unknown> } | { ok: false; reason: string };

/**
 * Whether a checkpoint file is usable: readable, complete (no tensor past the end of the
 * file), its tensor bytes match its checksum, and every float value is finite. `reason`
 * says why not ("is truncated (...)", "is corrupt (...)", "holds non-finite values (...)").
 */
export function verifyCheckpoint(path: string): CheckpointCheck {
  let file: Buffer;
  try {
    file = readFileSync(path);
  } catch (e) {
    return { ok: false, reason: `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` };
  }
  try {
    const { header, base } = parseFile(file);
    for (const e of header.tensors) {
      if (e.dtype !== 'float32') continue;
      const values = tensorValues(file, base, e) as Float32Array;
      for (let i = 0; i < values.length; i++) {
        if (!Number.isFinite(values[i])) return { ok: false, reason: `holds non-finite values (${e.name})` };
      }
    }
    return { ok: true, meta: header.meta };
  } catch (e) {
    if (e instanceof CheckpointProblem) return { ok: false, reason: e.message };
    throw e;
  }
}

/** Training progress as a checkpoint records it. */
export interface SavedProgress {
  /** Zero-based epoch (epochs completed, at an epoch end). */
  epoch: number;
  /** Optimizer steps done. */
  step: number;
  /** Batches done in `epoch`. */
  batchInEpoch: number;
}

/** The progress recorded in checkpoint metadata, or undefined when it is missing or malformed. */
export function savedProgress(meta: Record<string, unknown>): SavedProgress | undefined {
  const p = meta.progress as Partial<SavedProgress> | undefined;
  const ok = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0;
  if (!p || typeof p !== 'object' || !ok(p.epoch) || !ok(p.step) || !ok(p.batchInEpoch)) return undefined;
  return { epoch: p.epoch, step: p.step, batchInEpoch: p.batchInEpoch };
}

/** "epoch 3, batch 30, step 180" (mid-epoch) or "end of epoch 2, step 150"; epochs counted from 1. */
export function describeProgress(p: SavedProgress): string {
  return p.batchInEpoch === 0 ? `end of epoch ${p.epoch}, step ${p.step}` : `epoch ${p.epoch + 1}, batch ${p.batchInEpoch}, step ${p.step}`;
}

/** What {@link findLatestCheckpoint} found. */
export interface CheckpointSearch {
  /** The newest valid checkpoint, if any. */
  latest?: { path: string; progress: SavedProgress };
  /** Checkpoint files passed over, with why: unreadable ones and newer ones that are invalid. */
  skipped: Array<{ path: string; reason: string }>;
  /** Checkpoint files (`*.ckpt`) in the directory. */
  found: number;
}

/**
 * The newest valid checkpoint of `dir` (`*.ckpt`), by the progress recorded inside (the
 * step; at equal steps `last.ckpt` first), not by name or modification time. Newer files
 * that fail {@link verifyCheckpoint}, and files whose header cannot be read, are listed in
 * `skipped` with the reason; older files are not read beyond their header.
 */
export function findLatestCheckpoint(dir: string): CheckpointSearch {
  const names = existsSync(dir)
    ? readdirSync(dir)
        .filter((n) => n.endsWith('.ckpt'))
        .sort()
    : [];
  const skipped: CheckpointSearch['skipped'] = [];
  const candidates: Array<{ path: string; name: string; progress: SavedProgress }> = [];
  for (const name of names) {
    const path = join(dir, name);
    try {
      const progress = savedProgress(readCheckpointMeta(path));
      if (progress) candidates.push({ path, name, progress });
      else skipped.push({ path, reason: 'records no training progress (not a trainer checkpoint)' });
    } catch (e) {
      if (e instanceof CheckpointProblem) skipped.push({ path, reason: e.message });
      else skipped.push({ path, reason: `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` });
    }
  }
  candidates.sort(
    (a, b) => b.progress.step - a.progress.step || Number(b.name === LAST_CHECKPOINT) - Number(a.name === LAST_CHECKPOINT) || a.name.localeCompare(b.name),
  );
  for (const c of candidates) {
    const check = verifyCheckpoint(c.path);
    if (check.ok) return { latest: { path: c.path, progress: c.progress }, skipped, found: names.length };
    skipped.push({ path: c.path, reason: check.reason });
  }
  return { skipped, found: names.length };
}

/** The entries of `tensors` whose name starts with `prefix`, with the prefix removed. */
export function withoutPrefix(tensors: Record<string, Tensor>, prefix: string): Record<string, Tensor> {
  return Object.fromEntries(
    Object.entries(tensors)
      .filter(([name]) => name.startsWith(prefix))
      .map(([name, t]) => [name.slice(prefix.length), t]),
  );
}

/** `tensors` with every name prefixed. */
export function withPrefix(tensors: Record<string, Tensor>, prefix: string): Record<string, Tensor> {
  return Object.fromEntries(Object.entries(tensors).map(([name, t]) => [prefix + name, t]));
}
