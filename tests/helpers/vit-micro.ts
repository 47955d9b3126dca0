/**
 * `vit_micro`: a Vision Transformer of 2 blocks, width 48, 3 heads, MLP ratio 2 (about 40 k
 * parameters; vit_tiny has 12 blocks of width 192, 5.4 M), for the tests that run the ViT
 * methods many times over (the exactness table, tests/distributed/zoo-table.ts; `verify
 * --engine-against`; the browser bundle's steps): the same {@link VisionTransformer} and code
 * paths as vit_tiny (patch embedding, position embeddings resized per crop size, `[CLS]`,
 * masked and dropped tokens, a stack of blocks with activation checkpointing), at a few
 * seconds per verify run instead of a minute.
 *
 * It imports nothing at run time: the library is a parameter, so that the browser tests serve
 * it to the page beside tests/browser/steps.ts, which registers it in the bundle.
 */
import type * as Backbones from '../../src/backbones/index.js';

export const VIT_MICRO = 'vit_micro';

/** Registers {@link VIT_MICRO} with `zoo`'s backbones, once: src/backbones in Node, or the browser bundle (which exports them). */
export function registerVitMicro(zoo: typeof Backbones): void {
  if (zoo.BACKBONE_NAMES.includes(VIT_MICRO)) return;
  zoo.registerBackbone(
    VIT_MICRO,
    (options) =>
      new zoo.VisionTransformer({ embedDim: 48, depth: 2, numHeads: 3, mlpRatio: 2, patchSize: options.patchSize ?? zoo.DEFAULT_VIT_PATCH_SIZE }, options),
  );
}
