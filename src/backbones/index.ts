/**
 * Backbones by name. `createBackbone('resnet18', options)` builds one; users add their own
 * with {@link registerBackbone}.
 */
import { invalidValue } from '../core/errors.js';
import { NORM_KINDS } from '../core/layers.js';
import { Backbone, type BackboneOptions } from './base.js';
import { mlp } from './mlp.js';
import { resnet18, resnet50 } from './resnet.js';
import { tinyResnet } from './tiny-resnet.js';
import { vitSmall, vitTiny } from './vit.js';

export { Backbone, hasFeatureMaps, type BackboneOptions, type SpatialBackbone } from './base.js';
// The norm layers and helpers (GroupNorm, LayerNorm, normLayer, defaultNumGroups, NormKind,
// NORM_KINDS) live in src/core/layers.ts and are exported from the package root;
// `hasBatchNorm` (the gradient cache's refusal check) in src/methods/base.ts.
export { BasicBlock, Bottleneck, ResNet, resnet18, resnet50, type BlockType } from './resnet.js';
export { TinyResNet, tinyResnet } from './tiny-resnet.js';
export { DEFAULT_MLP_HIDDEN, MlpBackbone, mlp } from './mlp.js';
export { DEFAULT_VIT_PATCH_SIZE, PatchEmbed, VisionTransformer, vitSmall, vitTiny, type VitConfig } from './vit.js';

/** Builds a backbone from the shared options. */
export type BackboneFactory = (options: BackboneOptions) => Backbone;

const factories = new Map<string, BackboneFactory>();
const names: string[] = [];

/** Names accepted by {@link createBackbone}, in registration order (grows with {@link registerBackbone}). */
export const BACKBONE_NAMES: readonly string[] = names;

/** Makes `name` available to {@link createBackbone}; a name can be registered once. */
export function registerBackbone(name: string, factory: BackboneFactory): void {
  if (factories.has(name)) throw new Error(`backbone '${name}' is already registered`);
  factories.set(name, factory);
  names.push(name);
}

registerBackbone('resnet18', resnet18);
registerBackbone('resnet50', resnet50);
registerBackbone('tiny_resnet', tinyResnet);
registerBackbone('mlp', mlp);
registerBackbone('vit_tiny', vitTiny);
registerBackbone('vit_small', vitSmall);

/**
 * The backbone registered as `name`, mapping `[B, imageSize, imageSize, inChannels]` to
 * `[B, featureDim]`. An unknown name or a bad size is a {@link UserError}.
 */
export function createBackbone(name: string, options: BackboneOptions): Backbone {
  const factory = factories.get(name);
  if (!factory) throw invalidValue('backbone', name, BACKBONE_NAMES.join(' | '));
  for (const field of ['inChannels', 'imageSize'] as const) {
    const value = options[field];
    if (!Number.isInteger(value) || value < 1) throw invalidValue(field, value, 'a positive integer');
  }
  if (options.norm !== undefined && !NORM_KINDS.includes(options.norm)) {
    throw invalidValue('norm', options.norm, NORM_KINDS.join(' | '));
  }
  const { patchSize, imageSize } = options;
  if (patchSize !== undefined && !(Number.isInteger(patchSize) && patchSize >= 1 && patchSize <= imageSize)) {
    throw invalidValue('patchSize', patchSize, `an integer from 1 to the image size ${imageSize}`);
  }
  return factory(options);
}
