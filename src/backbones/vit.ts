/**
 * Vision Transformers (Dosovitskiy et al. 2021) in timm's layout and parameter names:
 * `patch_embed.proj` (convolution, kernel = stride = patch), `cls_token` `[1, 1, D]`,
 * `pos_embed` `[1, 1 + G², D]`, `blocks.i` (pre-norm {@link TransformerBlock}s), `norm`.
 */
import { invalidValue } from '../core/errors.js';
import { truncNormal } from '../core/init.js';
import { childLayer, Conv2d, LayerNorm, Sequential } from '../core/layers.js';
import { Layer } from '../core/module.js';
import { resizeBicubic } from '../core/interpolate.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import { TransformerBlock, VIT_LAYER_NORM_EPS } from '../core/transformer.js';
import { Backbone, type BackboneOptions } from './base.js';

/** Default patch side: 4 pixels, for 28-32 px images (7x7 or 8x8 patches). */
export const DEFAULT_VIT_PATCH_SIZE = 4;

/**
 * timm's `PatchEmbed`: `proj`, a convolution with kernel = stride = patch and a bias,
 * `[B, H, W, C] -> [B, floor(H / p), floor(W / p), D]`.
 */
export class PatchEmbed extends Layer {
  constructor(inChannels: number, dim: number, patchSize: number, rng: BackboneOptions['rng']) {
    super();
    this.addModule('proj', new Conv2d(inChannels, dim, patchSize, { stride: patchSize, bias: true, init: 'uniformFanIn', rng }));
  }

  forward(x: Tensor): Tensor {
    return childLayer(this, 'proj').forward(x);
  }
}

/** The shape of a Vision Transformer. */
export interface VitConfig {
  /** Token width D (the feature dimension). */
  embedDim: number;
  /** Number of transformer blocks. */
  depth: number;
  /** Attention heads per block. */
  numHeads: number;
  /** MLP hidden width as a multiple of D (timm: 4). */
  mlpRatio: number;
  /** Side of the square patches in pixels. */
  patchSize: number;
}

/**
 * A Vision Transformer: `[B, H, W, C] -> [B, D]`, the final-LayerNorm output of the `[CLS]` token.
 *
 * The image is cut into `floor(H / p) x floor(W / p)` patches (the convolution drops a remainder),
 * embedded, prefixed with the learned `[CLS]` token and added to the learned position
 * embeddings. These are made for the `imageSize` the backbone is built for (a G x G grid,
 * G = floor(imageSize / p)); other input sizes (multi-crop local crops) resize the grid part
 * bicubically, as timm and DINO do (PyTorch's `F.interpolate(mode='bicubic',
 * align_corners=False)`, without antialiasing), inside the gradient tape so `pos_embed`
 * receives its gradient. Any input size of at least one patch is accepted.
 *
 * Initialisation as timm: position embeddings trunc-normal std 0.02, `[CLS]` normal std 1e-6,
 * linear weights trunc-normal std 0.02 with zero biases, LayerNorms ones and zeros, the patch
 * convolution PyTorch's default (uniform ±1/sqrt(fan-in)).
 */
export class VisionTransformer extends Backbone {
  readonly featureDim: number;
  /** Side of the position-embedding grid (patches per side of an `imageSize` image). */
  readonly gridSize: number;
  /** Channels C of the input images. */
  readonly inChannels: number;
  readonly clsToken: Variable;
  readonly posEmbed: Variable;

  constructor(
    readonly config: VitConfig,
    options: BackboneOptions,
  ) {
    super();
    const { embedDim: dim, patchSize } = config;
    const { rng } = options;
    this.featureDim = dim;
    this.inChannels = options.inChannels;
    this.gridSize = Math.floor(options.imageSize / patchSize);
    this.addModule('patch_embed', new PatchEmbed(options.inChannels, dim, patchSize, rng));
    this.clsToken = this.addParameter('cls_token', tf.tensor(rng.normalArray(dim, 0, 1e-6), [1, 1, dim]));
    this.posEmbed = this.addParameter('pos_embed', truncNormal([1, 1 + this.gridSize ** 2, dim], 0.02, rng));
    const blocks = Array.from({ length: config.depth }, () => new TransformerBlock({ dim, numHeads: config.numHeads, mlpRatio: config.mlpRatio, rng }));
    this.addModule('blocks', new Sequential(...blocks));
    this.addModule('norm', new LayerNorm(dim, { eps: VIT_LAYER_NORM_EPS }));
  }

