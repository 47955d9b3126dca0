/**
 * The per-rank side of `ssl-train verify --case FILE --devices W`: every one of the W
 * processes calls {@link runLossCaseOnRank} with the same file and its own process group;
 * rank r takes rows `r·B .. r·B + B − 1` (B = N / W) of the case, runs each loss with the
 * distributed implementation (gathers and all-reduces included) and compares with the
 * float64 reference (docs/loss-case.md):
 * - the mean over ranks of the per-rank losses against `losses.<name>.loss`;
 * - each rank's loss against `distributed.per_rank_loss.<name>[r]` when the case's
 *   `distributed.world_size` is W;
 * - each rank's gradient on its local rows divided by W (what DDP's averaging does) against
 *   the matching rows of `losses.<name>.grad`, relative to the largest reference entry.
 * Errors are reduced over ranks (max), so every rank returns the same report.
 */
import { UserError } from '../core/errors.js';
import { checkLossCase, loadLossCase, type LossCase, type LossCaseReport } from './loss-case.js';
import type { ProcessGroup } from '../core/process-group.js';

/** Default relative tolerance of `verify` (1e-4, docs/loss-case.md). */
export const LOSS_CHECK_TOLERANCE = 1e-4;

/**
 * Loads the case at `casePath` and checks every loss on this rank's rows (see the module
 * comment). Every rank of `group` must call it with the same path and tolerance; it runs
 * collectives, including a first one in which the ranks agree that each of them could read
 * the file and sees the same N and D (so a rank that cannot read it makes every rank fail
 * with a `UserError` instead of leaving the others waiting).
 *
 * Throws `UserError` for an unreadable or malformed file, and when N is not divisible by the
 * world size W (the message names N and W). Returns the report (identical on every rank but
 * for `report.rank`); `report.passed` is false when an implemented loss is off by more than
 * `tolerance` (default {@link LOSS_CHECK_TOLERANCE}). Losses ssl-zoo does not implement are
 * reported as skipped.
 */
export function runLossCaseOnRank(casePath: string, group: ProcessGroup, tolerance: number = LOSS_CHECK_TOLERANCE): LossCaseReport {
  if (!(Number.isFinite(tolerance) && tolerance > 0)) {
    throw new UserError(`tolerance: ${JSON.stringify(tolerance)} is not allowed; expected a number > 0`);
  }
  let lossCase: LossCase | undefined;
  let failure: unknown;
  try {
    lossCase = loadLossCase(casePath);
  } catch (err) {
    failure = err;
  }
  agreeOnCase(casePath, lossCase, failure, group);
  // agreeOnCase returned: every rank loaded a case of the same shape. checkLossCase throws
  // the UserError naming N and W when W does not divide N.
  return checkLossCase(lossCase as LossCase, { tolerance }, group);
}

/**
 * One all-reduce (max) of [failed, N, D, −N, −D]: throws the same kind of error on every rank
 * when any rank failed to load the case or the ranks disagree on its shape.
 */
function agreeOnCase(casePath: string, lossCase: LossCase | undefined, failure: unknown, group: ProcessGroup): void {
  const n = lossCase?.N ?? 0;
  const d = lossCase?.D ?? 0;
  const status = Float32Array.of(lossCase ? 0 : 1, n, d, -n, -d);
  if (group.worldSize > 1) group.allReduce(status, 'max');
  if (failure !== undefined) throw failure;
  if (status[0]! > 0) {
    throw new UserError(`loss case ${casePath}: another process could not read or validate the file (see its message)`);
  }
  if (status[1] !== -status[3]! || status[2] !== -status[4]!) {
    throw new UserError(
      `loss case ${casePath}: the processes read different files (N between ${-status[3]!} and ${status[1]}, ` +
        `D between ${-status[4]!} and ${status[2]}); every process must see the same case`,
    );
  }
}

function fmt(x: number | undefined): string {
  if (x === undefined) return '-';
  if (!Number.isFinite(x)) return String(x);
  return x.toExponential(1);
}

/**
 * A human-readable report: a header line (case, W, rows per rank, tolerance), then one line
 * per loss — name, status, loss value against the reference and its relative error, the
 * gradient error, the per-rank loss error (or why it was not compared); skipped losses say
 * why — and a final summary line (`PASSED` / `FAILED`, with counts). No trailing newline.
 */
export function formatLossCaseReport(report: LossCaseReport): string {
  const { worldSize: W, rowsPerRank: B } = report;
  const lines = [
    `loss case ${report.source}: W = ${W} process${W === 1 ? '' : 'es'}, rank r holds rows ` + `r*${B}..r*${B}+${B - 1}, tolerance ${report.tolerance}`,
  ];
  const width = Math.max(...report.results.map((r) => r.name.length), 6);
  for (const r of report.results) {
    const head = `  ${r.name.padEnd(width)}  ${r.status.padEnd(7)}`;
    if (r.status === 'skipped') {
      lines.push(`${head}  ${r.reason ?? 'skipped'}`);
      continue;
    }
    const parts = [
      `loss ${r.value?.toPrecision(7)} vs ${r.expected?.toPrecision(7)} (error ${fmt(r.lossError)})`,
      `gradient error ${r.gradError === undefined ? 'not checked' : fmt(r.gradError)}`,
    ];
    if (r.rankLossError !== undefined) {
      parts.push(`per-rank loss error ${fmt(r.rankLossError)}`);
    } else if (report.caseWorldSize !== undefined && report.caseWorldSize !== W) {
      parts.push(`per-rank losses not compared (the case records W = ${report.caseWorldSize})`);
    } else {
      parts.push('per-rank losses not compared (none in the case)');
    }
    lines.push(`${head}  ${parts.join(', ')}`);
  }
  const count = (s: string) => report.results.filter((r) => r.status === s).length;
  lines.push(`${report.passed ? 'PASSED' : 'FAILED'}: ${count('passed')} passed, ${count('failed')} failed, ` + `${count('skipped')} skipped`);
  return lines.join('\n');
}
