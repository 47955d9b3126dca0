/**
 * Multi-crop views (`--crops`, config key `crops`): groups of random resized crops, each of
 * its own size and scale range, turned into the view list of the loader. The first group
 * holds the global crops, which take the method's recipe views in turn (their asymmetric
 * blur and solarisation included); every later group holds local crops. Each view v of
 * sample i in epoch e is keyed (seed, e, i, v) as any view (see `augmentBatch`), global
 * crops first, then the local crops group by group.
 *
 * Local crops take the recipe's first view without Gaussian blur and solarisation, as in
 * solo-learn's multi-crop augmentations (`imagenet-100-multicrop/augmentations/asymmetric.yaml`
 * and `symmetric.yaml`: the local pipeline is the global one with `gaussian_blur.prob` and
 * `solarization.prob` 0). Default local crops are `round(S * 96 / 224)` px for S px global
 * crops (SwAV's and DINO's 224/96 ratio: 12 px for 28 px images, 14 px for 32 px) with
 * SwAV's scale range 0.05-0.14, unless the method says otherwise.
 */
import { UserError } from '../../core/errors.js';
import type { ViewAugmentation } from './views.js';

/** `count` crops of `size` x `size` px, each covering a fraction in `scale` of the image area. */
export interface CropGroup {
  count: number;
  size: number;
  /** RandomResizedCrop area fraction range [min, max], 0 < min <= max <= 1. */
  scale: [number, number];
}

/** The crops a method takes (its static `crops`). */
export interface CropPolicy {
  /** The number of global crops its objective compares: the first group must have exactly this many. */
  globalCrops: number;
  /** Whether it accepts local crops (groups after the first): multi-crop methods such as SwAV and DINO. */
  multiCrop: boolean;
  /** Local crops when `--crops` is not given (multi-crop methods; default none). */
  defaultLocalCrops?: number;
  /** Scale range of the default local crops; default {@link DEFAULT_LOCAL_SCALE}. */
  localScale?: [number, number];
}

/** Two global crops and no local ones: the policy of every method whose loss compares two views. */
export const TWO_GLOBAL_CROPS: CropPolicy = Object.freeze({ globalCrops: 2, multiCrop: false });

/** SwAV's local crop scale range (its ImageNet multi-crop: 0.05-0.14 of the image area). */
export const DEFAULT_LOCAL_SCALE: [number, number] = [0.05, 0.14];

/** The side of default local crops for `globalSize` px global crops: SwAV's and DINO's 96/224 ratio, rounded. */
export function localCropSize(globalSize: number): number {
  return Math.max(1, Math.round((globalSize * 96) / 224));
}

const SYNTAX =
  'comma-separated groups NxS:lo-hi (N crops of S x S px covering lo to hi of the image area; the first group are the global crops), e.g. 2x28:0.14-1,6x12:0.05-0.14';

/** `2x28:0.14-1,6x12:0.05-0.14`: the text form of crop groups (as `--crops` takes it). */
export function formatCrops(groups: readonly CropGroup[]): string {
  return groups.map((g) => `${g.count}x${g.size}:${g.scale[0]}-${g.scale[1]}`).join(',');
}

/** Checks one group's numbers; `value` is what the user wrote, for the message. */
function checkGroup(field: string, value: unknown, g: CropGroup): CropGroup {
  const bad = (allowed: string) => new UserError(`${field}: ${JSON.stringify(value)} is not allowed; expected ${allowed}`);
  if (!Number.isInteger(g.count) || g.count < 1) throw bad('a crop count N >= 1 in each group');
  if (!Number.isInteger(g.size) || g.size < 1) throw bad('a crop size S >= 1 px in each group');
  const [lo, hi] = g.scale;
  if (!(typeof lo === 'number' && typeof hi === 'number' && lo > 0 && lo <= hi && hi <= 1)) throw bad('a scale range lo-hi with 0 < lo <= hi <= 1');
  return { count: g.count, size: g.size, scale: [lo, hi] };
}

const GROUP = /^(\d+)x(\d+):(\d*\.?\d+)-(\d*\.?\d+)$/;

/** One `NxS:lo-hi` group of `--crops`. */
function parseGroup(field: string, text: string): CropGroup {
  const m = GROUP.exec(text.trim());
  if (!m) throw new UserError(`${field}: ${JSON.stringify(text.trim())} is not allowed; expected ${SYNTAX}`);
  return checkGroup(field, text.trim(), { count: Number(m[1]), size: Number(m[2]), scale: [Number(m[3]), Number(m[4])] });
}

/** One `{count, size, scale: [min, max]}` entry of a YAML `crops` list. */
function groupFromObject(field: string, entry: unknown): CropGroup {
  const allowed = 'a mapping {count: N, size: S, scale: [lo, hi]}';
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
    throw new UserError(`${field}: ${JSON.stringify(entry)} is not allowed; expected ${allowed}`);
  const keys = Object.keys(entry);
  const unknown = keys.find((k) => !['count', 'size', 'scale'].includes(k));
  const o = entry as { count?: unknown; size?: unknown; scale?: unknown };
  if (unknown !== undefined || !Array.isArray(o.scale) || o.scale.length !== 2 || typeof o.count !== 'number' || typeof o.size !== 'number') {
    throw new UserError(`${field}: ${JSON.stringify(entry)} is not allowed; expected ${allowed}`);
  }
  return checkGroup(field, entry, { count: o.count, size: o.size, scale: [o.scale[0] as number, o.scale[1] as number] });
}

