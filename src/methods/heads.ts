import { BatchNorm, GELU, LayerNorm, Linear, ReLU, Sequential, type NormKind } from '../core/layers.js';
import { truncNormal, uniformFanIn } from '../core/init.js';
import { l2NormalizeRows } from '../core/ops.js';
import { Layer } from '../core/module.js';
import type { Rng } from '../core/random.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';

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

/**
 * A weight-normalised linear layer without bias whose norms are frozen at 1 (PyTorch's
 * `nn.utils.weight_norm(nn.Linear(in, out, bias=False))` with `weight_g` filled with 1 and not
 * trained, as SwAV's prototypes and DINO's last layer in solo-learn): `[B, in] -> [B, out]`,
 * `y = x · (V / ‖V‖)` where each of the `out` columns of the parameter `weight` V
 * `[in, out]` is divided by its L2 norm in the forward pass (the gradient flows through the
 * normalisation into V; V itself is never re-normalised).
 */
export class WeightNormLinear extends Layer {
  /** V `[in, out]`, initialised like `nn.Linear`'s weight. */
  readonly weight: Variable;

  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    rng: Rng,
  ) {
    super();
    this.weight = this.addParameter('weight', uniformFanIn([inFeatures, outFeatures], inFeatures, rng));
  }

  /** The effective weight `V / ‖V‖` (columns of norm 1), `[in, out]`. */
  normalizedWeight(): Tensor {
    return tf.tidy(() => tf.div(this.weight, tf.norm(this.weight, 'euclidean', 0, true)));
  }

  /** `[B, in] -> [B, out]`. */
  forward(x: Tensor): Tensor {
    return tf.tidy(() => tf.matMul(x, this.normalizedWeight()));
  }
}

/** Options of {@link DinoHead}. */
export interface DinoHeadOptions {
  rng: Rng;
  /** Hidden width of the MLP (solo-learn's `proj_hidden_dim`). */
  hiddenDim: number;
  /** Width of the bottleneck before the last layer (solo-learn's `proj_output_dim`). */
  bottleneckDim: number;
  /** Number K of output units (prototypes). */
  outputDim: number;
  /** A normalisation ({@link headNorm}) after each hidden Linear (solo-learn's `use_bn_in_head`); default none. */
  hiddenNorm?: NormKind;
}

/**
 * DINO's head without its last layer (also SimDINO's head): Linear-GELU-Linear-GELU-Linear
 * `[B, inFeatures] -> [B, outDim]`, weights from a normal of std 0.02 truncated to ±2, biases 0;
 * with `hiddenNorm`, Linear-Norm-GELU.
 */
export function dinoMlp(inFeatures: number, hiddenDim: number, outDim: number, hiddenNorm: NormKind | undefined, rng: Rng): Sequential {
  const linear = (i: number, o: number) => {
    const layer = new Linear(i, o, { rng });
    tf.tidy(() => {
      layer.weight.assign(truncNormal([i, o], 0.02, rng));
      layer.bias!.assign(tf.zeros([o]));
    });
    return layer;
  };
  const hidden = (i: number) => [linear(i, hiddenDim), ...(hiddenNorm ? [headNorm(hiddenNorm, hiddenDim)] : []), new GELU()];
  return new Sequential(...hidden(inFeatures), ...hidden(hiddenDim), linear(hiddenDim, outDim));
}

/**
 * DINO's head (solo-learn's `DINOHead`: 3 layers, normalised last layer): `[B, F] -> [B, K]`,
 * Linear-GELU-Linear-GELU-Linear to the bottleneck (weights from a normal of std 0.02
 * truncated to ±2, biases 0; with `hiddenNorm`, Linear-Norm-GELU), L2-normalised, then a
 * {@link WeightNormLinear} `lastLayer` (norms frozen at 1).
 */
export class DinoHead extends Layer {
  readonly mlp: Sequential;
  readonly lastLayer: WeightNormLinear;

  constructor(inFeatures: number, { rng, hiddenDim, bottleneckDim, outputDim, hiddenNorm }: DinoHeadOptions) {
    super();
    this.mlp = this.addModule('mlp', dinoMlp(inFeatures, hiddenDim, bottleneckDim, hiddenNorm, rng));
    this.lastLayer = this.addModule('lastLayer', new WeightNormLinear(bottleneckDim, outputDim, rng));
  }

  /** `[B, F] -> [B, K]`. */
  forward(x: Tensor): Tensor {
    return tf.tidy(() => this.lastLayer.forward(l2NormalizeRows(this.mlp.forward(x))));
  }
}
