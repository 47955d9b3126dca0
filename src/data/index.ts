/**
 * Data: in-memory image datasets (synthetic, Fashion-MNIST, CIFAR-10/100), per-sample
 * multi-view augmentation keyed by (seed, epoch, index, view), samplers and loaders.
 */
export {
  allocPixels,
  classCounts,
  createDataset,
  datasetStats,
  normalizationFor,
  isInMemory,
  subset,
  type ChannelStats,
  type Dataset,
  type DatasetInfo,
  type FolderDataset,
  type ImageDataset,
  type ImageDatasetFields,
} from './dataset.js';
export { DATASET_NAMES, loadDataset, type DatasetName, type LoadDatasetOptions } from './load.js';
export { SYNTHETIC_CLASS_NAMES, syntheticDataset, type SyntheticOptions } from './synthetic.js';
export {
  FASHION_MNIST_CLASS_NAMES,
  FASHION_MNIST_DEFAULT_DIR,
  loadFashionMnist,
  loadIdxImageDataset,
  parseIdx,
  readIdxFile,
  readMaybeGzip,
  type IdxArray,
} from './idx.js';
export { CIFAR10_CLASS_NAMES, CIFAR100_CLASS_NAMES, CIFAR_DEFAULT_DIR, cifarRecordBytes, loadCifar, parseCifarBinary, type CifarVariant } from './cifar.js';
export * from './augment/index.js';
export { epochPermutation, RandomSampler, SequentialSampler, type Sampler } from './sampler.js';
export { IMAGE_EXTENSIONS, loadImageFolder, type ImageFolderOptions, type ImageFolderSplits } from './folder.js';
export { decodeImage, PixelReader, pixelStore, type PixelBatch, type PixelStore, type SkippedFile } from './pixels.js';
export { MultiViewLoader, type MultiViewBatch, type MultiViewLoaderOptions } from './loader.js';