/**
 * The crop groups of a `--crops` value: the text `NxS:lo-hi,...` or (from a YAML config) a
 * list of `{count, size, scale: [lo, hi]}`. Bad syntax, a zero count or size, or a scale
 * range outside (0, 1] or reversed is a `UserError` naming `field` (`crops[i]` for an entry
 * of a list) and the value.
 */
export function parseCrops(value: unknown, field = '--crops'): CropGroup[] {
  if (typeof value === 'string') {
    if (value.trim() === '') throw new UserError(`${field}: "" is not allowed; expected ${SYNTAX}`);
    return value.split(',').map((part) => parseGroup(field, part));
  }
  if (Array.isArray(value) && value.length > 0) return value.map((entry, i) => groupFromObject(`${field.replace(/^--/, '')}[${i}]`, entry));
  throw new UserError(`${field}: ${JSON.stringify(value)} is not allowed; expected ${SYNTAX}, or a YAML list of {count, size, scale: [lo, hi]}`);
}

/** The crops a method takes by default: its global crops at the recipe's size and scale, and its default local crops. */
export function defaultCrops(policy: CropPolicy, recipe: readonly ViewAugmentation[]): CropGroup[] {
  const { cropSize, cropScale } = recipe[0];
  const global: CropGroup = { count: policy.globalCrops, size: cropSize, scale: [cropScale[0], cropScale[1]] };
  const local = policy.defaultLocalCrops ?? 0;
  if (local === 0) return [global];
  return [global, { count: local, size: localCropSize(cropSize), scale: [...(policy.localScale ?? DEFAULT_LOCAL_SCALE)] }];
}

/**
 * Checks `groups` against the image size and what method `method` takes (`policy`); a
 * `UserError` naming `field`, the value and what is allowed otherwise.
 */
export function validateCrops(groups: readonly CropGroup[], policy: CropPolicy, method: string, imageSize: number, field = '--crops'): void {
  const value = formatCrops(groups);
  const bad = (allowed: string) => new UserError(`${field}: ${JSON.stringify(value)} is not allowed; expected ${allowed}`);
  const tooBig = groups.find((g) => g.size > imageSize);
  if (tooBig) throw bad(`crop sizes of at most the image size ${imageSize} px (group ${formatCrops([tooBig])})`);
  const example = formatCrops([{ ...groups[0], count: policy.globalCrops }]);
  if (groups[0].count !== policy.globalCrops) {
    throw bad(`exactly ${policy.globalCrops} global crops (the first group) for method '${method}', e.g. ${example}`);
  }
  if (groups.length > 1 && !policy.multiCrop) {
    throw bad(
      `one group of ${policy.globalCrops} global crops for method '${method}', e.g. ${example}: its loss compares exactly ${policy.globalCrops} views and takes no local crops`,
    );
  }
}

/**
 * The views of crop groups: global crop k takes recipe view `k % recipe.length` (its
 * colour, blur, solarisation and flip settings) with the first group's size and scale;
 * every local crop takes recipe view 0 without Gaussian blur and solarisation, with its
 * group's size and scale. Global crops come first, then each local group in order.
 */
export function cropViews(recipe: readonly ViewAugmentation[], groups: readonly CropGroup[]): ViewAugmentation[] {
  const crop = (base: ViewAugmentation, g: CropGroup): ViewAugmentation => ({
    ...base,
    cropSize: g.size,
    cropScale: [g.scale[0], g.scale[1]],
    mean: [...base.mean],
    std: [...base.std],
  });
  const [global, ...locals] = groups;
  const views = Array.from({ length: global.count }, (_, k) => crop(recipe[k % recipe.length], global));
  for (const g of locals) {
    for (let k = 0; k < g.count; k++) views.push({ ...crop(recipe[0], g), gaussianBlurProb: 0, solarizationProb: 0 });
  }
  return views;
}

/**
 * The training views of a method: `crops` (a `--crops` value, or undefined for the method's
 * default crops) parsed, checked against the image size and `policy`, and applied to the
 * method's recipe views. With the default crops of a two-view method these are the recipe's
 * views unchanged.
 */
export function resolveCrops(
  crops: unknown,
  policy: CropPolicy,
  method: string,
  recipe: readonly ViewAugmentation[],
  imageSize: number,
): { crops: CropGroup[]; views: ViewAugmentation[] } {
  const groups = crops === undefined ? defaultCrops(policy, recipe) : parseCrops(crops);
  validateCrops(groups, policy, method, imageSize);
  return { crops: groups, views: cropViews(recipe, groups) };
}
