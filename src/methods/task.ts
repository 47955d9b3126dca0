import { tf, type Tensor } from '../core/tf.js';
import type { EvalTransform } from '../data/augment/views.js';
import { subset, type Dataset } from '../data/dataset.js';
import type { MultiViewBatch } from '../data/loader.js';
import { extractDatasetFeatures, type ExtractedFeatures } from '../eval/features.js';
import { weightedKnn } from '../eval/knn.js';
import {
  cosineWeightDecay,
  createOptimizer,
  scaleLearningRate,
  splitWeightDecay,
  toNamedParams,
  WarmupCosineSchedule,
  type ParamGroup,
} from '../optim/index.js';
import type { Progress, TrainerOptimizer, TrainerScheduler, TrainingModule, TrainingStepOutput } from '../trainer/interfaces.js';
import { accuracy, type BaseMethod, type StepInfo } from './base.js';
import { gradCacheGradients } from './grad-cache.js';
import type { ProcessGroup } from '../core/process-group.js';

/** Optimisation settings of a run (lrs are per 256 samples, as in solo-learn). */
export interface OptimSettings {
  optimizer: 'sgd' | 'lars' | 'adamw';
  lr: number;
  classifierLr: number;
  weightDecay: number;
  momentum: number;
  larsEta: number;
  larsClipLr: boolean;
  warmupEpochs: number;
  warmupStartLr: number;
  minLr: number;
  /**
   * Weight decay at the last step of a cosine schedule from `weightDecay` (DINO's; see
   * {@link cosineWeightDecay}); undefined: constant. Applies to the groups with weight decay.
   */
  weightDecayEnd?: number;
  /** Global batch over all ranks, for the lr scaling `lr * globalBatch / 256`. */
  globalBatch: number;
}

/** What validation runs on. */
export interface ValidationSettings {
  /** Labelled training images whose features are the kNN memory (a folder's are decoded batch by batch). */
  memory: Dataset;
  /** Validation images. */
  val: Dataset;
  transform: EvalTransform;
  batchSize: number;
  knnK: number;
  knnTemperature: number;
}

/**
 * A self-supervised method as the trainer's {@link TrainingModule}: turns loader batches
 * into tensors, builds the optimizer groups and warmup-cosine schedule of solo-learn
 * (lr scaled by global batch / 256; the online classifier in its own group with no
 * weight decay; biases and norm parameters without weight decay, and unadapted by LARS),
 * and validates with
 * weighted kNN and the online linear classifier.
 */
export class SslTask implements TrainingModule<MultiViewBatch> {
  constructor(
    readonly method: BaseMethod,
    private readonly optim: OptimSettings,
    private readonly validation?: ValidationSettings,
    /** Samples per chunk of the gradient cache (undefined: one pass over the batch). */
    gradCacheChunk?: number,
  ) {
    if (gradCacheChunk !== undefined) {
      this.computeGradients = (batch, variables) => {
        const [views, labels] = this.batchTensors(batch);
        try {
          return gradCacheGradients(this.method, views, labels, gradCacheChunk, variables, batch.indices);
        } finally {
          tf.dispose([...views, labels]);
        }
      };
    }
  }

  /** The gradient cache, when configured (see {@link gradCacheGradients}). */
  readonly computeGradients?: TrainingModule<MultiViewBatch>['computeGradients'];

  private batchTensors(batch: MultiViewBatch): [Tensor[], Tensor] {
    return [batch.views.map((v, i) => tf.tensor4d(v, batch.shapes[i] ?? batch.shape)), tf.tensor1d(batch.labels, 'int32')];
  }

  get model(): BaseMethod {
    return this.method;
  }

  trainingStep(batch: MultiViewBatch): TrainingStepOutput {
    const [views, labels] = this.batchTensors(batch);
    const { seed, epoch, indices, crops } = batch;
    // The loader keys every batch; a batch built by hand without seed and epoch has no keys.
    return this.method.trainingStep(views, labels, seed === undefined || epoch === undefined ? undefined : { seed, epoch, indices, crops });
  }

