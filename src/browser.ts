/**
 * The entry of ssl-zoo's browser bundle (`npm run build:browser`, see docs/browser.md): what a
 * page needs to train. Everything here is free of Node built-ins; the modules that differ by
 * platform have a `*.browser.ts` sibling that the browser build uses in their place (the
 * engine: WebGPU or the JS cpu backend; tfjs's gradient registration; image files). The
 * file-system, worker-thread, native-kernel and Gloo parts are not reachable from here. The
 * checkpoint format (`SSLZCKP1`) is the trainer's, as bytes, so that a run continues across both.
 */
export { tf } from './core/tf.js';
export type { Tensor, Tensor2D, Tensor4D, Scalar, Variable } from './core/tf.js';
export { initEngine, engineInfo, BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './core/engine.js';
export { TrainingFailure, UserError } from './core/errors.js';
export { Module, Layer, type StateDict } from './core/module.js';
export { Linear } from './core/layers.js';
export { Rng } from './core/random.js';
export * from './backbones/index.js';
export * from './losses/index.js';
export * from './methods/index.js';
export { SslTask, type OptimSettings, type ValidationSettings } from './methods/task.js';
export * from './optim/index.js';
export * from './data/augment/index.js';
export { createDataset, type ImageDataset } from './data/dataset.js';
export { syntheticDataset, SYNTHETIC_CLASS_NAMES, type SyntheticOptions } from './data/synthetic.js';
export type { MultiViewBatch } from './data/loader.js';
export type { Progress, TrainerOptimizer, TrainerScheduler, TrainingModule } from './trainer/interfaces.js';
export { SingleDeviceStrategy, type Strategy } from './trainer/strategy.js';
export { StepSequence, readMetrics, accumulateBatch, type StepContext, type StepOutcome, type PendingMetrics } from './trainer/step.js';
export {
  encodeCheckpoint,
  decodeCheckpoint,
  joinBytes,
  webCryptoSha256,
  CheckpointProblem,
  CHECKPOINT_MAGIC,
  type CheckpointData,
  type Sha256,
} from './trainer/checkpoint-format.js';
export { LinearEvalTask, linearTrainingData, linearStepsPerEpoch, evaluateLinear, type LabelledSet, type LinearEvalModel } from './eval/linear.js';
export { tfjsExportFiles, type BackboneExport } from './export/backbone-files.js';
export { EXPORT_FORMAT_VERSION, EXPORT_METADATA_FILE, TFJS_MODEL_FILE, type ExportedSpec } from './export/spec.js';
export { TFJS_WEIGHTS_FILE } from './export/tfjs.js';
