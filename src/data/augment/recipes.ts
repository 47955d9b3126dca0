/**
 * solo-learn's augmentation recipes, per method: the views of SimCLR ({@link simclrViews}),
 * BYOL ({@link byolViews}), Barlow Twins ({@link barlowViews}), VICReg ({@link vicregViews}),
 * SimSiam and MoCo v2+ ({@link symmetricWeakViews}) and ReSSL ({@link resslViews}), picked by name with
 * {@link viewsFor}, and a dataset's eval transform ({@link evalTransform}). Crop sizes
 * default to the image size and normalisation to the dataset's; crops above 64 px get the
 * ImageNet recipes (with Gaussian blur), smaller ones the CIFAR recipes (without).
 */
import { normalizationFor, type ChannelStats, type Dataset } from '../dataset.js';
import type { EvalTransform, ViewAugmentation } from './views.js';

/** Crop sizes above this use solo-learn's ImageNet recipes (with blur), else CIFAR's. */
const LARGE_IMAGE = 64;

function presetBase(dataset: Dataset, cropSize: number | undefined, stats: ChannelStats | undefined) {
  const S = cropSize ?? Math.min(dataset.height, dataset.width);
  const { mean, std } = stats ?? normalizationFor(dataset);
  // solo-learn crops 8-100% of the area; below 32 px that leaves a few pixels, so 20-100%
  const minScale = Math.min(dataset.height, dataset.width) >= 32 ? 0.08 : 0.2;
  return { S, mean, std, minScale, large: S > LARGE_IMAGE };
}

/** The colour fields of a view that only crops and flips: no jitter, no grayscale. */
export const NO_COLOR_OPS = { colorJitterProb: 0, brightness: 0, contrast: 0, saturation: 0, hue: 0, grayscaleProb: 0 } as const;

/** Options shared by the preset recipes. */
export interface PresetOptions {
  /** Normalisation; default `normalizationFor(dataset)`. */
  stats?: ChannelStats;
  /** Fields that replace the recipe's in every view (e.g. `{ cropScale: [0.2, 1] }`). */
  overrides?: Partial<ViewAugmentation>;
}

/**
 * solo-learn's SimCLR recipe: two identically configured views. RandomResizedCrop
 * (scale [0.08, 1], or [0.2, 1] for images under 32 px), ColorJitter(0.8, 0.8, 0.8, 0.2)
 * with p = 0.8, grayscale p = 0.2, flip p = 0.5, no solarization. Gaussian blur
 * (sigma 0.1..2) with p = 0.5 only for crops above 64 px (ImageNet recipe); none on small
 * images, as in solo-learn's original CIFAR script. `cropSize` defaults to the image size.
 */
export function simclrViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.8, 0.8, 0.8, 0.2]);
  const view: ViewAugmentation = { ...base, gaussianBlurProb: large ? 0.5 : 0, ...options.overrides };
  return [view, { ...view, mean: [...view.mean], std: [...view.std] }];
}

/**
 * solo-learn's `symmetric_weak` recipe (its CIFAR SimSiam and MoCo v2+ scripts): two
 * identically configured views as {@link simclrViews} but with the weaker
 * ColorJitter(0.4, 0.4, 0.4, 0.1) (p = 0.8). Gaussian blur p = 0.5 only for crops above
 * 64 px, as {@link simclrViews} (solo-learn's current CIFAR yamls blur 32 px crops too; its
 * original CIFAR scripts did not, as the other recipes here).
 */
export function symmetricWeakViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.4, 0.4, 0.4, 0.1]);
  const view: ViewAugmentation = { ...base, gaussianBlurProb: large ? 0.5 : 0, ...options.overrides };
  return [view, { ...view, mean: [...view.mean], std: [...view.std] }];
}

/**
 * solo-learn's asymmetric BYOL recipe: RandomResizedCrop (as {@link simclrViews}),
 * ColorJitter(0.4, 0.4, 0.2, 0.1) p = 0.8, grayscale p = 0.2, flip p = 0.5; view 1 never
 * solarizes, view 2 solarizes with p = 0.2. Gaussian blur for crops above 64 px: p = 1.0
 * (view 1) and 0.1 (view 2), the ImageNet recipe; none on small images (CIFAR recipe).
 */
export function byolViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.4, 0.4, 0.2, 0.1]);
  return [
    { ...base, gaussianBlurProb: large ? 1.0 : 0, solarizationProb: 0, ...options.overrides },
    { ...base, mean: [...base.mean], std: [...base.std], gaussianBlurProb: large ? 0.1 : 0, solarizationProb: 0.2, ...options.overrides },
  ];
}

/**
 * What solo-learn's recipes share: RandomResizedCrop (scale from {@link presetBase}, ratio
 * 3/4..4/3), flip p = 0.5, ColorJitter(brightness, contrast, saturation, hue) = `jitter`
 * with p = 0.8, grayscale p = 0.2, blur sigma range 0.1..2 but no blur or solarization yet;
 * `large` tells whether the crop is big enough for the ImageNet blur.
 */
