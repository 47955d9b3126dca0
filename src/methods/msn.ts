import type { Sequential } from '../core/layers.js';
import { detach } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Tensor2D, type Variable } from '../core/tf.js';
import { asVisionTransformer, VisionTransformer } from '../backbones/vit.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { msnLoss, MSN_DEFAULTS } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { embeddingStd, type MethodContext, type OptimDefaults, type SampleKeys, type SslLossOutput, type StepOutput } from './base.js';
import { dinoMlp } from './heads.js';
import { randomMasks } from './mae-masking.js';
import { MomentumMethod } from './momentum.js';

/**
 * MSN (Assran et al. 2022, "Masked Siamese Networks for Label-Efficient Learning"). View 0 is
 * the target: the EMA target encoder (ViT and head, {@link MomentumMethod}) sees it whole.
 * Every other view is an anchor: the student ViT sees the `[CLS]` token and a random
 * `1 − maskRatio` of its patches ({@link VisionTransformer.encodeKept}; the masks are keyed per
 * sample by (seed, epoch, index, view), {@link randomMasks}, so they do not depend on the
 * batch or the world size), then the head. The loss ({@link msnLoss}) makes the anchors'
 * soft assignments to K learnable prototypes predict the target's sharpened (and
 * Sinkhorn-balanced) ones, plus ME-MAX: the entropy of the mean anchor assignment over the
 * *global* batch (the per-view sums all-reduced with their gradient), so W ranks equal one
 * process. The targets use the student's prototypes, detached (the reference's targets are
 * computed under `torch.no_grad`).
 *
 * State: the EMA target only (the prototypes are trained parameters), moved once per optimizer
 * step after it; under `--accumulate-grad-batches k` the ME-MAX mean and the Sinkhorn-Knopp
 * balancing are those of each micro-batch (they couple the rows of one micro-batch, like
 * SwAV's Sinkhorn-Knopp). The online classifier reads the student's `[CLS]` output of the
 * masked global anchor(s), as MAE's does.
 *
 * Defaults: the loss and head are the reference implementation's
 * (`facebookresearch/msn`, `configs/pretrain/msn_vits16.yaml` and `src/msn_train.py`: τ 0.1,
 * sharpening T 0.25, Sinkhorn on the targets (3 iterations, `use_sinkhorn`), ME-MAX weight 1,
 * 1024 prototypes initialised U(±1/√256), head Linear-BN-GELU-Linear-BN-GELU-Linear
 * 2048-2048-256 with trunc-normal std 0.02 weights, patch drop 0.15, EMA from 0.996 to 1;
 * views: 1 target + 1 anchor at full size, scale 0.3-1, and focal anchors, scale 0.05-0.3).
 * MSN publishes ImageNet recipes only, so the optimisation is lightly's CIFAR-10 benchmark of
 * MSN (`benchmarks/imagenet/cifar10_benchmark.py`, `MSNModel`: AdamW lr 1.5e-4 per 256,
 * weight decay 0.05, mask ratio 0.15, EMA 0.996); the views are the `byol` recipe's. Focal
 * anchors are local crops (`--crops`, e.g. `2x32:0.3-1,10x14:0.05-0.3`: the reference's 10).
 * ViT backbones only.
 */
