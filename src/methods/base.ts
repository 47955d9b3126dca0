import { Module } from '../core/module.js';
import { detach, l2NormalizeRows } from '../core/ops.js';
import type { Rng } from '../core/random.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import { IterNorm } from '../core/iter-norm.js';
import { BatchNorm, Linear, type NormKind } from '../core/layers.js';
import type { Backbone } from '../backbones/index.js';
import { jobWorldSize, withProcessGroup, type ProcessGroup } from '../core/process-group.js';
import { TWO_GLOBAL_CROPS, type CropPolicy } from '../data/augment/crops.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { defineArgs, type ArgSpecs, type ArgValue } from './args.js';
import { forwardCrops } from './forward-crops.js';
import { FeatureQueue } from './queue.js';
export { headNorm } from './heads.js';

/**
 * Hyperparameters of a method (`temperature`, `projHiddenDim`, `useBnInHead`, ...): numbers,
 * booleans or choice words, as declared by its static `args` (see {@link defineArgs}).
 */
export type MethodArgs = Record<string, ArgValue>;

/** What a method is built from. */
export interface MethodContext {
  /** Makes a fresh backbone of the configured kind (also used for EMA target networks). */
  createBackbone: (rng: Rng) => Backbone;
  /** Number of classes of the labelled data, for the online linear probe. */
  numClasses: number;
  /** The generator for every initialisation of this method. */
  rng: Rng;
  /** The method's hyperparameters, already merged with its defaults. */
  args: MethodArgs;
  /** Normalisation of the heads (`batch` default; `group`/`layer` make them per-sample). */
  norm?: NormKind;
  /** Samples in the training set, for methods with a per-sample memory bank (DeepCluster v2). */
  datasetSize?: number;
}

/** What a self-supervised objective returns for one batch. */
export interface SslLossOutput {
  /** The method's loss (scalar). */
  loss: Scalar;
  /** Named parts of the loss, logged as `train/<name>`. */
  terms?: Record<string, Scalar>;
  /** The embeddings the loss compares, `[B, D]` (first view), to log their spread. */
  embeddings?: Tensor;
}

/**
 * The keys of a batch's per-sample randomness (docs/design.md, contract 8): sample k's draws come
 * from `(seed, epoch, indices[k], ...)`, whatever the batch's composition or the world size.
 */
export interface SampleKeys {
  seed: number;
  epoch: number;
  /** `[B]` global dataset indices of the batch's samples. */
  indices: Int32Array;
  /** Per view, `[B, 5]`: each sample's crop box (top, left, height, width, in source-image pixels) and 1 where it was flipped (`MultiViewBatch.crops`). */
  crops?: Float32Array[];
}

/** A training step's total loss and its metrics (kept tensors; the caller disposes them). */
export interface StepOutput {
  loss: Scalar;
  metrics: Record<string, Scalar>;
}

/** Progress of training, given to the per-batch hooks. */
export interface StepInfo {
  /** Optimizer steps done so far (after this batch's step). */
  step: number;
  /** Optimizer steps of the whole run. */
  totalSteps: number;
  /** Zero-based epoch of the step. */
  epoch: number;
}

/** A group of the method's parameters for the optimizer (see {@link BaseMethod.parameterGroups}). */
export interface ParameterGroup {
  name: string;
  params: Array<[string, tf.Variable]>;
  /** The online classifier's group (its own lr, no weight decay); the last group. */
  classifier: boolean;
  /** Keep the method's lr unscheduled, without warmup or cosine decay (solo-learn's `static_lr`). */
  staticLr?: boolean;
}

/** Optimizer defaults a method recommends (solo-learn's recipes, per 256 samples). */
export interface OptimDefaults {
  optimizer: 'sgd' | 'lars' | 'adamw';
  lr: number;
  classifierLr: number;
  weightDecay: number;
}

/**
 * The base of every self-supervised method, as in solo-learn: a backbone, the method's
 * heads (defined by subclasses), and an online linear classifier trained on *detached*
 * backbone features, so that linear accuracy can be watched during pre-training without
 * the labels leaking into the representation. Its cross-entropy is added to the method's
 * loss; its parameters form their own optimizer group (own lr, no weight decay).
 *
 * Subclasses implement {@link embed} and {@link embeddingLoss} (or override
 * {@link sslLoss}); momentum methods extend {@link MomentumMethod}. Methods never gather
 * across processes and never handle the process group: the trainer hands it over with
 * {@link setup}, and every loss computed inside {@link embeddingLoss} / {@link sslLoss} runs
 * over it (it is scoped around them, see {@link coupledLoss}), so a loss called there with no
 * group argument still uses the global batch.
 *
 * One training step is built from three parts, which the plain step ({@link trainingStep}),
 * the gradient cache and `verify` share: per-sample {@link embed}, the batch-coupled
 * {@link coupledLoss}, and the online classifier's {@link classifierTerms}.
 */