function recipeView(
  dataset: Dataset,
  cropSize: number | undefined,
  stats: ChannelStats | undefined,
  [brightness, contrast, saturation, hue]: [number, number, number, number],
): { view: ViewAugmentation; large: boolean } {
  const { S, mean, std, minScale, large } = presetBase(dataset, cropSize, stats);
  const view: ViewAugmentation = {
    cropSize: S,
    cropScale: [minScale, 1],
    cropRatio: [3 / 4, 4 / 3],
    hflipProb: 0.5,
    colorJitterProb: 0.8,
    brightness,
    contrast,
    saturation,
    hue,
    grayscaleProb: 0.2,
    gaussianBlurProb: 0,
    blurSigma: [0.1, 2.0],
    solarizationProb: 0,
    mean,
    std,
  };
  return { view, large };
}

/** solo-learn's Barlow Twins recipe: the same asymmetric recipe as {@link byolViews}. */
export function barlowViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  return byolViews(dataset, cropSize, options);
}

/**
 * solo-learn's VICReg recipe (its own, in `scripts/pretrain/cifar/vicreg.yaml` and
 * `imagenet-100/augmentations/vicreg.yaml`): two identically configured views,
 * RandomResizedCrop scale [0.2, 1], ColorJitter(0.4, 0.4, 0.2, 0.1) p = 0.8, grayscale
 * p = 0.2, flip p = 0.5 and solarization p = 0.1 on both views; Gaussian blur p = 0.5 for
 * crops above 64 px (ImageNet recipe), none on small images (CIFAR recipe).
 */
export function vicregViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.4, 0.4, 0.2, 0.1]);
  const view: ViewAugmentation = { ...base, cropScale: [0.2, 1], gaussianBlurProb: large ? 0.5 : 0, solarizationProb: 0.1, ...options.overrides };
  return [view, { ...view, mean: [...view.mean], std: [...view.std] }];
}

/**
 * solo-learn's ReSSL recipe (`ressl.yaml`): view 1 is the student's strong view,
 * RandomResizedCrop, ColorJitter(0.4, 0.4, 0.2, 0.1) p = 0.8, grayscale p = 0.2, flip p = 0.5,
 * no solarization, Gaussian blur p = 0.5 for crops above 64 px (none on small images, as
 * {@link symmetricWeakViews}); view 2 is the teacher's weak view: the same RandomResizedCrop and
 * flip p = 0.5, nothing else (no jitter, grayscale, blur or solarization).
 */
export function resslViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.4, 0.4, 0.2, 0.1]);
  const strong: ViewAugmentation = { ...base, gaussianBlurProb: large ? 0.5 : 0, ...options.overrides };
  const weak: ViewAugmentation = {
    ...base,
    mean: [...base.mean],
    std: [...base.std],
    ...NO_COLOR_OPS,
    ...options.overrides,
  };
  return [strong, weak];
}

/**
 * solo-learn's `reconstruction` recipe (its MAE scripts): ONE view, RandomResizedCrop (as
 * {@link simclrViews}) and flip p = 0.5, no colour jitter, grayscale, blur or solarization.
 */
export function reconstructionViews(dataset: Dataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base } = recipeView(dataset, cropSize, options.stats, [0, 0, 0, 0]);
  return [{ ...base, ...NO_COLOR_OPS, gaussianBlurProb: 0, ...options.overrides }];
}

/**
 * The eval transform for a dataset: resize/center crop to `cropSize` (default the image
 * size, i.e. no resampling) and the dataset's normalisation.
 */
export function evalTransform(dataset: Dataset, cropSize?: number, stats?: ChannelStats): EvalTransform {
  const S = cropSize ?? Math.min(dataset.height, dataset.width);
  const { mean, std } = stats ?? normalizationFor(dataset);
  return { cropSize: S, resizeSize: S, mean, std };
}

/** The names of the augmentation recipes (a method's `static viewRecipe`). */
export type ViewRecipe = 'simclr' | 'symmetric_weak' | 'byol' | 'barlow' | 'vicreg' | 'ressl' | 'reconstruction';

/**
 * The views of a recipe name (a method's `static viewRecipe`) for `dataset`, with the
 * recipe's defaults: 'symmetric_weak', 'byol', 'barlow', 'vicreg' and 'ressl' give theirs,
 * any other name SimCLR's.
 */
export function viewsFor(recipe: ViewRecipe, dataset: Dataset): ViewAugmentation[] {
  switch (recipe) {
    case 'symmetric_weak':
      return symmetricWeakViews(dataset);
    case 'byol':
      return byolViews(dataset);
    case 'barlow':
      return barlowViews(dataset);
    case 'vicreg':
      return vicregViews(dataset);
    case 'ressl':
      return resslViews(dataset);
    case 'reconstruction':
      return reconstructionViews(dataset);
    default:
      return simclrViews(dataset);
  }
}
