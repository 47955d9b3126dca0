import type { Sequential } from '../core/layers.js';
import { detach } from '../core/ops.js';
import type { Tensor, Tensor2D } from '../core/tf.js';
import type { CropPolicy } from '../data/augment/crops.js';
import { simdinoLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { MethodContext, OptimDefaults, SslLossOutput } from './base.js';
import { forwardCrops } from './forward-crops.js';
import { dinoMlp } from './heads.js';
import { MomentumMethod } from './momentum.js';

/**
 * SimDINO (Wu et al. 2025): DINO without the prototype layer, its centring and its
 * temperatures. The student (backbone and a 3-layer head, `[B, F] -> [B, projOutputDim]`)
 * sees every crop, the teacher (their EMA copy, {@link MomentumMethod}) the global crops; the
 * loss ({@link simdinoLoss}) pulls each student output towards the teacher's output of every
 * other global crop (cosine of the L2-normalised features) and pushes the coding rate of the
 * student's global crops up, computed over the *global* batch (a Cholesky log-determinant of
 * the Gram matrix all-reduced over ranks), so W ranks equal one process.
 *
 * State: only the teacher, moved once per optimizer step (after it) by the EMA; the method has
 * no centre. Under `--accumulate-grad-batches k` the coding rate is that of each micro-batch
 * (it couples the rows inside one), as with W ranks it is that of each global micro-batch.
 *
 * Defaults: the loss is the reference implementation's `MCRLoss` with its defaults
 * (`simdino/main_dino.py`: ε 0.5, coeff 1, the coding rate of the student's global crops,
 * `expa_type=0`, with the balancing factor (K + N) / (K·N)); the head is DINO's without its
 * last layer (2048-2048-256, GELU, no batch norm, the 256-d bottleneck is the output: the
 * paper's "remove the prototype layer"). SimDINO publishes only ImageNet recipes, so the
 * optimisation, EMA and views are ssl-zoo's DINO recipe for small images (solo-learn's CIFAR
 * `dino.yaml`): LARS lr 0.3, classifier lr 0.1, weight decay 1e-6, tau 0.9995 -> 1, the
 * asymmetric `byol` views, 2 global crops (`--crops` adds local ones).
 */
export class SimDINO extends MomentumMethod {
  static override readonly args = defineArgs({
    ...MomentumMethod.args,
    baseTau: { ...MomentumMethod.args.baseTau, default: 0.9995 },
    projHiddenDim: { kind: 'int', default: 2048, ge: 1, description: 'hidden width of the head (and of its EMA teacher)' },
    projOutputDim: { kind: 'int', default: 256, ge: 1, description: 'output width K of the head (the features the coding rate is taken of)' },
    eps: { kind: 'float', default: 0.5, gt: 0, description: 'epsilon of the coding rate 1/2 logdet(I + K/(N eps) Z^T Z)' },
    alignWeight: { kind: 'float', default: 1, ge: 0, description: "weight of the student-teacher cosine term (the reference's coeff)" },
    useBnInHead: { kind: 'bool', default: false, description: "true: batch norm (--norm's kind) after each hidden layer of the head; false: none" },
  });
  declare readonly args: ArgValues<typeof SimDINO.args>;
  static override readonly paper = 'Wu et al. 2025, "Simplifying DINO via Coding Rate Regularization"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-6 };
  static override readonly viewRecipe = 'byol' as const;
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, localScale: [0.05, 0.4] };

  /** The student's head, `[B, F] -> [B, projOutputDim]`. */
  readonly head: Sequential;
  /** The teacher's head (EMA copy of {@link head}). */
  readonly momentumHead: Sequential;

  constructor(ctx: MethodContext) {
    super(ctx);
    const { projHiddenDim, projOutputDim, useBnInHead } = this.args;
    const build = () => dinoMlp(this.backbone.featureDim, projHiddenDim, projOutputDim, useBnInHead ? this.norm : undefined, ctx.rng);
    this.head = this.addModule('head', build());
    this.momentumHead = this.addMomentumProjector(this.head, build());
  }

  /** The student's outputs of every crop, then the teacher's (detached) of the global crops: `[B, K]` each. */
  override embed(features: Tensor[], views: Tensor[]): Tensor[] {
    const student = features.map((f) => this.head.forward(f));
    const globalViews = views.slice(0, this.cropPolicy.globalCrops);
    const teacher = forwardCrops(globalViews, (x) => detach(this.momentumHead.forward(this.momentumBackbone.forward(x))));
    return [...student, ...teacher];
  }

  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const split = embeddings.length - this.cropPolicy.globalCrops;
    const [student, teacher] = [embeddings.slice(0, split) as Tensor2D[], embeddings.slice(split) as Tensor2D[]];
    const { loss, alignment, codingRate } = simdinoLoss(student, teacher, { eps: this.args.eps, alignWeight: this.args.alignWeight });
    return { loss, terms: { alignment, coding_rate: codingRate }, embeddings: student[0] };
  }
}
