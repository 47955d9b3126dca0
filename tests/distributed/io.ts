/** Small file helpers shared by the multi-process tests and their worker processes. */
import { readFileSync, writeFileSync } from 'node:fs';

/** Writes a Float32Array as raw little-endian bytes. */
export function writeF32(path: string, data: Float32Array): void {
  writeFileSync(path, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
}

/** Reads a file written by {@link writeF32}. */
export function readF32(path: string): Float32Array {
  const bytes = readFileSync(path);
  const out = new Float32Array(bytes.byteLength / 4);
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

/** A seeded float32 generator (mulberry32) of values in [-1, 1). */
export function seededFloats(seed: number, length: number): Float32Array {
  let a = seed >>> 0;
  const out = new Float32Array(length);
  for (let i = 0; i < length; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = (((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1;
  }
  return out;
}
