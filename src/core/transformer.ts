/**
 * Transformer encoder layers with timm's layout and child names (`norm1`, `attn.qkv`,
 * `attn.proj`, `norm2`, `mlp.fc1`, `mlp.fc2`): the blocks of the Vision Transformer
 * backbones, reusable by any method that needs a transformer encoder or decoder (MAE, All4One).
 * Tokens are `[B, N, D]` (batch, tokens, features).
 */
import { checkpointed } from './checkpoint.js';
import { truncNormal } from './init.js';
import { softmaxLastAxis } from './kernels/softmax.js';
import { childLayer, gelu, LayerNorm, Linear } from './layers.js';
import { Layer, type Module } from './module.js';
import type { Rng } from './random.js';
import { tf, type Tensor } from './tf.js';

export { softmaxLastAxis };

/** timm's ViT epsilon for every LayerNorm (`partial(nn.LayerNorm, eps=1e-6)`). */
export const VIT_LAYER_NORM_EPS = 1e-6;

/** A Linear with timm's ViT initialisation: weight trunc-normal std 0.02, bias zeros. */
export function vitLinear(inFeatures: number, outFeatures: number, rng: Rng): Linear {
  const layer = new Linear(inFeatures, outFeatures, { rng });
  const weight = truncNormal([inFeatures, outFeatures], 0.02, rng);
  layer.weight.assign(weight);
  weight.dispose();
  layer.bias?.assign(tf.zeros([outFeatures]));
  return layer;
}

/**
 * Applies a linear layer to every token, `[B, N, in] -> [B, N, out]`, as one fused matmul + bias
 * over the `[B·N, in]` rows (the native `_FusedMatMul`).
 */
function perToken(layer: Layer, x: Tensor): Tensor {
  if (!(layer instanceof Linear)) throw new Error(`expected a Linear, got ${layer.constructor.name}`);
  const [b, n, d] = x.shape;
  return tf.tidy(() => {
    const rows = tf.reshape(x, [b * n, d]) as tf.Tensor2D;
    const y = tf.fused.matMul({ a: rows, b: layer.weight as tf.Tensor2D, bias: layer.bias });
    return tf.reshape(y, [b, n, layer.outFeatures]);
  });
}

/**
 * Multi-head self-attention (timm's `Attention`): `[B, N, D] -> [B, N, D]`.
 * `qkv` (Linear D -> 3D, features ordered (q|k|v, head, headDim)), per head
 * `softmax(q kᵀ / sqrt(headDim)) v` as batched matrix products `[B, H, N, N]`, heads
 * concatenated, then `proj` (Linear D -> D).
 */
export class MultiHeadSelfAttention extends Layer {
  readonly headDim: number;

  constructor(
    readonly dim: number,
    readonly numHeads: number,
    rng: Rng,
  ) {
    super();
    if (!Number.isInteger(dim / numHeads)) throw new Error(`attention: dim ${dim} is not divisible by numHeads ${numHeads}`);
    this.headDim = dim / numHeads;
    this.addModule('qkv', vitLinear(dim, 3 * dim, rng));
    this.addModule('proj', vitLinear(dim, dim, rng));
  }

  /** `[B, N, D] -> [B, N, D]`. */
  forward(x: Tensor): Tensor {
    const [b, n] = x.shape;
    const heads = this.numHeads;
    return tf.tidy(() => {
      // [B, N, 3D] -> [3, B, H, N, headDim]: q, k and v are contiguous slices along the first axis.
      const qkv = tf.transpose(tf.reshape(perToken(childLayer(this, 'qkv'), x), [b, n, 3, heads, this.headDim]), [2, 0, 3, 1, 4]);
      const [q, k, v] = tf.unstack(qkv);
      const weights = softmaxLastAxis(tf.matMul(tf.mul(q, 1 / Math.sqrt(this.headDim)), k, false, true));
      const mixed = tf.transpose(tf.matMul(weights, v), [0, 2, 1, 3]);
      return perToken(childLayer(this, 'proj'), tf.reshape(mixed, [b, n, this.dim]));
    });
  }
}

/** The feed-forward part of a block (timm's `Mlp`): `fc1` (D -> hidden), GELU, `fc2` (hidden -> D), `[B, N, D] -> [B, N, D]`. */
export class TransformerMlp extends Layer {
  constructor(dim: number, hidden: number, rng: Rng) {
    super();
    this.addModule('fc1', vitLinear(dim, hidden, rng));
    this.addModule('fc2', vitLinear(hidden, dim, rng));
  }

  forward(x: Tensor): Tensor {
    return tf.tidy(() => perToken(childLayer(this, 'fc2'), gelu(perToken(childLayer(this, 'fc1'), x))));
  }
}

