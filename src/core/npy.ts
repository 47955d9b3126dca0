import { writeFileSync } from 'node:fs';
import { atPath } from './errors.js';

/**
 * The bytes of a NumPy `.npy` file (format version 1.0, little-endian, C order) that
 * `numpy.load` reads: `float32` for a Float32Array, `int32` for an Int32Array, with the
 * given `shape` (whose product must equal the length; `[]` for a scalar).
 */
export function encodeNpy(values: Float32Array | Int32Array, shape: readonly number[]): Buffer {
  const count = shape.reduce((a, b) => a * b, 1);
  if (count !== values.length) throw new Error(`writeNpy: shape [${shape.join(', ')}] does not hold ${values.length} values`);
  const descr = values instanceof Float32Array ? '<f4' : '<i4';
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in \n.
  const unpadded = 10 + header.length + 1;
  header += ' '.repeat((64 - (unpadded % 64)) % 64) + '\n';
  const prefix = Buffer.alloc(10);
  prefix.write('\x93NUMPY', 0, 'latin1');
  prefix[6] = 1;
  prefix[7] = 0;
  prefix.writeUInt16LE(header.length, 8);
  const data = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  return Buffer.concat([prefix, Buffer.from(header, 'latin1'), data]);
}

/** Writes {@link encodeNpy}'s bytes to `path`. */
export function writeNpy(path: string, values: Float32Array | Int32Array, shape: readonly number[]): void {
  const bytes = encodeNpy(values, shape);
  atPath(path, 'writing', () => writeFileSync(path, bytes));
}
