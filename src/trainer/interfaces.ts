import type { Module } from '../core/module.js';
import type { ProcessGroup } from '../core/process-group.js';
import type { Scalar, Tensor, Variable } from '../core/tf.js';

/** A training step's loss (to differentiate) and its metrics (kept tensors, disposed by the trainer). */
export interface TrainingStepOutput {
  loss: Scalar;
  metrics: Record<string, Scalar>;
}

/** Progress of a run. */
export interface Progress {
  /** Zero-based epoch. */
  epoch: number;
  /** Optimizer steps done. */
  step: number;
  /** Batches done in the current epoch. */
  batchInEpoch: number;
  /** Optimizer steps of the configured epochs (the schedule's length; `maxSteps` may stop earlier). */
  totalSteps: number;
}

/** An optimizer as the trainer drives it. */
export interface TrainerOptimizer {
  /** Applies one update from gradients keyed by `variable.name` (tf.variableGrads' output). */
  step(grads: Record<string, Tensor>): void;
  stateDict(): { tensors: Record<string, Tensor>; meta: unknown };
  loadStateDict(state: { tensors: Record<string, Tensor>; meta: unknown }): void;
  dispose(): void;
}

/** A per-step learning-rate schedule: sets the lrs for step `step` and returns them by group name. */
export interface TrainerScheduler {
  apply(step: number): Record<string, number>;
}

/** A batch source for one epoch, resumable from a batch index. */
export interface DataSource<B> {
  /** Batches per epoch (on this rank). */
  numBatches(): number;
  /** Samples per batch on this rank. */
  readonly batchSize: number;
  batches(epoch: number, startBatch: number): AsyncIterable<B>;
  close(): Promise<void>;
}

/**
 * What the trainer trains (Lightning's LightningModule): a module, how one batch becomes a
 * loss, its optimizer and schedule, and optional validation. The trainer owns the loop,
 * gradients, the strategy (one or many processes), logging and checkpoints.
 */
export interface TrainingModule<B> {
  /** The model: its trainable parameters get gradients; parameters and buffers are checkpointed. */
  readonly model: Module;
  /** Runs inside the gradient tape; must return the loss to differentiate. */
  trainingStep(batch: B): TrainingStepOutput;
  /**
   * When defined, replaces the one tape over {@link trainingStep} (Lightning's manual
   * optimisation, e.g. the gradient cache): this rank's unsynchronised gradients for
   * `variables`, keyed by variable name, and the step's metrics. The trainer still syncs
   * them through the strategy once and steps the optimizer. The metrics are scalars `[]` left
   * on the device (never read inside a step), disposed by the trainer.
   */
  computeGradients?(batch: B, variables: Variable[]): { grads: Record<string, Tensor>; metrics: Record<string, Scalar> };
  /**
   * Called once the strategy has set up the model, before {@link configureOptimizers}: the
   * process group the module's batch-coupled computations (losses, validation) run over.
   */
  setup?(context: { group: ProcessGroup }): void;
  /** Called once the strategy has set up the model, before the first step. */
  configureOptimizers(info: { totalSteps: number; stepsPerEpoch: number }): {
    optimizer: TrainerOptimizer;
    scheduler: TrainerScheduler;
  };
  /** Before the first batch of each epoch (not when a run resumes in the middle of an epoch). */
  onTrainEpochStart?(progress: Progress): void;
  /** Before the first batch of each optimizer step. */
  onTrainBatchStart?(progress: Progress): void;
  /**
   * Adjusts the gradients about to be applied, after the strategy's reduce (so the global
   * batch's gradients, identical on every rank), keyed by variable name: e.g. drops the
   * gradients of parameters frozen at this point of training (a parameter without a gradient
   * is not updated at all: no momentum, no weight decay) or clips their norm. `progress` is
   * the step's (its `step` counts the steps done before it). Returns the gradients to apply;
   * the tensors it creates are the caller's to dispose.
   */
  adjustGradients?(grads: Record<string, Tensor>, progress: Progress): Record<string, Tensor>;
  /** After each optimizer step. */
  onTrainBatchEnd?(progress: Progress): void;
  /** Extra per-step values to log (e.g. an EMA coefficient). */
  stepLogs?(): Record<string, number>;
  /** Validation at the end of an epoch; returns metrics to log (names without prefix). */
  validate?(progress: Progress): Promise<Record<string, number>>;
}
