/**
 * Optimizers (SGD, LARS, AdamW), parameter groups with weight-decay exclusion, and
 * learning-rate schedules, following solo-learn and PyTorch.
 */
export { type NamedParam, type ParamGroup, type GroupSettings, toNamedParams, isBiasOrNorm, splitWeightDecay, excludeBiasAndNorm } from './params.js';
export {
  OPTIMIZER_NAMES,
  type OptimizerName,
  type GradientMap,
  type OptimizerGroup,
  type ParamState,
  type OptimizerStateMeta,
  type OptimizerState,
  Optimizer,
} from './optimizer.js';
export { SGD, type SGDOptions } from './sgd.js';
export { LARS, type LARSOptions } from './lars.js';
export { AdamW, type AdamWOptions } from './adamw.js';
export { type WarmupCosineOptions, cosineWeightDecay, warmupCosineLr, WarmupCosineSchedule, scaleLearningRate } from './schedule.js';
export { type OptimizerOptions, createOptimizer } from './factory.js';
