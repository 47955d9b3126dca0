import { createHash } from 'node:crypto';
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import { writeFileAtomic } from './files.js';
import { LAST_CHECKPOINT } from './run-dir.js';

const MAGIC = 'SSLZCKP1';
/** Magic (8 bytes) and header length (uint32 LE). */
const PREFIX_BYTES = 12;

interface TensorEntry {
  name: string;
  dtype: 'float32' | 'int32';
  shape: number[];
  offset: number;
  length: number;
}

interface Header {
  meta: Record<string, unknown>;
  tensors: TensorEntry[];
  /** SHA-256 of the tensor bytes (checkpoints written before it was added have none). */
  checksum?: { algorithm: 'sha256'; value: string };
}

/** A checkpoint in memory: named tensors plus JSON metadata. */
export interface CheckpointData {
  tensors: Record<string, Tensor>;
  meta: Record<string, unknown>;
}

/** Why a checkpoint file cannot be used (a phrase that follows the file name: "is truncated (...)"). */
class CheckpointProblem extends Error {}

/**
 * A checkpoint as the bytes of a file: 8-byte magic `SSLZCKP1`, uint32 LE header length,
 * UTF-8 JSON header `{ meta, tensors: [{ name, dtype, shape, offset, length }], checksum }`,
 * then the raw little-endian tensor bytes (float32 or int32) at the given byte offsets;
 * `checksum` is the SHA-256 of those bytes. The tensors are read asynchronously.
 */
export async function encodeCheckpoint(data: CheckpointData): Promise<Uint8Array[]> {
  const entries: TensorEntry[] = [];
  const buffers: Uint8Array[] = [];
  const hash = createHash('sha256');
  let offset = 0;
  for (const [name, t] of Object.entries(data.tensors)) {
    const dtype = t.dtype === 'int32' ? 'int32' : 'float32';
    const read = await t.data();
    const values = dtype === 'int32' ? Int32Array.from(read as Int32Array) : Float32Array.from(read as Float32Array);
    const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    entries.push({ name, dtype, shape: t.shape, offset, length: bytes.byteLength });
    buffers.push(bytes);
    hash.update(bytes);
    offset += bytes.byteLength;
  }
  const header: Header = { meta: data.meta, tensors: entries, checksum: { algorithm: 'sha256', value: hash.digest('hex') } };
  const headerBytes = Buffer.from(JSON.stringify(header), 'utf8');
  const prefix = Buffer.alloc(PREFIX_BYTES);
  prefix.write(MAGIC, 0, 'latin1');
  prefix.writeUInt32LE(headerBytes.byteLength, 8);
  return [prefix, headerBytes, ...buffers];
}

/**
 * Writes a checkpoint atomically (see {@link writeFileAtomic}): a temporary file in the
 * same directory, fsync, then rename, so a crash never leaves a half-written checkpoint
 * under `path`. The format is described at {@link encodeCheckpoint}.
 */
export async function saveCheckpoint(path: string, data: CheckpointData): Promise<void> {
  writeFileAtomic(path, await encodeCheckpoint(data));
}

/** The header of a checkpoint whose first bytes are `head` (at least the prefix and header) in a file of `fileSize` bytes. */
function parseHeader(head: Buffer, fileSize: number): { header: Header; base: number } {
  if (head.byteLength < PREFIX_BYTES || head.toString('latin1', 0, 8) !== MAGIC) throw new CheckpointProblem('is not an ssl-zoo checkpoint (bad magic)');
  const headerLength = head.readUInt32LE(8);
  const base = PREFIX_BYTES + headerLength;
  if (base > fileSize) throw new CheckpointProblem(`is truncated (${fileSize} bytes, its header alone ends at byte ${base})`);
  let header: Header;
  try {
    header = JSON.parse(head.toString('utf8', PREFIX_BYTES, base)) as Header;
  } catch {
    throw new CheckpointProblem('has a corrupt header');
  }
  if (typeof header !== 'object' || header === null || typeof header.meta !== 'object' || header.meta === null || !Array.isArray(header.tensors)) {
    throw new CheckpointProblem('has a corrupt header');
  }
  for (const e of header.tensors) {
    const elements = Array.isArray(e?.shape) ? e.shape.reduce((a, b) => a * b, 1) : NaN;
    if (
      typeof e.name !== 'string' ||
      (e.dtype !== 'float32' && e.dtype !== 'int32') ||
      !Number.isInteger(e.offset) ||
      e.offset < 0 ||
      e.length !== elements * 4
    ) {
      throw new CheckpointProblem('has a corrupt header (bad tensor entry)');
    }
    if (base + e.offset + e.length > fileSize) {
      throw new CheckpointProblem(`is truncated (tensor '${e.name}' ends past the end of the file)`);
    }
  }
  return { header, base };
}

/** Parses a whole checkpoint file and checks its checksum. */
function parseFile(file: Buffer): { header: Header; base: number } {
  const parsed = parseHeader(file, file.byteLength);
  const { header, base } = parsed;
  if (header.checksum) {
    const end = header.tensors.reduce((m, e) => Math.max(m, e.offset + e.length), 0);
    const actual = createHash('sha256')
      .update(file.subarray(base, base + end))
      .digest('hex');
    if (header.checksum.algorithm !== 'sha256' || actual !== header.checksum.value) {
      throw new CheckpointProblem('is corrupt (its tensor data does not match its checksum)');
    }
  }
  return parsed;
}

function tensorValues(file: Buffer, base: number, e: TensorEntry): Float32Array | Int32Array {
  const bytes = file.buffer.slice(file.byteOffset + base + e.offset, file.byteOffset + base + e.offset + e.length);
  return e.dtype === 'int32' ? new Int32Array(bytes) : new Float32Array(bytes);
}

/** Reads a checkpoint written by {@link saveCheckpoint}; the caller disposes the tensors. */
export function loadCheckpoint(path: string): CheckpointData {
  if (!existsSync(path)) throw new UserError(`resume: checkpoint ${path} does not exist`);
  const file = readFileSync(path);
  let parsed: { header: Header; base: number };
  try {
    parsed = parseFile(file);
  } catch (e) {
    if (e instanceof CheckpointProblem) throw new UserError(`resume: ${path} ${e.message}`);
    throw e;
  }
  const { header, base } = parsed;
  const tensors: Record<string, Tensor> = {};
  for (const e of header.tensors) tensors[e.name] = tf.tensor(tensorValues(file, base, e), e.shape, e.dtype);
  return { tensors, meta: header.meta };
}

/** The metadata of a checkpoint from its header alone (the tensor bytes are not read). */
function readCheckpointMeta(path: string): Record<string, unknown> {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const prefix = Buffer.alloc(PREFIX_BYTES);
    const got = readSync(fd, prefix, 0, PREFIX_BYTES, 0);
    if (got < PREFIX_BYTES || prefix.toString('latin1', 0, 8) !== MAGIC) throw new CheckpointProblem('is not an ssl-zoo checkpoint (bad magic)');
    const headerLength = prefix.readUInt32LE(8);
    const head = Buffer.alloc(PREFIX_BYTES + Math.min(headerLength, Math.max(0, size - PREFIX_BYTES)));
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