export abstract class BaseMethod extends Module {
  /**
   * Declared hyperparameters (kind, default, range, description); `--method-arg name=value`
   * overrides the defaults. None here; a subclass of a method spreads its parent's,
   * `defineArgs({ ...Parent.args, ... })`, and types {@link args} precisely with
   * `declare readonly args: ArgValues<typeof Sub.args>`.
   */
  static readonly args: ArgSpecs = defineArgs({});
  /** Optimizer recipe of the method. */
  static readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 };
  /** The augmentation recipe (see `viewsFor`): `simclr` or `simsiam` (two identical views), `byol` or `barlow` (asymmetric blur/solarisation), `vicreg` (symmetric, solarisation on both), ... */
  static readonly viewRecipe: ViewRecipe = 'simclr';
  /** The paper, as `Authors Year, "Title"` (listed by `ssl-train methods`). */
  static readonly paper: string = '';
  /** Whether the objective itself uses the labels (supervised methods such as SupCon); such methods refuse unlabelled data. */
  static readonly needsLabels: boolean = false;
  /**
   * The crops the method takes (`--crops`): by default exactly two global crops and no local
   * ones. A multi-crop method (SwAV, DINO) sets `multiCrop` (its views are then forwarded per
   * crop size, see {@link viewFeatures}) and may set default local crops.
   */
  static readonly crops: CropPolicy = TWO_GLOBAL_CROPS;
  /** The backbone when the config names none (`--backbone`). */
  static readonly defaultBackbone: string = 'tiny_resnet';

  readonly backbone: Backbone;
  readonly classifier: Linear;
  /** The values of the hyperparameters declared by the class's static `args`. */
  readonly args: MethodArgs;
  /** Normalisation used by the heads. */
  readonly norm: NormKind;
  private processGroup: ProcessGroup | undefined;

  constructor(ctx: MethodContext) {
    super();
    this.args = ctx.args;
    this.norm = ctx.norm ?? 'batch';
    this.backbone = this.addModule('backbone', ctx.createBackbone(ctx.rng));
    this.classifier = this.addModule('classifier', new Linear(this.backbone.featureDim, ctx.numClasses, { rng: ctx.rng }));
  }

  /**
   * Hands the method the process group its coupled losses run over (the trainer calls it
   * after the strategy set the model up; one process: a group of one).
   */
  setup({ group }: { group: ProcessGroup }): void {
    this.processGroup = group;
  }

  /** The group given to {@link setup} (undefined before). */
  get group(): ProcessGroup | undefined {
    return this.processGroup;
  }

  /** Backbone features of images: `[B, H, W, C] -> [B, F]`. */
  features(images: Tensor): Tensor {
    return this.backbone.forward(images);
  }

  /** The class's {@link BaseMethod.crops}. */
  get cropPolicy(): CropPolicy {
    return (this.constructor as typeof BaseMethod).crops;
  }

  /**
   * Backbone features of a batch's views (`[B, S_v, S_v, C] -> [B, F]` each, global crops
   * first): one backbone pass per view, or for a multi-crop method one per crop size
   * ({@link forwardCrops}: batch norm then normalises over all crops of a size).
   */
  viewFeatures(views: Tensor[]): Tensor[] {
    return this.cropPolicy.multiCrop ? forwardCrops(views, (x) => this.features(x)) : views.map((v) => this.features(v));
  }

  /**
   * The per-sample part of the method: the embeddings its loss compares, from the
   * backbone features of each view (`[B, F]` each) and the views themselves
   * (`[B, H, W, C]` each; momentum methods feed them to the target). Row i of every
   * embedding must depend on sample i only (the gradient cache relies on it).
   */
  abstract embed(features: Tensor[], views: Tensor[]): Tensor[];

  /**
   * The part of the loss that couples samples, from {@link embed}'s output (`[B, D]` each).
   * `labels` `[B]` int32 are the batch's labels: only methods that declare
   * {@link BaseMethod.needsLabels} may use them in the objective (and queues may keep them
   * for logging). `indices` `[B]` are the samples' global dataset indices (given by the
   * trainer, verify and the gradient cache; methods with per-sample state, such as
   * DeepCluster v2's memory bank, need them; the others ignore them).
   */
  abstract embeddingLoss(embeddings: Tensor[], labels: Tensor, indices?: Int32Array): SslLossOutput;

  /**
   * The method's objective: {@link embeddingLoss} of {@link embed}. A subclass may override
   * this instead of the two parts, but then the gradient cache cannot split it. Runs with
   * the group scoped, like {@link coupledLoss}.
   */
  protected sslLoss(features: Tensor[], views: Tensor[], labels: Tensor, indices?: Int32Array): SslLossOutput {
    return this.embeddingLoss(this.embed(features, views), labels, indices);
  }

  /**
   * {@link embeddingLoss} over the process group from {@link setup}: the losses it calls
   * gather over that group without being passed it. In a multi-rank job, a method that was
   * never set up is an error, not a silently local loss.
   */
  coupledLoss(embeddings: Tensor[], labels: Tensor, indices?: Int32Array): SslLossOutput {
    return this.inGroup(() => this.embeddingLoss(embeddings, labels, indices));
  }

  /** Runs `fn` (a loss) over the group from {@link setup}; an error in a multi-rank job never set up. */
  protected inGroup<T>(fn: () => T): T {
    if (!this.processGroup && jobWorldSize() > 1) {
      throw new Error(
        `${this.constructor.name}: its loss couples the samples of the batch but the method was not set up with the process group of this ${jobWorldSize()}-rank job (method.setup({ group }); the trainer does it)`,
      );
    }
    return withProcessGroup(this.processGroup, fn);
  }

  /**
   * The online classifier's terms on detached `features` (one `[B, F]` per view; only the
   * global crops are used, as solo-learn does) against `labels` `[B]` (repeated per global
   * crop): its cross-entropy `class_loss` (mean over the rows) and top-1/top-5 accuracy `acc1`, `acc5`.
   */
  classifierTerms(features: Tensor[], labels: Tensor): { class_loss: Scalar; acc1: Scalar; acc5: Scalar } {
    const global = features.slice(0, this.cropPolicy.globalCrops);
    const logits = this.classifier.forward(detach(tf.concat(global, 0)));
    const repeated = tf.tile(labels, [global.length]);
    const { top1, top5 } = accuracy(logits, repeated);
    return { class_loss: crossEntropy(logits, repeated), acc1: top1, acc5: top5 };
  }

  /** Whether {@link sslLoss} is the split form the gradient cache needs. */
  get splitsLoss(): boolean {
    return this.sslLoss === BaseMethod.prototype.sslLoss;
  }

  /**
   * One training step's loss: the method's loss plus the online classifier's
   * cross-entropy on detached features of the global crops (every view of a two-view method). `labels` is `[B]` int32;
   * `samples` keys the batch's samples: their dataset indices (given to {@link embeddingLoss}) and
   * the seed and epoch that key per-sample randomness of methods that draw some (MAE's masks).
   * Returned metrics are kept (`tf.keep`) so they outlive the gradient tape's scope.
   */
  trainingStep(views: Tensor[], labels: Tensor, samples?: SampleKeys): StepOutput {
    const features = this.viewFeatures(views);
    const { loss: sslLoss, terms = {}, embeddings } = this.inGroup(() => this.sslLoss(features, views, labels, samples?.indices));
    const classifier = this.classifierTerms(features, labels);
    const total = tf.add(sslLoss, classifier.class_loss) as Scalar;
    const metrics: Record<string, Scalar> = { loss: sslLoss, ...classifier, ...terms };
    if (embeddings) metrics.embedding_std = embeddingStd(embeddings);
    for (const m of Object.values(metrics)) tf.keep(m);
    return { loss: total, metrics };
  }

  /** Classifier logits for images (evaluation): `[B, H, W, C] -> [B, classes]`. */
  classify(images: Tensor): Tensor {
    return this.classifier.forward(this.features(images));
  }

  /**
   * Parameters split into optimizer groups: everything trainable but the classifier
   * (the method's lr and weight decay), then the classifier (its own lr, no weight decay).
   * A method may split its part further, e.g. a group with `staticLr` (SimSiam's predictor).
   */
  parameterGroups(): ParameterGroup[] {
    const trainable = this.namedParameters().filter(([, v]) => v.trainable);
    return [
      { name: 'method', params: trainable.filter(([n]) => !n.startsWith('classifier.')), classifier: false },
      { name: 'classifier', params: trainable.filter(([n]) => n.startsWith('classifier.')), classifier: true },
    ];
  }

  /** Called before the first batch of each epoch (not when a run resumes mid-epoch); no-op here. */
  onTrainEpochStart(_info: StepInfo): void {}

  /** Called before the first batch of each optimizer step (`info.step`: the steps done before it); no-op here. */
  onTrainBatchStart(_info: StepInfo): void {}

  /**
   * The gradients to apply at a step, from the reduced (global-batch) gradients keyed by
   * variable name (`info.step`: the steps done before it). Unchanged here; a method drops the
   * gradients of parameters it freezes ({@link withoutGradients}) or rescales them. New
   * tensors it returns are disposed by the caller.
   */
  adjustGradients(grads: Record<string, Tensor>, _info: StepInfo): Record<string, Tensor> {
    return grads;
  }

  /**
   * Called after every optimizer step: writes the rows the step's losses pushed into the
   * method's queues (see {@link FeatureQueue}). Momentum methods also update their target
   * here; an override calls `super.onTrainBatchEnd(info)`.
   */
  onTrainBatchEnd(_info: StepInfo): void {
    for (const [, queue] of this.queues()) queue.flush();
  }

  /** The method's queues with their dotted names (their state is compared by `verify`). */
  queues(): Array<[string, FeatureQueue]> {
    return this.namedModules().filter((entry): entry is [string, FeatureQueue] => entry[1] instanceof FeatureQueue);
  }

  /**
   * Tells the method that the coming loss calls (one per micro-batch, in order) see their
   * batch's samples in another order than the batch its random draws are keyed to: row i is
   * row `orders[k][i]` of that batch. `verify` calls it for its round-off twins, which train on
   * reordered batches; a method whose loss draws over batch positions (W-MSE's sub-batches)
   * maps its draws to the same samples. Nothing to do for the others.
   */
  presentSampleOrders(_orders: Int32Array[]): void {}

  /**
   * The modules holding state written from data rather than by the optimizer (queues, memory
   * banks, prototypes), with their dotted names: `verify` compares their state apart from the
   * parameters'. The queues by default; a method with other such state adds its modules.
   */
  memoryModules(): Array<[string, Module]> {
    return this.queues();
  }

  /** Values to log after each step besides the loss terms (e.g. the EMA tau). */
  stepLogs(): Record<string, number> {
    return {};
  }
}

