/** Exactness checks: loss reference cases, the W-rank-vs-one-process check's round-off measurement. */
export {
  LOSS_CASE_FORMAT,
  CASE_LOSS_NAMES,
  parseLossCase,
  loadLossCase,
  checkLossCase,
  type CaseLossName,
  type LossCase,
  type LossCaseEntry,
  type LossCaseHyper,
  type LossCaseInputs,
  type LossCaseDistributed,
  type LossCheckResult,
  type LossCaseReport,
  type CheckLossCaseOptions,
  type Matrix,
} from './loss-case.js';
export { formatLossCaseReport, runLossCaseOnRank, LOSS_CHECK_TOLERANCE } from './loss-check.js';
export { gradientDifference, permuteRows, roundoffBound, scalarDifference, stateDifference, ROUNDOFF_TWINS, DEFAULT_ROUNDOFF_FACTOR } from './roundoff.js';
