/**
 * The IDX file format of MNIST and Fashion-MNIST (optionally gzip-compressed), and the
 * Fashion-MNIST dataset loader.
 *
 * IDX layout: 2 zero bytes, 1 type byte (0x08 = unsigned byte), 1 byte with the number of
 * dimensions d, d big-endian uint32 sizes, then the data in row-major order.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { UserError } from '../core/errors.js';
import { allocPixels, createDataset, type ImageDataset } from './dataset.js';

/** A parsed IDX array of unsigned bytes. */
export interface IdxArray {
  /** Sizes of the dimensions, e.g. [60000, 28, 28]. */
  dims: number[];
  /** [prod(dims)] row-major. */
  data: Uint8Array;
}

/**
 * Parses the bytes of an (uncompressed) IDX file of unsigned bytes. `file` names the file
 * in error messages. Throws a `UserError` that says what is wrong for a bad magic number,
 * an unsupported element type, a truncated header or data, or trailing bytes.
 * When `expectedDims` is given, the number of dimensions must match it.
 */
export function parseIdx(bytes: Uint8Array, file: string, expectedDims?: number): IdxArray {
  if (bytes.length < 4) {
    throw new UserError(`${file}: truncated IDX file (${bytes.length} bytes, no complete header)`);
  }
  if (bytes[0] !== 0 || bytes[1] !== 0) {
    const magic = Array.from(bytes.subarray(0, 4), (b) => b.toString(16).padStart(2, '0')).join('');
    throw new UserError(`${file}: not an IDX file (magic number 0x${magic}, expected 0x000008NN)`);
  }
  if (bytes[2] !== 0x08) {
    throw new UserError(`${file}: unsupported IDX element type 0x${bytes[2].toString(16).padStart(2, '0')} ` + '(only 0x08, unsigned byte, is supported)');
  }
  const nd = bytes[3];
  if (nd === 0) throw new UserError(`${file}: IDX header declares 0 dimensions`);
  if (expectedDims !== undefined && nd !== expectedDims) {
    throw new UserError(`${file}: IDX file has ${nd} dimensions, expected ${expectedDims}`);
  }
  const headerBytes = 4 + 4 * nd;
  if (bytes.length < headerBytes) {
    throw new UserError(`${file}: truncated IDX header (${bytes.length} bytes, the ${nd} dimension sizes need ${headerBytes})`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const dims: number[] = [];
  let count = 1;
  for (let i = 0; i < nd; i++) {
    const d = view.getUint32(4 + 4 * i, false);
    dims.push(d);
    count *= d;
  }
  const available = bytes.length - headerBytes;
  if (available < count) {
    throw new UserError(`${file}: truncated IDX data: dimensions ${dims.join('x')} need ${count} bytes, ` + `the file has ${available}`);
  }
  if (available > count) {
    throw new UserError(`${file}: corrupt IDX file: ${available - count} unexpected bytes after the ` + `${dims.join('x')} data`);
  }
  return { dims, data: bytes.subarray(headerBytes, headerBytes + count) };
}

/** Reads a file, gunzipping it when it starts with the gzip magic bytes (1f 8b). */
export function readMaybeGzip(path: string): Uint8Array {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (e) {
    throw new UserError(`${path}: cannot read (${(e as Error).message})`);
  }
  let bytes: Buffer = raw;
  if (raw.length >= 2 && raw[0] === 0x1f && raw[1] === 0x8b) {
    try {
      bytes = gunzipSync(raw);
    } catch (e) {
      throw new UserError(`${path}: corrupt or truncated gzip data (${(e as Error).message})`);
    }
  }
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Reads and parses an IDX file, `.gz`-compressed or not. */
export function readIdxFile(path: string, expectedDims?: number): IdxArray {
  return parseIdx(readMaybeGzip(path), path, expectedDims);
}

/** Where the Debian/Ubuntu package `dataset-fashion-mnist` installs the files. */
export const FASHION_MNIST_DEFAULT_DIR = '/usr/share/datasets/fashion-mnist';

export const FASHION_MNIST_CLASS_NAMES: readonly string[] = Object.freeze([
  'T-shirt/top',
  'Trouser',
  'Pullover',
  'Dress',
  'Coat',
  'Sandal',
  'Shirt',
  'Sneaker',
  'Bag',
  'Ankle boot',
]);

/** The first existing file among the usual spellings of an IDX file name in `dir`. */
function findIdxFile(dir: string, prefix: string, kind: 'idx3' | 'idx1'): string | undefined {
  const names = [`${prefix}-${kind}-ubyte.gz`, `${prefix}-${kind}-ubyte`, `${prefix}.${kind}-ubyte.gz`, `${prefix}.${kind}-ubyte`];
  for (const n of names) {
    const p = join(dir, n);
    if (existsSync(p)) return p;
  }
  return undefined;
}

/**
 * Loads an MNIST-format dataset (images [N, H, W] and labels [N] as IDX files named
 * `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`) from `dir`.
 */
export function loadIdxImageDataset(name: string, dir: string, split: 'train' | 'test', classNames: readonly string[], missingHint: string): ImageDataset {
  const prefix = split === 'train' ? 'train' : 't10k';
  const imagesPath = findIdxFile(dir, `${prefix}-images`, 'idx3');
  const labelsPath = findIdxFile(dir, `${prefix}-labels`, 'idx1');
  for (const [path, stem] of [
    [imagesPath, `${prefix}-images-idx3-ubyte`],
    [labelsPath, `${prefix}-labels-idx1-ubyte`],
  ] as const) {
    if (path === undefined) {
      throw new UserError(`dataset ${name}: missing ${join(dir, stem)}.gz (or uncompressed ${stem}); ${missingHint}`);
    }
  }
  const images = readIdxFile(imagesPath!, 3);
  const labels = readIdxFile(labelsPath!, 1);
  const [n, h, w] = images.dims;
  if (labels.dims[0] !== n) {
    throw new UserError(`${labelsPath}: ${labels.dims[0]} labels, but ${imagesPath} has ${n} images`);
  }
  if (h === 0 || w === 0) throw new UserError(`${imagesPath}: empty images (${h}x${w})`);
  const numClasses = classNames.length;
  const labelArray = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const l = labels.data[i];
    if (l >= numClasses) {
      throw new UserError(`${labelsPath}: label ${l} at index ${i} is out of range 0..${numClasses - 1}`);
    }
    labelArray[i] = l;
  }
  const pixels = allocPixels(images.data.length);
  pixels.set(images.data);
  return createDataset({
    name,
    length: n,
    height: h,
    width: w,
    channels: 1,
    numClasses,
    classNames,
    labels: labelArray,
    pixels,
  });
}

/**
 * Fashion-MNIST (60000 train / 10000 test grayscale 28x28 images, 10 classes) from
 * `dataDir`, by default {@link FASHION_MNIST_DEFAULT_DIR}.
 */
export function loadFashionMnist(split: 'train' | 'test', dataDir?: string): ImageDataset {
  const dir = dataDir ?? FASHION_MNIST_DEFAULT_DIR;
  return loadIdxImageDataset(
    'fashion-mnist',
    dir,
    split,
    FASHION_MNIST_CLASS_NAMES,
    'install it with `apt-get install dataset-fashion-mnist`, or pass --data-dir DIR ' + '(dataDir) naming a directory with the Fashion-MNIST IDX files',
  );
}