  configureOptimizers(info: { totalSteps: number; stepsPerEpoch: number }): { optimizer: TrainerOptimizer; scheduler: TrainerScheduler } {
    const o = this.optim;
    const parameterGroups = this.method.parameterGroups();
    const classifierGroup = parameterGroups.find((g) => g.classifier)!;
    const classifier: ParamGroup = {
      name: 'classifier',
      params: toNamedParams(classifierGroup.params),
      lr: scaleLearningRate(o.classifierLr, o.globalBatch),
      weightDecay: 0,
    };
    // Biases and normalisation weights get no weight decay, whatever the optimizer. LARS
    // (as in solo-learn's recipes) leaves 1-D parameters without adaptation and without
    // weight decay inside one group; SGD and AdamW get them in a `method_no_decay` group
    // with weight decay 0 (solo-learn's exclude_bias_n_norm_wd). A `staticLr` group (solo-learn's
    // static_lr, e.g. SimSiam's predictor) keeps the method's lr, unscheduled.
    const methodGroups = parameterGroups
      .filter((g) => !g.classifier)
      .flatMap((g) => {
        const settings = { name: g.name, lr: scaleLearningRate(o.lr, o.globalBatch), weightDecay: o.weightDecay, ...(g.staticLr ? { scheduled: false } : {}) };
        const params = toNamedParams(g.params);
        return o.optimizer === 'lars' ? [{ ...settings, params }] : splitWeightDecay(params, settings);
      });
    const groups: ParamGroup[] = [...methodGroups, classifier];
    const optimizer = createOptimizer(o.optimizer, groups, { momentum: o.momentum, eta: o.larsEta, clipLr: o.larsClipLr, excludeBiasAndNorm: true });
    const schedule = new WarmupCosineSchedule({
      warmupSteps: Math.round(o.warmupEpochs * info.stepsPerEpoch),
      totalSteps: info.totalSteps,
      warmupStartLr: o.warmupStartLr,
      minLr: o.minLr,
    });
    // The groups with weight decay (not the classifier, not the `_no_decay` ones) follow --weight-decay-end.
    const decayed = optimizer.groups.filter((g) => g.weightDecay > 0);
    const scheduler: TrainerScheduler = {
      apply: (step) => {
        schedule.apply(optimizer, step);
        const end = o.weightDecayEnd;
        if (end !== undefined) for (const g of decayed) g.weightDecay = cosineWeightDecay(step, o.weightDecay, end, info.totalSteps);
        return Object.fromEntries(optimizer.groups.map((g, i) => [g.name, optimizer.getLr(i)]));
      },
    };
    return { optimizer, scheduler };
  }

  /** Hands the process group to the method (its coupled losses and validation run over it). */
  setup(context: { group: ProcessGroup }): void {
    this.method.setup(context);
  }

  onTrainEpochStart(progress: Progress): void {
    this.method.onTrainEpochStart(stepInfo(progress));
  }

  onTrainBatchStart(progress: Progress): void {
    this.method.onTrainBatchStart(stepInfo(progress));
  }

  adjustGradients(grads: Record<string, Tensor>, progress: Progress): Record<string, Tensor> {
    return this.method.adjustGradients(grads, stepInfo(progress));
  }

  onTrainBatchEnd(progress: Progress): void {
    this.method.onTrainBatchEnd(stepInfo(progress));
  }

  stepLogs(): Record<string, number> {
    return this.method.stepLogs();
  }

  /**
   * Features and logits of `dataset` in eval mode. With several ranks each extracts a
   * contiguous shard (padded to equal size) and the shards are all-gathered, so every rank
   * ends with the features of the whole set, in order.
   */
  private async extract(dataset: Dataset, v: ValidationSettings): Promise<ExtractedFeatures> {
    const group = this.method.group;
    if (!group || group.worldSize === 1) return extractDatasetFeatures(this.method, dataset, v.transform, v.batchSize);
    const per = Math.ceil(dataset.length / group.worldSize);
    const start = group.rank * per;
    const shard = subset(
      dataset,
      Int32Array.from({ length: per }, (_, i) => Math.min(start + i, dataset.length - 1)),
    );
    const local = await extractDatasetFeatures(this.method, shard, v.transform, v.batchSize);
    const gather = async (t: Tensor): Promise<Tensor> => {
      const columns = t.shape[1] ?? 1;
      const all = group.allGather((await t.data()) as Float32Array);
      t.dispose();
      return tf.tensor2d(all.subarray(0, dataset.length * columns), [dataset.length, columns]);
    };
    return { features: await gather(local.features), logits: await gather(local.logits), labels: dataset.labels };
  }

  /** kNN top-1/top-5 (`knn_acc1`, `knn_acc5`) and online linear top-1/top-5 (`acc1`, `acc5`). */
  async validate(): Promise<Record<string, number>> {
    const v = this.validation;
    if (!v) return {};
    this.method.eval();
    try {
      const memory = await this.extract(v.memory, v);
      const val = await this.extract(v.val, v);
      const knn = weightedKnn(memory.features, memory.labels, val.features, val.labels, {
        k: v.knnK,
        temperature: v.knnTemperature,
        numClasses: val.logits.shape[1] ?? 1,
      });
      const accuracies = tf.tidy(() => {
        const { top1, top5 } = accuracy(val.logits, tf.tensor1d(val.labels, 'int32'));
        return tf.stack([top1, top5]);
      });
      const linear = await accuracies.data();
      accuracies.dispose();
      tf.dispose([memory.features, memory.logits, val.features, val.logits]);
      return { knn_acc1: knn.top1, knn_acc5: knn.top5, acc1: linear[0], acc5: linear[1] };
    } finally {
      this.method.train();
    }
  }
}

/** The method's view of the trainer's progress. */
function stepInfo(progress: Progress): StepInfo {
  return { step: progress.step, totalSteps: progress.totalSteps, epoch: progress.epoch };
}
