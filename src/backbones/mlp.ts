import { invalidValue } from '../core/errors.js';
import { childLayer, Linear, normLayer } from '../core/layers.js';
import { tf, type Tensor } from '../core/tf.js';
import { Backbone, type BackboneOptions } from './base.js';

/** Hidden widths of the `mlp` backbone when `mlpHidden` is not given. */
export const DEFAULT_MLP_HIDDEN: readonly number[] = [256, 256];

/**
 * A multilayer perceptron on flattened images: `[B, H, W, C] -> [B, hidden[last]]`.
 * For each hidden width h_i (i = 1, 2, ...): `fc{i}` (Linear with bias), `bn{i}`
 * (BatchNorm1d; with `norm`, group norm or LayerNorm under the same name), ReLU. The input
 * is flattened in NHWC order, `H·W·C = imageSize² · inChannels` features.
 */
export class MlpBackbone extends Backbone {
  readonly featureDim: number;
  readonly hidden: readonly number[];
  /** The image side: the first layer takes `imageSize² · inChannels` features, so no other size. */
  override readonly inputSize: number;

  constructor(options: BackboneOptions) {
    super();
    const hidden = options.mlpHidden ?? DEFAULT_MLP_HIDDEN;
    if (hidden.length === 0 || !hidden.every((h) => Number.isInteger(h) && h > 0)) {
      throw invalidValue('mlpHidden', hidden, 'a non-empty list of positive integers');
    }
    this.hidden = [...hidden];
    this.inputSize = options.imageSize;
    let inFeatures = options.imageSize * options.imageSize * options.inChannels;
    hidden.forEach((width, i) => {
      this.addModule(`fc${i + 1}`, new Linear(inFeatures, width, { rng: options.rng }));
      this.addModule(`bn${i + 1}`, normLayer(options.norm ?? 'batch', width, false));
      inFeatures = width;
    });
    this.featureDim = inFeatures;
  }

  /** `[B, H, W, C] -> [B, featureDim]`, H = W = {@link inputSize}. */
  forward(x: Tensor): Tensor {
    if (x.shape[1] !== this.inputSize || x.shape[2] !== this.inputSize) {
      throw new Error(
        `mlp backbone: input [${x.shape.join(', ')}] is not allowed; it takes ${this.inputSize} x ${this.inputSize} images only (it flattens them)`,
      );
    }
    return tf.tidy(() =>
      this.hidden.reduce(
        (h, _, i) => {
          const z = childLayer(this, `fc${i + 1}`).forward(h);
          return tf.relu(childLayer(this, `bn${i + 1}`).forward(z));
        },
        tf.reshape(x, [x.shape[0], -1]),
      ),
    );
  }
}

/** Factory for the registry. */
export function mlp(options: BackboneOptions): MlpBackbone {
  return new MlpBackbone(options);
}
