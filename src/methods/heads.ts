import { BatchNorm, GELU, LayerNorm, Linear, ReLU, Sequential, type NormKind } from '../core/layers.js';
import type { Layer } from '../core/module.js';
import type { Rng } from '../core/random.js';

/**
 * The normalisation of a head's hidden layer of `dim` features: batch norm, or for `group`
 * and `layer` a per-sample LayerNorm over all features (group norm is for feature maps;
 * on a vector, small groups of a few values normalise badly).
 */
export function headNorm(norm: NormKind, dim: number): Layer {
  return norm === 'batch' ? new BatchNorm(dim) : new LayerNorm(dim);
}

/** Options of {@link mlpHead}. */
export interface MlpHeadOptions {
  rng: Rng;
  /** Normalisation of the method's heads ({@link headNorm}). */
  norm: NormKind;
  /** Normalise the hidden layers (default true; SimCLR's and MoCo v2+'s projectors do not). */
  hiddenNorm?: boolean;
  /**
   * A normalisation after the last Linear: `affine` (with scale and shift) or `plain`
   * (without, as MoCo v3's and SimSiam's projectors); default none. With `--norm group|layer`
   * it is a LayerNorm (affine either way).
   */
  outputNorm?: 'affine' | 'plain';
  /** Biases in the Linear layers (default true; MoCo v3's `_build_mlp` has none). */
  bias?: boolean;
  /**
   * Give the Linear layers that a normalisation follows a bias (default true). `false` drops
   * it, as SimSiam's heads do (batch norm cancels it).
   */
  biasBeforeNorm?: boolean;
  /** The hidden layers' activation: `relu` (default) or `gelu` (VIbCReg's projector). */
  activation?: 'relu' | 'gelu';
  /** A layer appended after the last Linear and its output norm (VIbCReg's IterNorm). */
  outputLayer?: Layer;
}

/**
 * An MLP head `[B, dims[0]] -> [B, dims.at(-1)]`: for each hidden width, Linear -> Norm ->
 * ReLU (or GELU); then a Linear to the output width (and the optional output norm and output layer). `dims` =
 * `[in, hidden..., out]`, e.g. BYOL's projector `[F, 4096, 256]`, VICReg's expander
 * `[F, 2048, 2048, 2048]`.
 */
export function mlpHead(dims: number[], options: MlpHeadOptions): Sequential {
  if (dims.length < 2) throw new Error(`mlpHead: needs at least an input and an output width, got [${dims.join(', ')}]`);
  const { rng, norm, hiddenNorm = true, outputNorm, bias = true, biasBeforeNorm = true, activation = 'relu', outputLayer } = options;
  const layers: Layer[] = [];
  for (let i = 1; i < dims.length - 1; i++) {
    layers.push(new Linear(dims[i - 1]!, dims[i]!, { rng, bias: bias && (biasBeforeNorm || !hiddenNorm) }));
    if (hiddenNorm) layers.push(headNorm(norm, dims[i]!));
    layers.push(activation === 'gelu' ? new GELU() : new ReLU());
  }
  const out = dims[dims.length - 1]!;
  layers.push(new Linear(dims[dims.length - 2]!, out, { rng, bias: bias && (biasBeforeNorm || !outputNorm) }));
  if (outputNorm) layers.push(norm === 'batch' ? new BatchNorm(out, { affine: outputNorm === 'affine' }) : new LayerNorm(out));
  if (outputLayer) layers.push(outputLayer);
  return new Sequential(...layers);
}