/**
 * `grads` (keyed by variable name) without the gradients of `frozen`'s parameters: the
 * optimizer then leaves them untouched (no update, no momentum, no weight decay), as
 * PyTorch's `p.grad = None`.
 */
export function withoutGradients(grads: Record<string, Tensor>, frozen: Module): Record<string, Tensor> {
  const names = new Set(frozen.parameters().map((v) => v.name));
  return Object.fromEntries(Object.entries(grads).filter(([name]) => !names.has(name)));
}

/**
 * Whether `module` contains batch norm or IterNorm (batch whitening) in training mode, which
 * couple the samples of a batch.
 */
export function hasBatchNorm(module: Module): boolean {
  return module.namedModules().some(([, m]) => (m instanceof BatchNorm || m instanceof IterNorm) && m.training);
}

/**
 * Mean softmax cross-entropy of `logits [N, K]` against int `labels [N]`. With one class (an
 * unlabelled folder) it is 0, still a function of the logits (tf.oneHot needs K >= 2).
 */
export function crossEntropy(logits: Tensor, labels: Tensor): Scalar {
  const numClasses = logits.shape[logits.shape.length - 1];
  if (numClasses === 1) return tf.neg(tf.mean(tf.logSoftmax(logits))) as Scalar;
  const oneHot = tf.oneHot(tf.cast(labels, 'int32'), numClasses);
  return tf.losses.softmaxCrossEntropy(oneHot, logits) as Scalar;
}

/** Top-1 and top-5 accuracy of `logits [N, K]` against `labels [N]`, in [0, 1]. */
export function accuracy(logits: Tensor, labels: Tensor): { top1: Scalar; top5: Scalar } {
  return tf.tidy(() => {
    const k = Math.min(5, logits.shape[logits.shape.length - 1]);
    const { indices } = tf.topk(logits, k);
    const hits = tf.cast(tf.equal(indices, tf.expandDims(tf.cast(labels, 'int32'), 1)), 'float32');
    const top1 = tf.mean(tf.slice(hits, [0, 0], [-1, 1])) as Scalar;
    const top5 = tf.mean(tf.sum(hits, 1)) as Scalar;
    return { top1, top5 };
  });
}

/**
 * Mean over dimensions of the batch standard deviation of L2-normalised embeddings
 * `[B, D]`: about 1/sqrt(D) for a healthy representation, 0 when it collapses.
 */
export function embeddingStd(z: Tensor): Scalar {
  return tf.tidy(() => {
    const normalized = l2NormalizeRows(z);
    const { variance } = tf.moments(normalized, 0);
    return tf.mean(tf.sqrt(variance)) as Scalar;
  });
}