export class MSN extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    baseTau: { ...MomentumMethod.args.baseTau, default: 0.996 },
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the head (and of its EMA target)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width D of the head (the prototypes are D wide)' },
    numPrototypes: { kind: 'int', default: 1024, ge: 1, description: 'number K of learnable prototypes' },
    temperature: { kind: 'float', default: MSN_DEFAULTS.temperature, gt: 0, description: 'softmax temperature of the similarities to the prototypes' },
    sharpenTemperature: {
      kind: 'float',
      default: MSN_DEFAULTS.sharpenTemperature,
      gt: 0,
      le: 1,
      description: 'sharpening temperature T of the targets (p^(1/T), renormalised)',
    },
    sinkhornIterations: {
      kind: 'int',
      default: MSN_DEFAULTS.sinkhornIterations,
      ge: 0,
      description: 'Sinkhorn-Knopp iterations on the targets over the global batch (0: none)',
    },
    meMaxWeight: { kind: 'float', default: MSN_DEFAULTS.meMaxWeight, ge: 0, description: 'weight of ME-MAX (the entropy of the mean anchor probability)' },
    maskRatio: { kind: 'float', default: 0.15, ge: 0, lt: 1, description: "fraction of each anchor's patches dropped (the reference's patch_drop)" },
    useBnInHead: { kind: 'bool', default: true, description: "true: batch norm (--norm's kind) after each hidden layer of the head; false: none" },
  });
  declare readonly args: ArgValues<typeof MSN.args>;
  static override readonly paper = 'Assran et al. 2022, "Masked Siamese Networks for Label-Efficient Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'adamw', lr: 1.5e-4, classifierLr: 1.5e-4, weightDecay: 0.05 };
  static override readonly viewRecipe = 'byol' as const;
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, localScale: [0.05, 0.3] };
  static override readonly defaultBackbone: string = 'vit_tiny';

  readonly encoder: VisionTransformer;
  /** The student's head, `[B, F] -> [B, projOutputDim]`. */
  readonly head: Sequential;
  /** The target's head (EMA copy of {@link head}). */
  readonly momentumHead: Sequential;
  /** `[numPrototypes, projOutputDim]`, learnable (L2-normalised inside the loss). */
  readonly prototypes: Variable;

  constructor(ctx: MethodContext) {
    super(ctx);
    this.encoder = asVisionTransformer(this.backbone, 'msn');
    const { projHiddenDim, projOutputDim, numPrototypes, useBnInHead } = this.args;
    const build = () => dinoMlp(this.backbone.featureDim, projHiddenDim, projOutputDim, useBnInHead ? this.norm : undefined, ctx.rng);
    this.head = this.addModule('head', build());
    this.momentumHead = this.addMomentumProjector(this.head, build());
    const bound = Math.sqrt(1 / projOutputDim);
    this.prototypes = this.addParameter(
      'prototypes',
      tf.tensor2d(ctx.rng.uniformArray(numPrototypes * projOutputDim, -bound, bound), [numPrototypes, projOutputDim]),
    );
  }

  /** MSN's step owns the encoder passes (masked anchors), so the gradient cache's split form does not apply. */
  override get splitsLoss(): boolean {
    return false;
  }

  /**
   * The MSN loss of the views (`[B, S_v, S_v, C]` each; view 0 the target, the others anchors,
   * masked by keys from `samples`), plus the online classifier's cross-entropy on the detached
   * `[CLS]` outputs of the global anchors.
   */
  override trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    if (!samples) throw new Error("MSN.trainingStep needs the batch's sample keys (seed, epoch, indices) to draw its masks");
    if (views.length < 2) throw new Error(`MSN.trainingStep needs a target view and at least one anchor view, got ${views.length} view(s)`);
    const target = detach(this.momentumHead.forward(this.momentumBackbone.forward(views[0]!))) as Tensor2D;
    const cls = this.maskedCls(views, samples);
    const anchors = this.headOfAll(cls);
    const { loss, crossEntropy, meMax } = this.inGroup(() => {
      const { temperature, sharpenTemperature, sinkhornIterations, meMaxWeight } = this.args;
      return msnLoss(anchors, target, this.prototypes as Tensor2D, { temperature, sharpenTemperature, sinkhornIterations, meMaxWeight });
    });
    const classifier = this.classifierTerms(cls.slice(0, this.cropPolicy.globalCrops - 1), labels);
    const total = tf.add(loss, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = { loss, ...classifier, cross_entropy: crossEntropy, me_max: meMax, embedding_std: embeddingStd(anchors[0]!) };
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /**
   * The student ViT's `[CLS]` outputs `[B, F]` of every anchor view (views 1.., in order),
   * each with its own keyed patch mask; views of one size go through the encoder together.
   */
  private maskedCls(views: Tensor[], samples: SampleKeys): Tensor[] {
    const { patchSize } = this.encoder.config;
    const bySize = new Map<string, number[]>();
    for (let v = 1; v < views.length; v++) {
      const key = `${views[v]!.shape[1]}x${views[v]!.shape[2]}`;
      bySize.set(key, [...(bySize.get(key) ?? []), v]);
    }
    const out = new Array<Tensor>(views.length - 1);
    for (const members of bySize.values()) {
      const [b, h, w] = views[members[0]!]!.shape;
      const numPatches = Math.floor(h! / patchSize) * Math.floor(w! / patchSize);
      const masks = members.map((v) => randomMasks(samples, numPatches, this.args.maskRatio, v));
      const keep = new Int32Array(masks.reduce((n, m) => n + m.keep.length, 0));
      masks.reduce((at, m) => (keep.set(m.keep, at), at + m.keep.length), 0);
      const images =
        members.length === 1
          ? views[members[0]!]!
          : tf.concat(
              members.map((v) => views[v]!),
              0,
            );
      const encoded = this.encoder.encodeKept(images, keep, masks[0]!.keptPerSample); // [b·|members|, 1 + k, F]
      const dim = this.encoder.featureDim;
      const clsOut = tf.reshape(tf.slice(encoded, [0, 0, 0], [b! * members.length, 1, dim]), [b! * members.length, dim]);
      const parts = members.length === 1 ? [clsOut] : tf.split(clsOut, members.length, 0);
      members.forEach((v, i) => (out[v - 1] = parts[i]!));
    }
    return out;
  }

  /** The head on every anchor's features at once (batch norm over all anchors, as the reference's `fc` on the concatenated views), split back per view. */
  private headOfAll(features: Tensor[]): Tensor2D[] {
    if (features.length === 1) return [this.head.forward(features[0]!) as Tensor2D];
    return tf.split(this.head.forward(tf.concat(features, 0)), features.length, 0) as Tensor2D[];
  }

  /** Not used: {@link trainingStep} is MSN's whole step (see {@link splitsLoss}). */
  override embed(): Tensor[] {
    throw new Error('MSN has no split embed/loss form; its trainingStep masks and encodes the anchor views itself');
  }

  /** Not used: {@link trainingStep} is MSN's whole step (see {@link splitsLoss}). */
  override embeddingLoss(): SslLossOutput {
    throw new Error('MSN has no split embed/loss form; its trainingStep masks and encodes the anchor views itself');
  }
}
