/** Loading datasets by name. */
import { invalidValue, UserError } from '../core/errors.js';
import { loadCifar } from './cifar.js';
import type { ImageDataset } from './dataset.js';
import { loadFashionMnist } from './idx.js';
import { syntheticDataset } from './synthetic.js';

/** The dataset names {@link loadDataset} accepts. */
export const DATASET_NAMES = ['synthetic', 'fashion-mnist', 'cifar10', 'cifar100'] as const;
export type DatasetName = (typeof DATASET_NAMES)[number];

export interface LoadDatasetOptions {
  split: 'train' | 'test';
  /** Directory with the data files (fashion-mnist, cifar10, cifar100). */
  dataDir?: string;
  /** Seed of the synthetic dataset (default 0). */
  seed?: number;
  /** Number of synthetic images (default 2048 train / 512 test). */
  size?: number;
  /** Height and width of synthetic images (default 16). */
  imageSize?: number;
  /** Channels of synthetic images: 1 (default) or 3. */
  channels?: number;
}

/**
 * Loads the named dataset's split into memory ([N, H, W, C] uint8 pixels):
 * - `synthetic`: generated, 10 shape/texture classes (see `syntheticDataset`);
 * - `fashion-mnist`: IDX files, default `/usr/share/datasets/fashion-mnist`;
 * - `cifar10` / `cifar100`: official binary batches, default `./datasets`.
 * An unknown name or split, or missing/corrupt files, give a `UserError`.
 */
export function loadDataset(name: string, options: LoadDatasetOptions): ImageDataset {
  const split = options.split;
  if (split !== 'train' && split !== 'test') throw invalidValue('split', split, "'train' or 'test'");
  switch (name) {
    case 'synthetic':
      return syntheticDataset({
        split,
        seed: options.seed,
        size: options.size,
        imageSize: options.imageSize,
        channels: options.channels,
      });
    case 'fashion-mnist':
      return loadFashionMnist(split, options.dataDir);
    case 'cifar10':
    case 'cifar100':
      return loadCifar(name, split, options.dataDir);
    case 'folder':
      throw new UserError(`dataset: folder images are streamed from disk, not loaded into memory; use one of ${DATASET_NAMES.join(', ')} here`);
    default:
      throw invalidValue('dataset', name, `one of ${DATASET_NAMES.join(', ')} or folder`);
  }
}
