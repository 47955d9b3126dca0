import { invalidValue } from '../core/errors.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import { asVisionTransformer, VisionTransformer } from '../backbones/vit.js';
import type { CropPolicy } from '../data/augment/crops.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { maeLoss } from '../losses/mae.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type OptimDefaults, type SampleKeys, type SslLossOutput, type StepOutput } from './base.js';
import { MaeDecoder } from './mae-decoder.js';
import { randomMasks } from './mae-masking.js';

/**
 * MAE (He et al. 2022), as solo-learn's: each global crop's patches are masked at random
 * (`maskRatio` of them, keyed per sample by (seed, epoch, index, view), see
 * {@link randomMasks}); the ViT encodes the `[CLS]` token and the kept patches only
 * ({@link VisionTransformer.encodeKept}); the light {@link MaeDecoder} predicts every patch's
 * pixels; the loss ({@link maeLoss}) is the (per-patch normalised) pixel error on the masked
 * patches of the global batch, averaged over the global crops. One global crop by default
 * (solo-learn's `reconstruction` recipe: crop and flip only). The online classifier reads the
 * encoder's `[CLS]` output of the masked image, as solo-learn's training step does.
 * ViT backbones only.
 */
export class MAE extends BaseMethod {
  static override readonly args = defineArgs({
    maskRatio: { kind: 'float', default: 0.75, ge: 0, lt: 1, description: "fraction of each image's patches hidden from the encoder" },
    decoderEmbedDim: { kind: 'int', default: 512, ge: 4, description: 'width of the decoder tokens (a multiple of 4 and of decoderNumHeads)' },
    decoderDepth: { kind: 'int', default: 8, ge: 1, description: 'transformer blocks of the decoder' },
    decoderNumHeads: { kind: 'int', default: 16, ge: 1, description: 'attention heads of the decoder blocks' },
    normPixLoss: {
      kind: 'bool',
      default: true,
      description: "true: targets are each patch's pixels normalised by its own mean and std (norm_pix_loss); false: raw pixels",
    },
  });
  declare readonly args: ArgValues<typeof MAE.args>;
  static override readonly paper: string = 'He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 2e-4, classifierLr: 2e-4, weightDecay: 0.05 };
  static override readonly viewRecipe: ViewRecipe = 'reconstruction';
  static override readonly crops: CropPolicy = Object.freeze({ globalCrops: 1, multiCrop: false });
  static override readonly defaultBackbone: string = 'vit_tiny';

  readonly encoder: VisionTransformer;
  readonly decoder: MaeDecoder;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.encoder = asVisionTransformer(this.backbone, 'mae');
    const { decoderEmbedDim, decoderDepth, decoderNumHeads } = this.args;
    if (decoderEmbedDim % 4 !== 0 || decoderEmbedDim % decoderNumHeads !== 0) {
      throw invalidValue('method_args.decoder_embed_dim', decoderEmbedDim, `a multiple of 4 and of decoder_num_heads (${decoderNumHeads})`);
    }
    const { patchSize } = this.encoder.config;
    const channels = this.encoder.inChannels;
    this.decoder = this.addModule(
      'decoder',
      new MaeDecoder({
        inDim: this.encoder.featureDim,
        embedDim: decoderEmbedDim,
        depth: decoderDepth,
        numHeads: decoderNumHeads,
        gridSize: this.encoder.gridSize,
        patchValues: patchSize * patchSize * channels,
        rng: ctx.rng,
      }),
    );
  }

  /** MAE's step owns the encoder pass (masked), so the gradient cache's split form does not apply. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The reconstruction loss averaged over the global crops (`[B, S, S, C]` each, masks keyed
   * by `samples`), plus the online classifier's cross-entropy on the detached `[CLS]` outputs.
   */
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    if (!samples) throw new Error("MAE.trainingStep needs the batch's sample keys (seed, epoch, indices) to draw its masks");
    const { patchSize } = this.encoder.config;
    const normPixLoss = this.args.normPixLoss;
    const clsFeatures: Tensor[] = [];
    let reconstruction = tf.scalar(0) as Scalar;
    views.forEach((view, v) => {
      const [b, h, w] = view.shape;
      const numPatches = Math.floor(h! / patchSize) * Math.floor(w! / patchSize);
      if (numPatches !== this.decoder.numPatches) {
        throw invalidValue('crops', `${h}x${w}`, `crops of the backbone's image size (${this.encoder.gridSize * patchSize} px) for method mae`);
      }
      const masks = randomMasks(samples, numPatches, this.args.maskRatio, v);
      const encoded = this.encoder.encodeKept(view, masks.keep, masks.keptPerSample); // [B, 1 + K, F]
      clsFeatures.push(tf.reshape(tf.slice(encoded, [0, 0, 0], [b!, 1, this.encoder.featureDim]), [b!, this.encoder.featureDim]));
      const predictions = this.decoder.decode(encoded, masks.restore) as tf.Tensor3D;
      const mask = tf.tensor2d(masks.mask, [b!, numPatches]) as tf.Tensor2D;
      const loss = this.inGroup(() => maeLoss(view as tf.Tensor4D, predictions, mask, { patchSize, normPixLoss }));
      reconstruction = tf.add(reconstruction, loss) as Scalar;
    });
    reconstruction = tf.div(reconstruction, views.length) as Scalar;
    const classifier = this.classifierTerms(clsFeatures, labels);
    const total = tf.add(reconstruction, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = { loss: reconstruction, ...classifier };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /** Not used: {@link trainingStep} is MAE's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('MAE has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }

  /** Not used: {@link trainingStep} is MAE's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('MAE has no split embed/loss form; its trainingStep masks and encodes the views itself');
  }
}