export interface TransformerBlockOptions {
  /** Token width D. */
  dim: number;
  /** Attention heads (D must be divisible by it). */
  numHeads: number;
  /** MLP hidden width as a multiple of D (default 4). */
  mlpRatio?: number;
  /** Source of the initial weights. */
  rng: Rng;
}

/**
 * A pre-norm transformer block (timm's `Block`): `[B, N, D] -> [B, N, D]`,
 * `x + attn(norm1(x))`, then `x + mlp(norm2(x))`, LayerNorms with eps 1e-6.
 */
export class TransformerBlock extends Layer {
  /** Keep only the block's input for the backward pass and recompute the rest (see core/checkpoint.ts; {@link setGradCheckpointing}). */
  checkpointActivations = false;

  constructor(options: TransformerBlockOptions) {
    super();
    const { dim, numHeads, rng } = options;
    this.addModule('norm1', new LayerNorm(dim, { eps: VIT_LAYER_NORM_EPS }));
    this.addModule('attn', new MultiHeadSelfAttention(dim, numHeads, rng));
    this.addModule('norm2', new LayerNorm(dim, { eps: VIT_LAYER_NORM_EPS }));
    this.addModule('mlp', new TransformerMlp(dim, Math.round(dim * (options.mlpRatio ?? 4)), rng));
  }

  /** `[B, N, D] -> [B, N, D]`. */
  forward(x: Tensor): Tensor {
    if (x.rank !== 3) throw new Error(`TransformerBlock expects tokens [B, N, D], got shape [${x.shape}]`);
    const block = (tokens: Tensor) =>
      tf.tidy(() => {
        const h = tf.add(tokens, childLayer(this, 'attn').forward(childLayer(this, 'norm1').forward(tokens)));
        return tf.add(h, childLayer(this, 'mlp').forward(childLayer(this, 'norm2').forward(h)));
      });
    return this.checkpointActivations ? checkpointed(block, this.trainableParameters(), x) : block(x);
  }
}

/** Every {@link TransformerBlock} under `root` (itself included), depth first. */
export function transformerBlocks(root: Module): TransformerBlock[] {
  return root.namedModules().flatMap(([, m]) => (m instanceof TransformerBlock ? [m] : []));
}

/**
 * Turns activation checkpointing of every {@link TransformerBlock} under `root` on or off
 * (`--grad-checkpointing`). Returns how many blocks it set: 0 for a model without any.
 */
export function setGradCheckpointing(root: Module, on: boolean): number {
  const blocks = transformerBlocks(root);
  for (const block of blocks) block.checkpointActivations = on;
  return blocks.length;
}

export interface PostNormTransformerLayerOptions {
  /** Token width D. */
  dim: number;
  /** Attention heads (D must be divisible by it). */
  numHeads: number;
  /** Width of the feed-forward hidden layer. */
  feedForwardDim: number;
  /** Source of the initial weights. */
  rng: Rng;
}

/**
 * A post-norm transformer encoder layer, PyTorch's `nn.TransformerEncoderLayer` with its
 * defaults (`norm_first=False`, ReLU, LayerNorm eps 1e-5) and dropout 0:
 * `h = norm1(x + attn(x))`, `y = norm2(h + fc2(relu(fc1(h))))`, `[B, N, D] -> [B, N, D]`.
 * Child names as {@link TransformerBlock}'s (`attn.qkv`, `attn.proj`, `fc1`, `fc2`, `norm1`, `norm2`).
 */
export class PostNormTransformerLayer extends Layer {
  constructor(options: PostNormTransformerLayerOptions) {
    super();
    const { dim, numHeads, feedForwardDim, rng } = options;
    this.addModule('attn', new MultiHeadSelfAttention(dim, numHeads, rng));
    this.addModule('norm1', new LayerNorm(dim));
    this.addModule('fc1', vitLinear(dim, feedForwardDim, rng));
    this.addModule('fc2', vitLinear(feedForwardDim, dim, rng));
    this.addModule('norm2', new LayerNorm(dim));
  }

  /** `[B, N, D] -> [B, N, D]`. */
  forward(x: Tensor): Tensor {
    if (x.rank !== 3) throw new Error(`PostNormTransformerLayer expects tokens [B, N, D], got shape [${x.shape}]`);
    return tf.tidy(() => {
      const h = childLayer(this, 'norm1').forward(tf.add(x, childLayer(this, 'attn').forward(x)));
      const feedForward = perToken(childLayer(this, 'fc2'), tf.relu(perToken(childLayer(this, 'fc1'), h)));
      return childLayer(this, 'norm2').forward(tf.add(h, feedForward));
    });
  }
}