  /** `[B, H, W, C] -> [B, D]` (H, W >= patch size). */
  forward(x: Tensor): Tensor {
    const p = this.config.patchSize;
    if (x.rank !== 4 || (x.shape[1] ?? 0) < p || (x.shape[2] ?? 0) < p) {
      throw new Error(`VisionTransformer expects [B, H, W, C] with H, W >= patch size ${p}, got shape [${x.shape}]`);
    }
    return tf.tidy(() => {
      const dim = this.featureDim;
      const patches = childLayer(this, 'patch_embed').forward(x);
      const [b, h, w] = patches.shape;
      // Joined token-major ([1 + hw, B, D], along the first axis) so that the concatenation's
      // gradient is a split into contiguous blocks (a split along the token axis is a slow JS loop).
      const cls = tf.broadcastTo(tf.reshape(this.clsToken, [1, 1, dim]), [1, b, dim]);
      const tokenMajor = tf.concat([cls, tf.transpose(tf.reshape(patches, [b, h * w, dim]), [1, 0, 2])], 0);
      const tokens = tf.transpose(tokenMajor, [1, 0, 2]);
      const encoded = childLayer(this, 'blocks').forward(tf.add(tokens, this.positionEmbedding(h, w)));
      const clsOut = tf.reshape(tf.slice(encoded, [0, 0, 0], [b, 1, dim]), [b, dim]);
      return childLayer(this, 'norm').forward(clsOut);
    });
  }

  /**
   * Every output token, after the final LayerNorm: `[B, H, W, C] -> [B, 1 + L, D]` (token 0
   * the `[CLS]` output, then the L = h·w patches in row-major order), as iBOT's
   * `return_all_tokens`. With `mask` (`[B, L]`, 1 where a patch is masked, 0 elsewhere), the
   * embeddings of the masked patches are replaced by `maskToken` (`[D]`, a parameter of the
   * caller: the ViT itself has none) before the position embeddings are added (iBOT's
   * `mask_model`); its gradient is the sum over the masked patches. {@link forward} is unchanged.
   */
  encodeTokens(x: Tensor, mask?: Tensor, maskToken?: Tensor): Tensor {
    const p = this.config.patchSize;
    if (x.rank !== 4 || (x.shape[1] ?? 0) < p || (x.shape[2] ?? 0) < p) {
      throw new Error(`VisionTransformer expects [B, H, W, C] with H, W >= patch size ${p}, got shape [${x.shape}]`);
    }
    if ((mask === undefined) !== (maskToken === undefined)) throw new Error('encodeTokens: a mask needs a mask token, and a mask token a mask');
    return tf.tidy(() => {
      const dim = this.featureDim;
      const patches = childLayer(this, 'patch_embed').forward(x);
      const [b, h, w] = patches.shape;
      const L = h! * w!;
      let rows = tf.reshape(patches, [b!, L, dim]);
      if (mask && maskToken) {
        if (mask.rank !== 2 || mask.shape[0] !== b || mask.shape[1] !== L) throw new Error(`encodeTokens: mask must be [${b}, ${L}], got [${mask.shape}]`);
        if (maskToken.size !== dim) throw new Error(`encodeTokens: mask token must have ${dim} values, got [${maskToken.shape}]`);
        const m = tf.expandDims(mask, 2); // [B, L, 1]
        rows = tf.add(tf.mul(rows, tf.sub(1, m)), tf.mul(m, tf.reshape(maskToken, [1, 1, dim])));
      }
      const cls = tf.broadcastTo(tf.reshape(this.clsToken, [1, 1, dim]), [1, b!, dim]);
      const tokens = tf.transpose(tf.concat([cls, tf.transpose(rows, [1, 0, 2])], 0), [1, 0, 2]);
      const encoded = childLayer(this, 'blocks').forward(tf.add(tokens, this.positionEmbedding(h!, w!)));
      return childLayer(this, 'norm').forward(encoded);
    });
  }

