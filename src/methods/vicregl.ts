import { invalidValue } from '../core/errors.js';
import type { Sequential } from '../core/layers.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { hasFeatureMaps, type Backbone, type SpatialBackbone } from '../backbones/base.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { vicreglLoss, VICREGL_DEFAULTS, type VicreglResult } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, embeddingStd, type MethodContext, type OptimDefaults, type SslLossOutput, type StepOutput } from './base.js';
import { forwardCrops } from './forward-crops.js';
import { mlpHead } from './heads.js';

/**
 * VICRegL (Bardes, Ponce, LeCun 2022): VICReg on the pooled features plus VICReg on the
 * backbone's feature maps. Every view's map `[B, h, w, F]` (the ResNet's last stage before its
 * global pooling, {@link SpatialBackbone.featureMap}) is pooled into the features (the
 * expander, Linear-BN-ReLU twice then Linear, embeds them) and, location by location, embedded
 * by the maps projector (the same shape, with its own widths); the loss ({@link vicreglLoss})
 * is `α · VICReg(embeddings) + (1 − α) · VICReg(locations matched by feature nearest
 * neighbours)`, every variance and covariance over the *global* batch (W ranks equal one
 * process). ResNet backbones only (`tiny_resnet`, `resnet18`, `resnet50`).
 *
 * Not here: the reference's location-based matching (the crop geometry of each view does not
 * reach the method) and its 0.1 learning-rate ratio of the maps projector. State: none besides
 * the weights.
 *
 * Defaults: the loss is the reference implementation's (`VICRegL/main_vicregl.py`: α 0.75 (its
 * default, and its ResNet-50 recipe in the README), weights 25 / 25 / 1, `num_matches` 20 and
 * 4, maps projector 512-512-512); the optimisation is its ResNet-50 recipe (README: LARS base
 * lr 0.3 per 256, weight decay 1e-6, 2 crops of scale 0.08-1); the expander is ssl-zoo's VICReg
 * CIFAR one (2048-2048-2048; the reference's 8192-8192-8192 is for ImageNet) and the views are
 * VICReg's (`vicreg`); local crops with `--crops`.
 */
export class VICRegL extends BaseMethod {
  static override readonly args = defineArgs({
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'width of the two hidden layers of the expander' },
    projOutputDim: { kind: 'int', default: 2048, ge: 1, description: 'output width of the expander (the pooled embeddings)' },
    mapsHiddenDim: { kind: 'int', default: 512, ge: 1, description: 'width of the two hidden layers of the maps projector' },
    mapsOutputDim: { kind: 'int', default: 512, ge: 1, description: 'output width of the maps projector (the local embeddings)' },
    alpha: { kind: 'float', default: VICREGL_DEFAULTS.alpha, ge: 0, le: 1, description: 'weight of the global loss (the local one gets 1 - alpha)' },
    simLossWeight: { kind: 'float', default: VICREGL_DEFAULTS.invWeight, ge: 0, description: 'weight of the invariance (MSE) terms' },
    varLossWeight: { kind: 'float', default: VICREGL_DEFAULTS.varWeight, ge: 0, description: 'weight of the variance terms' },
    covLossWeight: { kind: 'float', default: VICREGL_DEFAULTS.covWeight, ge: 0, description: 'weight of the covariance terms' },
    matchesThere: {
      kind: 'int',
      default: VICREGL_DEFAULTS.numMatches[0],
      ge: 1,
      description: 'locations of view i kept by the matching to view j (the closest)',
    },
    matchesBack: { kind: 'int', default: VICREGL_DEFAULTS.numMatches[1], ge: 1, description: 'locations of view j kept by the matching back to view i' },
  });
  declare readonly args: ArgValues<typeof VICRegL.args>;
  static override readonly paper = 'Bardes, Ponce, LeCun 2022, "VICRegL: Self-Supervised Learning of Local Visual Features"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-6 };
  static override readonly viewRecipe = 'vicreg' as const;
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true };

  readonly spatialBackbone: Backbone & SpatialBackbone;
  /** `[B, F] -> [B, projOutputDim]`. */
  readonly projector: Sequential;
  /** `[R, F] -> [R, mapsOutputDim]`, applied to every location of every map. */
  readonly mapsProjector: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    if (!hasFeatureMaps(this.backbone)) {
      throw invalidValue('backbone', this.backbone.constructor.name, 'a ResNet (tiny_resnet, resnet18 or resnet50) for method vicregl: it needs feature maps');
    }
    this.spatialBackbone = this.backbone;
    const { projHiddenDim, projOutputDim, mapsHiddenDim, mapsOutputDim } = this.args;
    const f = this.backbone.featureDim;
    this.projector = this.addModule('projector', mlpHead([f, projHiddenDim, projHiddenDim, projOutputDim], { norm: this.norm, rng: ctx.rng }));
    this.mapsProjector = this.addModule('mapsProjector', mlpHead([f, mapsHiddenDim, mapsHiddenDim, mapsOutputDim], { norm: this.norm, rng: ctx.rng }));
  }

  /** VICRegL's step needs the feature maps, which the split embed/loss form does not carry. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The VICRegL loss of the views (`[B, S_v, S_v, C]` each, the 2 global crops first; one
   * backbone pass per crop size), plus the online classifier's cross-entropy on the pooled
   * features of the global crops.
   */
  override trainingStep(views: Tensor[], labels: Tensor): StepOutput {
    const maps = forwardCrops(views, (x) => this.spatialBackbone.featureMap(x)); // [B, h, w, F] each
    const features = maps.map((m) => tf.mean(m, [1, 2])); // the backbone's global average pooling
    const embeddings = features.map((f) => this.projector.forward(f) as Tensor2D);
    const local = maps.map((m) => {
      const [b, h, w, f] = m.shape;
      return tf.reshape(this.mapsProjector.forward(tf.reshape(m, [b! * h! * w!, f!])), [b!, h! * w!, this.args.mapsOutputDim]) as tf.Tensor3D;
    });
    const out = this.inGroup(() => this.objective(embeddings, local));
    const classifier = this.classifierTerms(features, labels);
    const total = tf.add(out.loss, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = {
      loss: out.loss,
      ...classifier,
      global_loss: out.global,
      local_loss: out.local,
      embedding_std: embeddingStd(embeddings[0]!),
    };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /** {@link vicreglLoss} of the embeddings `[B, D]` and the location embeddings `[B, L_v, D_m]` of every view, with the method's arguments. */
  protected objective(embeddings: Tensor2D[], maps: tf.Tensor3D[]): VicreglResult {
    const { alpha, simLossWeight, varLossWeight, covLossWeight, matchesThere, matchesBack } = this.args;
    const options = { alpha, invWeight: simLossWeight, varWeight: varLossWeight, covWeight: covLossWeight, numMatches: [matchesThere, matchesBack] as const };
    return vicreglLoss(embeddings, maps, options);
  }

  /** Not used: {@link trainingStep} is VICRegL's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('VICRegL has no split embed/loss form; its trainingStep runs the backbone to its feature maps itself');
  }

  /** Not used: {@link trainingStep} is VICRegL's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('VICRegL has no split embed/loss form; its trainingStep runs the backbone to its feature maps itself');
  }
}
