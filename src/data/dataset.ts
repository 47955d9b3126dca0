/**
 * Image datasets. An in-memory dataset ({@link ImageDataset}) keeps all of its pixels in one
 * `Uint8Array` ([length, H, W, C], row-major, values 0..255), normally backed by a
 * `SharedArrayBuffer` so that loader worker threads can read it without a copy. A folder
 * dataset ({@link FolderDataset}) holds only its file list: its images are decoded on demand
 * (src/data/pixels.ts), so a folder larger than memory can be trained on.
 */
import { UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';

/** What every dataset knows without its pixels: size, image shape, classes and labels. */
export interface DatasetInfo {
  /** Dataset name, e.g. `fashion-mnist`, `synthetic`. */
  readonly name: string;
  /** Number of images. */
  readonly length: number;
  readonly height: number;
  readonly width: number;
  /** 1 (grayscale) or 3 (RGB). */
  readonly channels: number;
  readonly numClasses: number;
  /** [numClasses] human-readable class names. */
  readonly classNames: readonly string[];
  /** [length] class index of each image. */
  readonly labels: Int32Array;
}

/**
 * An image classification dataset held in memory.
 *
 * - `pixels`: [length, height, width, channels] row-major (HWC per image), 0..255.
 * - `labels`: [length], each in 0..numClasses-1.
 */
export interface ImageDataset extends DatasetInfo {
  /** [length, height, width, channels] row-major, 0..255. */
  readonly pixels: Uint8Array;
}

/**
 * Images in files, decoded (and resized to height x width, channels) when a batch needs
 * them. Made by `loadImageFolder` (src/data/folder.ts).
 */
export interface FolderDataset extends DatasetInfo {
  /** [length] absolute paths; image i is `files[i]`, of class `labels[i]`. */
  readonly files: readonly string[];
  /** Normalisation constants, estimated from a seeded sample of the images. */
  readonly stats: ChannelStats;
  /** False for `--unlabelled` folders: every label is 0 and there is one class. */
  readonly labelled: boolean;
}

/** A dataset of either kind. */
export type Dataset = ImageDataset | FolderDataset;

/** Whether `ds` holds its pixels in memory. */
export function isInMemory(ds: Dataset): ds is ImageDataset {
  return 'pixels' in ds;
}

/** Per-channel normalisation constants, for pixels scaled to [0, 1]. */
export interface ChannelStats {
  /** [channels] */
  mean: number[];
  /** [channels] */
  std: number[];
}

/**
 * A zero-filled `Uint8Array` of `n` bytes backed by a `SharedArrayBuffer` (so worker
 * threads can share it), or by a plain `ArrayBuffer` where shared memory is unavailable.
 */
export function allocPixels(n: number): Uint8Array {
  if (typeof SharedArrayBuffer === 'function') return new Uint8Array(new SharedArrayBuffer(n));
  return new Uint8Array(n);
}

/** Fields of {@link ImageDataset}, as passed to {@link createDataset}. */
export type ImageDatasetFields = ImageDataset;

/**
 * Checks the fields' sizes against each other and returns a frozen dataset.
 * Throws an `Error` (a programming mistake, not a user one) when they disagree.
 */
export function createDataset(fields: ImageDatasetFields): ImageDataset {
  const { length, height, width, channels, numClasses, classNames, labels, pixels } = fields;
  for (const [k, v] of Object.entries({ length, height, width, channels, numClasses })) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`dataset ${fields.name}: bad ${k} ${v}`);
  }
  if (channels !== 1 && channels !== 3) {
    throw new Error(`dataset ${fields.name}: channels must be 1 or 3, got ${channels}`);
  }
  if (labels.length !== length) {
    throw new Error(`dataset ${fields.name}: ${labels.length} labels for ${length} images`);
  }
  if (pixels.length !== length * height * width * channels) {
    throw new Error(`dataset ${fields.name}: pixels has ${pixels.length} bytes, expected ` + `${length}x${height}x${width}x${channels}`);
  }
  if (classNames.length !== numClasses) {
    throw new Error(`dataset ${fields.name}: ${classNames.length} class names for ${numClasses} classes`);
  }
  return Object.freeze({
    name: fields.name,
    length,
    height,
    width,
    channels,
    numClasses,
    classNames: Object.freeze([...classNames]),
    labels,
    pixels,
  });
}

