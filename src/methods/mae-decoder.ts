/**
 * MAE's light decoder (solo-learn's `MAEDecoder`): `decoder_embed` (Linear F -> Dd), the
 * learned `mask_token` in every masked slot, the FIXED 2-D sin-cos `decoder_pos_embed`
 * (a buffer, as solo-learn's `requires_grad=False`), `decoder_blocks` (pre-norm transformer
 * blocks), `decoder_norm` and `decoder_pred` (Linear Dd -> P·P·C).
 */
import { childLayer, LayerNorm, Linear, Sequential } from '../core/layers.js';
import { Module } from '../core/module.js';
import type { Rng } from '../core/random.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import { TransformerBlock } from '../core/transformer.js';

export interface MaeDecoderOptions {
  /** Width F of the encoder's tokens. */
  inDim: number;
  /** Decoder width Dd. */
  embedDim: number;
  depth: number;
  numHeads: number;
  /** Side G of the (square) patch grid: L = G² patches. */
  gridSize: number;
  /** Values per patch, P·P·C. */
  patchValues: number;
  rng: Rng;
}

/**
 * MAE's fixed position embeddings (`get_2d_sincos_pos_embed(D, G, cls_token=True)`):
 * `[1 + G², D]`, row 0 (the `[CLS]`) zeros; patch (i, j) (row-major) has the 1-D sin-cos
 * embedding of its column j in the first D/2 values and of its row i in the last D/2, each
 * `[sin(p·ω), cos(p·ω)]` with ω_t = 10000^(−t / (D/4)), t < D/4.
 */
export function sinCosPositionEmbedding(dim: number, gridSize: number): Float32Array {
  if (dim % 4 !== 0) throw new Error(`sin-cos position embedding: dim ${dim} must be a multiple of 4`);
  const quarter = dim / 4;
  const out = new Float32Array((1 + gridSize * gridSize) * dim);
  for (let i = 0; i < gridSize; i++) {
    for (let j = 0; j < gridSize; j++) {
      const row = (1 + i * gridSize + j) * dim;
      for (const [half, pos] of [
        [0, j],
        [1, i],
      ] as const) {
        for (let t = 0; t < quarter; t++) {
          const angle = pos / 10000 ** (t / quarter);
          out[row + half * 2 * quarter + t] = Math.sin(angle);
          out[row + half * 2 * quarter + quarter + t] = Math.cos(angle);
        }
      }
    }
  }
  return out;
}

/** A Linear with xavier-uniform weights and zero bias (solo-learn's decoder initialisation). */
function xavierLinear(inFeatures: number, outFeatures: number, rng: Rng): Linear {
  const layer = new Linear(inFeatures, outFeatures, { rng });
  const limit = Math.sqrt(6 / (inFeatures + outFeatures));
  layer.weight.assign(tf.tensor2d(rng.uniformArray(inFeatures * outFeatures, -limit, limit), [inFeatures, outFeatures]));
  layer.bias?.assign(tf.zeros([outFeatures]));
  return layer;
}

export class MaeDecoder extends Module {
  readonly maskToken: Variable;
  readonly posEmbed: Variable;
  readonly numPatches: number;

  constructor(readonly options: MaeDecoderOptions) {
    super();
    const { inDim, embedDim: dim, depth, numHeads, gridSize, patchValues, rng } = options;
    this.numPatches = gridSize * gridSize;
    this.addModule('decoder_embed', xavierLinear(inDim, dim, rng));
    this.maskToken = this.addParameter('mask_token', tf.tensor(rng.normalArray(dim, 0, 0.02), [1, 1, dim]));
    this.posEmbed = this.addBuffer('decoder_pos_embed', tf.tensor(sinCosPositionEmbedding(dim, gridSize), [1, 1 + this.numPatches, dim]));
    this.addModule('decoder_blocks', new Sequential(...Array.from({ length: depth }, () => new TransformerBlock({ dim, numHeads, mlpRatio: 4, rng }))));
    this.addModule('decoder_norm', new LayerNorm(dim, { eps: 1e-5 }));
    this.addModule('decoder_pred', xavierLinear(dim, patchValues, rng));
  }

  /**
   * `encoded` `[B, 1 + K, F]` (the encoder's `[CLS]` and kept tokens) and `restore` `[B·L]`
   * (see `PatchMasks.restore`) -> `[B, L, P·P·C]` the predicted pixels of every patch, in
   * row-major patch order.
   */
  decode(encoded: Tensor, restore: Int32Array): Tensor {
    const [b, n] = encoded.shape;
    const L = this.numPatches;
    const k = n - 1;
    const dim = this.options.embedDim;
    return tf.tidy(() => {
      const x = childLayer(this, 'decoder_embed').forward(tf.reshape(encoded, [b * n, this.options.inDim]));
      const tokens = tf.reshape(x, [b, n, dim]);
      const seen = tf.slice(tokens, [0, 1, 0], [b, k, dim]);
      const slots = tf.concat([seen, tf.broadcastTo(this.maskToken, [b, L - k, dim])], 1); // [B, L, Dd] kept then masked
      const flat = restore.map((j, m) => Math.floor(m / L) * L + j);
      const unshuffled = tf.reshape(tf.gather(tf.reshape(slots, [b * L, dim]), tf.tensor1d(flat, 'int32')), [b, L, dim]);
      const sequence = tf.add(tf.concat([tf.slice(tokens, [0, 0, 0], [b, 1, dim]), unshuffled], 1), this.posEmbed);
      const decoded = childLayer(this, 'decoder_norm').forward(childLayer(this, 'decoder_blocks').forward(sequence));
      const patches = tf.reshape(tf.slice(decoded, [0, 1, 0], [b, L, dim]), [b * L, dim]);
      return tf.reshape(childLayer(this, 'decoder_pred').forward(patches), [b, L, this.options.patchValues]);
    });
  }
}
