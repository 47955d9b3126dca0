/**
 * The checkpoint format (`SSLZCKP1`) as bytes, free of Node built-ins: encoding and decoding
 * in memory, shared by the trainer's files (`checkpoint.ts`, which adds the file system and
 * Node's synchronous SHA-256) and the browser page (IndexedDB, downloads). The SHA-256 of
 * the tensor bytes is a function passed in: {@link webCryptoSha256} (Web Crypto, in pages and
 * in Node) or Node's `node:crypto` hash.
 */
import { tf, type Tensor } from '../core/tf.js';

/** The 8-byte magic at the start of every checkpoint. */
export const CHECKPOINT_MAGIC = 'SSLZCKP1';
/** Magic (8 bytes) and header length (uint32 LE). */
export const PREFIX_BYTES = 12;

/** One tensor's entry in the header. */
export interface TensorEntry {
  name: string;
  dtype: 'float32' | 'int32';
  shape: number[];
  offset: number;
  length: number;
}

/** The JSON header. */
export interface CheckpointHeader {
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

/** The hex SHA-256 of the concatenation of `parts`. */
export type Sha256 = (parts: readonly Uint8Array[]) => Promise<string>;

/** Why checkpoint bytes cannot be used (a phrase that follows the file name: "is truncated (...)"). */
export class CheckpointProblem extends Error {}

/** {@link Sha256} on the Web Crypto API (`crypto.subtle`: browsers' secure contexts, Node >= 19). */
export const webCryptoSha256: Sha256 = async (parts) => {
  const total = parts.reduce((n, p) => n + p.byteLength, 0);
  const joined = new Uint8Array(total);
  let offset = 0;
  for (const p of parts) {
    joined.set(p, offset);
    offset += p.byteLength;
  }
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', joined));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
};

/**
 * A checkpoint as the bytes of a file: 8-byte magic `SSLZCKP1`, uint32 LE header length,
 * UTF-8 JSON header `{ meta, tensors: [{ name, dtype, shape, offset, length }], checksum }`,
 * then the raw little-endian tensor bytes (float32 or int32) at the given byte offsets;
 * `checksum` is the SHA-256 of those bytes (by `sha256`). The tensors are read asynchronously.
 */
export async function encodeCheckpoint(data: CheckpointData, sha256: Sha256): Promise<Uint8Array[]> {
  const entries: TensorEntry[] = [];
  const buffers: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of Object.entries(data.tensors)) {
    const dtype = t.dtype === 'int32' ? 'int32' : 'float32';
    const read = await t.data();
    const values = dtype === 'int32' ? Int32Array.from(read as Int32Array) : Float32Array.from(read as Float32Array);
    const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    entries.push({ name, dtype, shape: t.shape, offset, length: bytes.byteLength });
    buffers.push(bytes);
    offset += bytes.byteLength;
  }
  const header: CheckpointHeader = { meta: data.meta, tensors: entries, checksum: { algorithm: 'sha256', value: await sha256(buffers) } };
  const headerBytes = new TextEncoder().encode(JSON.stringify(header));
  const prefix = new Uint8Array(PREFIX_BYTES);
  for (let i = 0; i < CHECKPOINT_MAGIC.length; i++) prefix[i] = CHECKPOINT_MAGIC.charCodeAt(i);
  new DataView(prefix.buffer).setUint32(8, headerBytes.byteLength, true);
  return [prefix, headerBytes, ...buffers];
}

/** The parts of {@link encodeCheckpoint} as one array. */
export function joinBytes(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.byteLength;
  }
  return out;
}

/** The header length of a checkpoint's first bytes `head` (at least the prefix); throws a {@link CheckpointProblem} without the magic. */
export function headerLength(head: Uint8Array): number {
  const magic = String.fromCharCode(...head.subarray(0, CHECKPOINT_MAGIC.length));
  if (head.byteLength < PREFIX_BYTES || magic !== CHECKPOINT_MAGIC) throw new CheckpointProblem('is not an ssl-zoo checkpoint (bad magic)');
  return new DataView(head.buffer, head.byteOffset, PREFIX_BYTES).getUint32(8, true);
}

/** The header of a checkpoint whose first bytes are `head` (at least the prefix and header) in a file of `fileSize` bytes. */
export function parseHeader(head: Uint8Array, fileSize: number): { header: CheckpointHeader; base: number } {
  const base = PREFIX_BYTES + headerLength(head);
  if (base > fileSize) throw new CheckpointProblem(`is truncated (${fileSize} bytes, its header alone ends at byte ${base})`);
  let header: CheckpointHeader;
  try {
    header = JSON.parse(new TextDecoder().decode(head.subarray(PREFIX_BYTES, base))) as CheckpointHeader;
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

/** The tensor bytes of a parsed checkpoint file, which its checksum covers. */
export function checksummedBytes(file: Uint8Array, header: CheckpointHeader, base: number): Uint8Array {
  const end = header.tensors.reduce((m, e) => Math.max(m, e.offset + e.length), 0);
  return file.subarray(base, base + end);
}

/** Throws a {@link CheckpointProblem} when the header has a checksum other than `actual` (the SHA-256 of {@link checksummedBytes}). */
export function checkChecksum(header: CheckpointHeader, actual: string): void {
  if (header.checksum && (header.checksum.algorithm !== 'sha256' || actual !== header.checksum.value)) {
    throw new CheckpointProblem('is corrupt (its tensor data does not match its checksum)');
  }
}

/** One tensor's values (a copy) from a parsed checkpoint file. */
export function tensorValues(file: Uint8Array, base: number, e: TensorEntry): Float32Array | Int32Array {
  const bytes = file.buffer.slice(file.byteOffset + base + e.offset, file.byteOffset + base + e.offset + e.length) as ArrayBuffer;
  return e.dtype === 'int32' ? new Int32Array(bytes) : new Float32Array(bytes);
}

/** The tensors of a parsed checkpoint file; the caller disposes them. */
export function checkpointTensors(file: Uint8Array, header: CheckpointHeader, base: number): Record<string, Tensor> {
  const tensors: Record<string, Tensor> = {};
  for (const e of header.tensors) tensors[e.name] = tf.tensor(tensorValues(file, base, e), e.shape, e.dtype);
  return tensors;
}

/**
 * Reads checkpoint bytes (a whole file) written by {@link encodeCheckpoint}, checking the
 * checksum with `sha256`; a {@link CheckpointProblem} says what is wrong. The caller disposes the tensors.
 */
export async function decodeCheckpoint(file: Uint8Array, sha256: Sha256): Promise<CheckpointData> {
  const { header, base } = parseHeader(file, file.byteLength);
  if (header.checksum) checkChecksum(header, await sha256([checksummedBytes(file, header, base)]));
  return { tensors: checkpointTensors(file, header, base), meta: header.meta };
}
