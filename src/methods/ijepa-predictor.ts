/**
 * I-JEPA's narrow predictor (facebookresearch/ijepa `src/models/vision_transformer.py`,
 * `VisionTransformerPredictor`): `predictor_embed` (Linear F -> E), the FIXED 2-D sin-cos
 * `predictor_pos_embed` (a buffer, as the reference's `requires_grad=False`), the learned
 * `mask_token`, `predictor_blocks` (pre-norm transformer blocks, LayerNorm eps 1e-6),
 * `predictor_norm` and `predictor_proj` (Linear E -> F). Initialisation as the reference's
 * `init_model`: linear weights trunc-normal std 0.02 with zero biases, the mask token
 * trunc-normal std 0.02, LayerNorms ones and zeros.
 */
import { truncNormal } from '../core/init.js';
import { childLayer, LayerNorm, Sequential } from '../core/layers.js';
import { Module } from '../core/module.js';
import type { Rng } from '../core/random.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import { TransformerBlock, VIT_LAYER_NORM_EPS, vitLinear } from '../core/transformer.js';
import { sinCosPositionEmbedding } from './mae-decoder.js';

export interface IjepaPredictorOptions {
  /** Width F of the encoder's tokens (the predictions' width too). */
  inDim: number;
  /** Predictor width E (`pred_emb_dim`). */
  embedDim: number;
  /** Transformer blocks (`pred_depth`). */
  depth: number;
  /** Attention heads per block (the reference: the encoder's). */
  numHeads: number;
  /** Side G of the (square) patch grid: L = G² patches. */
  gridSize: number;
  rng: Rng;
}

export class IjepaPredictor extends Module {
  readonly maskToken: Variable;
  readonly posEmbed: Variable;
  readonly numPatches: number;

  constructor(readonly options: IjepaPredictorOptions) {
    super();
    const { inDim, embedDim: dim, depth, numHeads, gridSize, rng } = options;
    this.numPatches = gridSize * gridSize;
    this.addModule('predictor_embed', vitLinear(inDim, dim, rng));
    this.maskToken = this.addParameter('mask_token', truncNormal([1, 1, dim], 0.02, rng));
    const withCls = sinCosPositionEmbedding(dim, gridSize); // row 0 is the [CLS] row: the reference has none
    this.posEmbed = this.addBuffer('predictor_pos_embed', tf.tensor(withCls.subarray(dim), [this.numPatches, dim]));
    this.addModule('predictor_blocks', new Sequential(...Array.from({ length: depth }, () => new TransformerBlock({ dim, numHeads, mlpRatio: 4, rng }))));
    this.addModule('predictor_norm', new LayerNorm(dim, { eps: VIT_LAYER_NORM_EPS }));
    this.addModule('predictor_proj', vitLinear(dim, inDim, rng));
  }

  /**
   * The predicted embeddings of one target block per row:
   * - `context` `[R, K, F]`: the context encoder's patch tokens (row r: those of the sample
   *   whose block it predicts), at the patches `contextIndices` `[R·K]` (row-major per row);
   * - `targetIndices` `[R·T]`: the T patches of each row's target block.
   *
   * Returns `[R, T, F]`: the projected outputs of the T mask tokens (each the mask token plus
   * its patch's position embedding), after the blocks saw them with the row's context tokens
   * (each projected to E plus its position embedding).
   */
  predict(context: Tensor, contextIndices: Int32Array, targetIndices: Int32Array): Tensor {
    const [r, k, f] = context.shape as [number, number, number];
    const t = targetIndices.length / r;
    const dim = this.options.embedDim;
    if (contextIndices.length !== r * k || !Number.isInteger(t) || t < 1) {
      throw new Error(`IjepaPredictor.predict: ${r}x${k} context indices and a whole number of target indices per row expected`);
    }
    return tf.tidy(() => {
      const embedded = tf.reshape(childLayer(this, 'predictor_embed').forward(tf.reshape(context, [r * k, f])), [r, k, dim]);
      const contextPos = tf.reshape(tf.gather(this.posEmbed, tf.tensor1d(contextIndices, 'int32')), [r, k, dim]);
      const targetPos = tf.reshape(tf.gather(this.posEmbed, tf.tensor1d(targetIndices, 'int32')), [r, t, dim]);
      const tokens = tf.concat([tf.add(embedded, contextPos), tf.add(tf.broadcastTo(this.maskToken, [r, t, dim]), targetPos)], 1);
      const out = childLayer(this, 'predictor_norm').forward(childLayer(this, 'predictor_blocks').forward(tokens));
      const predicted = tf.reshape(tf.slice(out, [0, k, 0], [r, t, dim]), [r * t, dim]);
      return tf.reshape(childLayer(this, 'predictor_proj').forward(predicted), [r, t, f]);
    });
  }
}
