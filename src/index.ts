/** ssl-zoo's public API. */
import 'reflect-metadata';

export { tf } from './core/tf.js';
export type { Tensor, Tensor2D, Tensor4D, Scalar, Variable } from './core/tf.js';
export { initEngine, engineInfo, BACKEND_CHOICES, type BackendChoice, type EngineInfo } from './core/engine.js';
export { TrainingFailure, UserError } from './core/errors.js';
export { Module, Layer, type StateDict } from './core/module.js';
export { Rng } from './core/random.js';
export { detach } from './core/ops.js';
export { cholesky, solveLowerTriangular } from './core/linalg.js';
export { IterNorm, iterNormGroups, type IterNormOptions } from './core/iter-norm.js';
export * from './core/layers.js';
export * from './backbones/index.js';
export * from './losses/index.js';
export * from './verify/index.js';
export * from './methods/index.js';
export { SslTask, type OptimSettings, type ValidationSettings } from './methods/task.js';
export * from './optim/index.js';
export * from './data/index.js';
export * from './eval/index.js';
export * from './trainer/index.js';
export * from './tracking/index.js';
export type { ProcessGroup } from './core/process-group.js';
export { TrainConfig, buildConfig, readConfigFile } from './experiment/config.js';
export { runTraining, type TrainingRun, type RunOptions } from './experiment/train.js';
export { exportRun, type ExportOptions, type ExportResult } from './experiment/export-run.js';
export * from './report/index.js';
export * from './export/index.js';
