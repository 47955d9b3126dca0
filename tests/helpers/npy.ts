import { readFileSync } from 'node:fs';

/** A `.npy` file (version 1.0, little-endian float32 or int32, C order) read back: its shape and values. */
export function readNpy(path: string): { shape: number[]; values: Float32Array | Int32Array } {
  const bytes = readFileSync(path);
  if (bytes.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${path}: not a .npy file`);
  const headerLength = bytes.readUInt16LE(8);
  const header = bytes.toString('latin1', 10, 10 + headerLength);
  const descr = /'descr': '([^']+)'/.exec(header)?.[1];
  const shape = (/'shape': \(([^)]*)\)/.exec(header)?.[1] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map(Number);
  const data = bytes.subarray(10 + headerLength);
  const copy = new Uint8Array(data).buffer;
  if (descr === '<f4') return { shape, values: new Float32Array(copy) };
  if (descr === '<i4') return { shape, values: new Int32Array(copy) };
  throw new Error(`${path}: unexpected dtype ${descr}`);
}
