/**
 * CIFAR-10 and CIFAR-100 in their official binary format
 * (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version").
 *
 * - CIFAR-10: `cifar-10-batches-bin/data_batch_{1..5}.bin` (train) and `test_batch.bin`;
 *   each record is 1 label byte + 3072 pixel bytes (32x32, channel-major: R plane, G plane,
 *   B plane).
 * - CIFAR-100: `cifar-100-binary/train.bin` and `test.bin`; each record is 1 coarse label
 *   byte + 1 fine label byte + 3072 pixel bytes. The fine labels (100 classes) are used.
 *
 * Pixels are converted to HWC ([N, 32, 32, 3]).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { UserError } from '../core/errors.js';
import { allocPixels, createDataset, type ImageDataset } from './dataset.js';

export type CifarVariant = 'cifar10' | 'cifar100';

/** Where CIFAR is looked for when no data directory is given: `./datasets`. */
export const CIFAR_DEFAULT_DIR = 'datasets';

const SIDE = 32;
const IMAGE_BYTES = SIDE * SIDE * 3;

export const CIFAR10_CLASS_NAMES: readonly string[] = Object.freeze(['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck']);

export const CIFAR100_CLASS_NAMES: readonly string[] = Object.freeze(
  (
    'apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus ' +
    'butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch ' +
    'crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house ' +
    'kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle ' +
    'mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree ' +
    'plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew ' +
    'skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank ' +
    'telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf ' +
    'woman worm'
  ).split(' '),
);

interface VariantInfo {
  subdir: string;
  /** label bytes before the pixels of each record */
  labelBytes: number;
  /** index of the used label byte within the record */
  labelOffset: number;
  numClasses: number;
  classNames: readonly string[];
  files: (split: 'train' | 'test') => string[];
  url: string;
}

const VARIANTS: Record<CifarVariant, VariantInfo> = {
  cifar10: {
    subdir: 'cifar-10-batches-bin',
    labelBytes: 1,
    labelOffset: 0,
    numClasses: 10,
    classNames: CIFAR10_CLASS_NAMES,
    files: (split) => (split === 'train' ? [1, 2, 3, 4, 5].map((i) => `data_batch_${i}.bin`) : ['test_batch.bin']),
    url: 'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz',
  },
  cifar100: {
    subdir: 'cifar-100-binary',
    labelBytes: 2,
    labelOffset: 1,
    numClasses: 100,
    classNames: CIFAR100_CLASS_NAMES,
    files: (split) => [split === 'train' ? 'train.bin' : 'test.bin'],
    url: 'https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz',
  },
};

/** Bytes per record of a CIFAR variant's binary files (3073 or 3074). */
export function cifarRecordBytes(variant: CifarVariant): number {
  return VARIANTS[variant].labelBytes + IMAGE_BYTES;
}

/**
 * Parses one CIFAR binary file into `labels` / `pixels` (HWC) starting at image `start`;
 * returns the number of records. `file` names the file in error messages.
 */
export function parseCifarBinary(bytes: Uint8Array, file: string, variant: CifarVariant, labels: Int32Array, pixels: Uint8Array, start: number): number {
  const info = VARIANTS[variant];
  const record = info.labelBytes + IMAGE_BYTES;
  if (bytes.length === 0 || bytes.length % record !== 0) {
    throw new UserError(
      `${file}: not a ${variant} binary batch: ${bytes.length} bytes is not a positive ` +
        `multiple of the ${record}-byte record size (truncated or corrupt file?)`,
    );
  }
  const n = bytes.length / record;
  if (start + n > labels.length) throw new Error(`parseCifarBinary: output too small for ${file}`);
  const plane = SIDE * SIDE;
  for (let r = 0; r < n; r++) {
    const base = r * record;
    const label = bytes[base + info.labelOffset];
    if (label >= info.numClasses) {
      throw new UserError(`${file}: record ${r} has label ${label}, out of range 0..${info.numClasses - 1} (corrupt file?)`);
    }
    labels[start + r] = label;
    const src = base + info.labelBytes;
    const dst = (start + r) * IMAGE_BYTES;
    for (let p = 0; p < plane; p++) {
      pixels[dst + 3 * p] = bytes[src + p];
      pixels[dst + 3 * p + 1] = bytes[src + plane + p];
      pixels[dst + 3 * p + 2] = bytes[src + 2 * plane + p];
    }
  }
  return n;
}

/**
 * Loads CIFAR-10 or CIFAR-100 from `dataDir` (default `./datasets`), which may be the
 * extracted archive's directory itself (`cifar-10-batches-bin`, `cifar-100-binary`) or its
 * parent. Missing or malformed files give a `UserError` naming the paths.
 */
export function loadCifar(variant: CifarVariant, split: 'train' | 'test', dataDir?: string): ImageDataset {
  const info = VARIANTS[variant];
  const base = resolve(dataDir ?? CIFAR_DEFAULT_DIR);
  const candidates = [join(base, info.subdir), base];
  const files = info.files(split);
  const dir = candidates.find((d) => files.every((f) => existsSync(join(d, f))));
  if (dir === undefined) {
    const inDir = candidates.find((d) => files.some((f) => existsSync(join(d, f)))) ?? candidates[0];
    const missing = files.filter((f) => !existsSync(join(inDir, f))).map((f) => join(inDir, f));
    throw new UserError(
      `dataset ${variant}: missing ${missing.join(', ')}; download the binary version from ` +
        `${info.url}, extract it into ${base} (giving ${join(base, info.subdir)}), ` +
        'or pass --data-dir DIR (dataDir) naming the directory that holds it',
    );
  }
  const record = info.labelBytes + IMAGE_BYTES;
  const paths = files.map((f) => join(dir, f));
  let total = 0;
  for (const p of paths) {
    const size = statSync(p).size;
    if (size === 0 || size % record !== 0) {
      throw new UserError(
        `${p}: not a ${variant} binary batch: ${size} bytes is not a positive multiple of the ` + `${record}-byte record size (truncated or corrupt file?)`,
      );
    }
    total += size / record;
  }
  const labels = new Int32Array(total);
  const pixels = allocPixels(total * IMAGE_BYTES);
  let start = 0;
  for (const p of paths) start += parseCifarBinary(readFileSync(p), p, variant, labels, pixels, start);
  return createDataset({
    name: variant,
    length: total,
    height: SIDE,
    width: SIDE,
    channels: 3,
    numClasses: info.numClasses,
    classNames: info.classNames,
    labels,
    pixels,
  });
}