  /**
   * The encoder on a subset of each image's patches (MAE's `forward_encoder`): patches
   * embedded and given their position embeddings, only the `k` patches listed in `keep`
   * (`[B·k]`, row-major patch indices per sample) kept, the `[CLS]` token prefixed, the blocks
   * and the final LayerNorm: `[B, H, W, C] -> [B, 1 + k, D]` (token 0 the `[CLS]` output).
   * {@link forward} is unchanged.
   */
  encodeKept(x: Tensor, keep: Int32Array, k: number): Tensor {
    return tf.tidy(() => {
      const dim = this.featureDim;
      const patches = childLayer(this, 'patch_embed').forward(x);
      const [b, h, w] = patches.shape;
      const L = h * w;
      if (keep.length !== b * k || keep.some((i) => i < 0 || i >= L)) throw new Error(`encodeKept: keep must hold ${b}x${k} patch indices in 0..${L - 1}`);
      const pos = this.positionEmbedding(h, w);
      const gridPos = tf.slice(pos, [0, 1, 0], [1, L, dim]);
      const rows = tf.reshape(tf.add(tf.reshape(patches, [b, L, dim]), gridPos), [b * L, dim]);
      const flat = keep.map((i, n) => Math.floor(n / k) * L + i);
      const kept = tf.reshape(tf.gather(rows, tf.tensor1d(flat, 'int32')), [b, k, dim]);
      const cls = tf.broadcastTo(tf.add(this.clsToken, tf.slice(pos, [0, 0, 0], [1, 1, dim])), [1, b, dim]);
      const tokens = tf.transpose(tf.concat([cls, tf.transpose(kept, [1, 0, 2])], 0), [1, 0, 2]);
      return childLayer(this, 'norm').forward(childLayer(this, 'blocks').forward(tokens));
    });
  }

  /** `[1, 1 + h·w, D]`: the `[CLS]` embedding and the grid's, resized to h x w patches. */
  positionEmbedding(h: number, w: number): Tensor {
    const g = this.gridSize;
    if (h === g && w === g) return this.posEmbed;
    return tf.tidy(() => {
      const dim = this.featureDim;
      const clsPos = tf.slice(this.posEmbed, [0, 0, 0], [1, 1, dim]);
      const grid = tf.reshape(tf.slice(this.posEmbed, [0, 1, 0], [1, g * g, dim]), [g, g, dim]);
      return tf.concat([clsPos, tf.reshape(resizeBicubic(grid, h, w), [1, h * w, dim])], 1);
    });
  }
}

/** `backbone` as a Vision Transformer, which `method` needs; any other backbone is a user error naming both. */
export function asVisionTransformer(backbone: Backbone, method: string): VisionTransformer {
  if (!(backbone instanceof VisionTransformer)) {
    throw invalidValue('backbone', backbone.constructor.name, `a Vision Transformer (vit_tiny or vit_small) for method ${method}`);
  }
  return backbone;
}

function vitFactory(shape: Omit<VitConfig, 'patchSize'>): (options: BackboneOptions) => VisionTransformer {
  return (options) => new VisionTransformer({ ...shape, patchSize: options.patchSize ?? DEFAULT_VIT_PATCH_SIZE }, options);
}

/** ViT-Tiny: D 192, 12 blocks, 3 heads, MLP ratio 4 (5.36 M parameters with 4 px patches on 32x32x3). */
export const vitTiny = vitFactory({ embedDim: 192, depth: 12, numHeads: 3, mlpRatio: 4 });

/** ViT-Small: D 384, 12 blocks, 6 heads, MLP ratio 4. */
export const vitSmall = vitFactory({ embedDim: 384, depth: 12, numHeads: 6, mlpRatio: 4 });
