/**
 * Per-sample image augmentation in plain JavaScript on `Float32Array`s (no tfjs, so it runs
 * in loader worker threads), following torchvision's semantics as used by solo-learn:
 * - `spatial.ts`, `color.ts`: the pixel operations on HWC images (crop box, bilinear
 *   resampling, flip, blur; colour adjustments, grayscale, solarization, normalisation);
 * - `views.ts`: the view configurations, their validation, and the pipeline that turns an
 *   image into a keyed random training view or the deterministic eval view;
 * - `recipes.ts`: solo-learn's per-method view recipes and the eval transform;
 * - `crops.ts`: multi-crop groups (`--crops`), the methods' crop policies, and their views.
 */
export { adjustBrightness, adjustContrast, adjustHue, adjustSaturation, solarize, toGrayscale } from './color.js';
export { gaussianBlur, hflip, randomResizedCropBox, resizeBilinear, type CropBox } from './spatial.js';
export {
  augmentBatch,
  augmentView,
  CROP_FIELDS,
  augmentViewInto,
  evalBatch,
  evalView,
  evalViewInto,
  validateEvalTransform,
  validateViewAugmentation,
  type AugmentedViews,
  type CropGeometry,
  type EvalTransform,
  type PixelSource,
  type ViewAugmentation,
} from './views.js';
export {
  barlowViews,
  byolViews,
  evalTransform,
  resslViews,
  simclrViews,
  symmetricWeakViews,
  vicregViews,
  viewsFor,
  type PresetOptions,
  type ViewRecipe,
} from './recipes.js';
export {
  cropViews,
  DEFAULT_LOCAL_SCALE,
  defaultCrops,
  formatCrops,
  localCropSize,
  parseCrops,
  resolveCrops,
  TWO_GLOBAL_CROPS,
  validateCrops,
  type CropGroup,
  type CropPolicy,
} from './crops.js';
