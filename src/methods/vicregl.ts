import { invalidValue } from '../core/errors.js';
import type { Sequential } from '../core/layers.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { hasFeatureMaps, type Backbone, type SpatialBackbone } from '../backbones/base.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { vicreglLoss, VICREGL_DEFAULTS, type VicreglResult } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, embeddingStd, type MethodContext, type OptimDefaults, type SampleKeys, type SslLossOutput, type StepOutput } from './base.js';
import { forwardCrops } from './forward-crops.js';
import { mlpHead } from './heads.js';

/**
 * VICRegL (Bardes, Ponce, LeCun 2022): VICReg on the pooled features plus VICReg on the
 * backbone's feature maps. Every view's map `[B, h, w, F]` (the ResNet's last stage before its
 * global pooling, {@link SpatialBackbone.featureMap}) is pooled into the features (the
 * expander, Linear-BN-ReLU twice then Linear, embeds them) and, location by location, embedded
 * by the maps projector (the same shape, with its own widths); the loss ({@link vicreglLoss})
 * is `α · VICReg(embeddings) + (1 − α) · VICReg(locations matched by feature nearest
 * neighbours and by position in the source image)`, every variance and covariance over the
 * *global* batch (W ranks equal one process). The positions come from each view's crop box and
 * flip, which the loader carries in every batch (`MultiViewBatch.crops`; see
 * {@link mapLocations}). ResNet backbones only (`tiny_resnet`, `resnet18`, `resnet50`).
 *
 * Not here: the reference's 0.1 learning-rate ratio of the maps projector. State: none
 * besides the weights.
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
    // Not the reference's default (1): every location matched by features carries its own [C, C] covariance, and with all
    // of them a 2-rank run of the defaults (resnet18, C = 512, batch 256) took a rank past 12 GB, when the autodiff tape held
    // about 36 copies of the covariances (covarianceStatistics keeps one since; not measured again).
    l2AllMatches: {
      kind: 'bool',
      default: false,
      description: 'true: the feature matching keeps every location (the reference default, about twice the memory); false: matchesThere / matchesBack of them',
    },
    locationMatching: {
      kind: 'bool',
      default: true,
      description: 'true: also match locations by their position in the source image (needs the crop geometry the loader carries); false: by features only',
    },
    flipGrid: {
      kind: 'bool',
      default: true,
      description: "true: a flipped view's locations are mirrored (its true positions); false: as the reference's default (--no-flip-grid 1), not",
    },
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
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    const crops = this.args.locationMatching ? samples?.crops : undefined;
    if (this.args.locationMatching && crops?.length !== views.length) {
      throw new Error(
        'vicregl: the batch carries no crop geometry for its views (MultiViewBatch.crops, which the loader sets); pass --method-arg locationMatching=false to match by features only',
      );
    }
    const maps = forwardCrops(views, (x) => this.spatialBackbone.featureMap(x)); // [B, h, w, F] each
    const locations = crops?.map((c, v) => mapLocations(c, maps[v]!.shape[1]!, maps[v]!.shape[2]!, this.args.flipGrid));
    const features = maps.map((m) => tf.mean(m, [1, 2])); // the backbone's global average pooling
    const embeddings = features.map((f) => this.projector.forward(f) as Tensor2D);
    const local = maps.map((m) => {
      const [b, h, w, f] = m.shape;
      return tf.reshape(this.mapsProjector.forward(tf.reshape(m, [b! * h! * w!, f!])), [b!, h! * w!, this.args.mapsOutputDim]) as tf.Tensor3D;
    });
    const out = this.inGroup(() => this.objective(embeddings, local, locations));
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

  /**
   * {@link vicreglLoss} of the embeddings `[B, D]` and the location embeddings `[B, L_v, D_m]` of
   * every view, with their positions `[B, L_v, 2]` when matched by position, with the method's arguments.
   */
  protected objective(embeddings: Tensor2D[], maps: tf.Tensor3D[], locations?: Float32Array[]): VicreglResult {
    const { alpha, simLossWeight, varLossWeight, covLossWeight, matchesThere, matchesBack, l2AllMatches } = this.args;
    const numMatches = [matchesThere, matchesBack] as const;
    return vicreglLoss(embeddings, maps, {
      alpha,
      invWeight: simLossWeight,
      varWeight: varLossWeight,
      covWeight: covLossWeight,
      numMatches,
      l2AllMatches,
      locations,
    });
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

/**
 * Where the `h × w` locations of a view's feature map lie in the source image: for each sample
 * (`crops` `[B, 5]`: its crop box top, left, height, width in source pixels and 1 if flipped,
 * see `MultiViewBatch.crops`) the centre of each of the `h × w` equal cells the box divides
 * into, row-major `[B, h·w, 2]` (row, column in pixels): cell (r, c) at `top + (r + ½) · height / h`,
 * `left + (c' + ½) · width / w`, with c' = w − 1 − c where the view was flipped and `flip` is
 * true, else c (the reference's `_location_to_NxN_grid`; its default `--no-flip-grid 1` does
 * not mirror).
 */
export function mapLocations(crops: Float32Array, h: number, w: number, flip: boolean): Float32Array {
  const b = crops.length / 5;
  const out = new Float32Array(b * h * w * 2);
  for (let s = 0; s < b; s++) {
    const [top, left, height, width, flipped] = crops.subarray(s * 5, s * 5 + 5);
    for (let r = 0; r < h; r++) {
      for (let c = 0; c < w; c++) {
        const column = flip && flipped ? w - 1 - c : c;
        const at = ((s * h + r) * w + c) * 2;
        out[at] = top! + ((r + 0.5) * height!) / h;
        out[at + 1] = left! + ((column + 0.5) * width!) / w;
      }
    }
  }
  return out;
}
