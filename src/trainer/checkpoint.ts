import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { UserError } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';

const MAGIC = 'SSLZCKP1';

interface TensorEntry {
  name: string;
  dtype: 'float32' | 'int32';
  shape: number[];
  offset: number;
  length: number;
}

/** A checkpoint in memory: named tensors plus JSON metadata. */
export interface CheckpointData {
  tensors: Record<string, Tensor>;
  meta: Record<string, unknown>;
}

/**
 * Writes a checkpoint atomically: a temporary file in the same directory, fsync, then
 * rename, so a crash never leaves a half-written checkpoint under `path`.
 *
 * Layout: 8-byte magic `SSLZCKP1`, uint32 LE header length, UTF-8 JSON header
 * `{ meta, tensors: [{ name, dtype, shape, offset, length }] }`, then the raw little-endian
 * tensor bytes (float32 or int32) at the given byte offsets.
 */
export function saveCheckpoint(path: string, data: CheckpointData): void {
  const entries: TensorEntry[] = [];
  const buffers: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of Object.entries(data.tensors)) {
    const dtype = t.dtype === 'int32' ? 'int32' : 'float32';
    const values = dtype === 'int32' ? Int32Array.from(t.dataSync() as Int32Array) : Float32Array.from(t.dataSync() as Float32Array);
    const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    entries.push({ name, dtype, shape: t.shape, offset, length: bytes.byteLength });
    buffers.push(bytes);
    offset += bytes.byteLength;
  }
  const header = Buffer.from(JSON.stringify({ meta: data.meta, tensors: entries }), 'utf8');
  const prefix = Buffer.alloc(12);
  prefix.write(MAGIC, 0, 'latin1');
  prefix.writeUInt32LE(header.byteLength, 8);
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    for (const chunk of [prefix, header, ...buffers]) writeSync(fd, chunk);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/** Reads a checkpoint written by {@link saveCheckpoint}; the caller disposes the tensors. */
export function loadCheckpoint(path: string): CheckpointData {
  if (!existsSync(path)) throw new UserError(`resume: checkpoint ${path} does not exist`);
  const file = readFileSync(path);
  if (file.byteLength < 12 || file.toString('latin1', 0, 8) !== MAGIC) {
    throw new UserError(`resume: ${path} is not an ssl-zoo checkpoint (bad magic)`);
  }
  const headerLength = file.readUInt32LE(8);
  let header: { meta: Record<string, unknown>; tensors: TensorEntry[] };
  try {
    header = JSON.parse(file.toString('utf8', 12, 12 + headerLength));
  } catch {
    throw new UserError(`resume: ${path} has a corrupt header`);
  }
  const base = 12 + headerLength;
  const tensors: Record<string, Tensor> = {};
  for (const e of header.tensors) {
    if (base + e.offset + e.length > file.byteLength) {
      Object.values(tensors).forEach((t) => t.dispose());
      throw new UserError(`resume: ${path} is truncated (tensor '${e.name}' ends past the end of the file)`);
    }
    const bytes = file.buffer.slice(file.byteOffset + base + e.offset, file.byteOffset + base + e.offset + e.length);
    const values = e.dtype === 'int32' ? new Int32Array(bytes) : new Float32Array(bytes);
    tensors[e.name] = tf.tensor(values, e.shape, e.dtype);
  }
  return { tensors, meta: header.meta };
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
