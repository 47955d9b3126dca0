/** Exactness checks: loss reference cases, the W-rank-vs-one-process check's round-off measurement. */
export {
  LOSS_CASE_FORMAT,
  LEGACY_LOSS_CASE_FORMAT,
  parseLossCaseFile,
  loadLossCases,
  rankSlice,
  sliceAxis,
  type CaseTensor,
  type LossCase,
  type LossCaseExpected,
  type LossCaseFile,
} from './loss-case-format.js';
export {
  CASE_LOSS_NAMES,
  caseLossSpec,
  caseProblem,
  numberedTensors,
  swavAssignments,
  type CaseLossName,
  type CaseLossFn,
  type CaseLossSpec,
  type CaseLossValue,
  type CaseTensors,
} from './loss-case-specs.js';
export {
  evaluateLossCase,
  caseErrors,
  errorsPass,
  checkLossCases,
  type RankResult,
  type CaseErrors,
  type LossCheckResult,
  type LossCaseReport,
  type CheckLossCaseOptions,
} from './loss-case.js';
export { formatLossCaseReport, runLossCaseOnRank, LOSS_CHECK_TOLERANCE } from './loss-check.js';
export { gradientDifference, permuteRows, roundoffBound, scalarDifference, stateDifference, ROUNDOFF_TWINS, DEFAULT_ROUNDOFF_FACTOR } from './roundoff.js';