/**
 * The images `indices` (in that order, repeats allowed) of `ds` as a new dataset: in memory
 * with copied pixels ([indices.length, H, W, C]) and labels; a folder with the files' paths.
 * Out-of-range indices throw a `UserError`.
 */
export function subset<D extends Dataset>(ds: D, indices: ArrayLike<number>): D {
  const n = indices.length;
  const labels = new Int32Array(n);
  for (let k = 0; k < n; k++) {
    const i = indices[k];
    if (!Number.isInteger(i) || i < 0 || i >= ds.length) {
      throw new UserError(`subset indices: ${i} is not allowed; expected an integer in 0..${ds.length - 1}`);
    }
    labels[k] = ds.labels[i];
  }
  const source: Dataset = ds;
  if (!isInMemory(source)) {
    const files = Array.from(indices, (i) => source.files[i]);
    return Object.freeze({ ...source, length: n, labels, files: Object.freeze(files) }) as D;
  }
  const imageBytes = source.height * source.width * source.channels;
  const pixels = allocPixels(n * imageBytes);
  for (let k = 0; k < n; k++) pixels.set(source.pixels.subarray(indices[k] * imageBytes, (indices[k] + 1) * imageBytes), k * imageBytes);
  return createDataset({ ...source, length: n, labels, pixels }) as D;
}

/** Number of images of each class: [numClasses]. */
export function classCounts(ds: ImageDataset): Int32Array {
  const counts = new Int32Array(ds.numClasses);
  for (let i = 0; i < ds.length; i++) counts[ds.labels[i]]++;
  return counts;
}

/** Per-channel mean and standard deviation of the dataset's pixels scaled to [0, 1]. */
export function datasetStats(ds: ImageDataset): ChannelStats {
  const c = ds.channels;
  const sum = new Float64Array(c);
  const sumSq = new Float64Array(c);
  const px = ds.pixels;
  for (let i = 0; i < px.length; i += c) {
    for (let k = 0; k < c; k++) {
      const v = px[i + k];
      sum[k] += v;
      sumSq[k] += v * v;
    }
  }
  const count = px.length / c || 1;
  const mean: number[] = [];
  const std: number[] = [];
  for (let k = 0; k < c; k++) {
    const m = sum[k] / count;
    const variance = Math.max(sumSq[k] / count - m * m, 0);
    mean.push(m / 255);
    std.push(Math.sqrt(variance) / 255 || 1);
  }
  return { mean, std };
}

/** Published normalisation constants (those solo-learn uses for CIFAR). */
const KNOWN_STATS: Record<string, ChannelStats> = {
  'fashion-mnist': { mean: [0.286], std: [0.353] },
  cifar10: { mean: [0.4914, 0.4822, 0.4465], std: [0.247, 0.2435, 0.2616] },
  cifar100: { mean: [0.5071, 0.4865, 0.4409], std: [0.2673, 0.2564, 0.2762] },
};

/**
 * Normalisation constants for a dataset: the published ones for Fashion-MNIST and CIFAR
 * (when the channel count matches), a folder's sample estimate, otherwise computed from the
 * dataset by {@link datasetStats}.
 */
export function normalizationFor(ds: Dataset): ChannelStats {
  if (!isInMemory(ds)) return { mean: [...ds.stats.mean], std: [...ds.stats.std] };
  const known = KNOWN_STATS[ds.name];
  if (known && known.mean.length === ds.channels) {
    return { mean: [...known.mean], std: [...known.std] };
  }
  return datasetStats(ds);
}

/** The first `n` images of `ds` after a seeded shuffle (all of `ds` when `n` is 0 or >= its length). */
export function sampleDataset<D extends Dataset>(ds: D, n: number, seed: number): D {
  if (n === 0 || n >= ds.length) return ds;
  return subset(ds, new Rng(seed).permutation(ds.length).slice(0, n));
}
