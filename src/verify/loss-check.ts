/**
 * The per-rank side of `ssl-train verify --case FILE --devices W`: every one of the W
 * processes calls {@link runLossCaseOnRank} with the same file (or directory) and its own
 * process group; rank r takes its slice of every case's batch inputs, runs each loss with the
 * distributed implementation (gathers and all-reduces included) and compares with the float64
 * reference (docs/loss-case.md): the mean over ranks of the per-rank losses against the loss;
 * each rank's loss against the case's per-rank loss for W when it has one; each rank's
 * gradient on its slice divided by W (what DDP's averaging does) against the matching slice of
 * the reference gradient; outputs and the state after. Errors are reduced over ranks (max), so
 * every rank returns the same report. One launch checks every case of the file.
 */
import { UserError } from '../core/errors.js';
import type { ProcessGroup } from '../core/process-group.js';
import { loadLossCases, type LossCaseFile } from './loss-case-format.js';
import { checkLossCases, type LossCaseReport } from './loss-case.js';

/** Default relative tolerance of `verify --case` (1e-4, docs/loss-case.md). */
export const LOSS_CHECK_TOLERANCE = 1e-4;

/**
 * Loads the cases at `casePath` (a file or a directory of them) and checks every one on this
 * rank (see the module comment). Every rank of `group` must call it with the same path and
 * tolerance; a first collective makes the ranks agree that each could read the cases and sees
 * the same ones, so a rank that cannot read them makes every rank fail with a `UserError`
 * instead of leaving the others waiting.
 *
 * Throws `UserError` for an unreadable or malformed file, a case the loss cannot run, and a
 * case whose N the world size W does not divide (the message names the case, N and W). Returns
 * the report (identical on every rank but for `report.rank`).
 */
export function runLossCaseOnRank(casePath: string, group: ProcessGroup, tolerance: number = LOSS_CHECK_TOLERANCE): LossCaseReport {
  if (!(Number.isFinite(tolerance) && tolerance > 0)) {
    throw new UserError(`tolerance: ${JSON.stringify(tolerance)} is not allowed; expected a number > 0`);
  }
  let file: LossCaseFile | undefined;
  let failure: unknown;
  try {
    file = loadLossCases(casePath);
  } catch (err) {
    failure = err;
  }
  agreeOnCases(casePath, file, failure, group);
  return checkLossCases(file as LossCaseFile, { tolerance }, group);
}

/** One all-reduce (max) of [failed, cases, ΣN, −cases, −ΣN]: the same error on every rank when any failed or they differ. */
function agreeOnCases(casePath: string, file: LossCaseFile | undefined, failure: unknown, group: ProcessGroup): void {
  const count = file?.cases.length ?? 0;
  const rows = file?.cases.reduce((s, c) => s + c.N, 0) ?? 0;
  const status = Float32Array.of(file ? 0 : 1, count, rows, -count, -rows);
  if (group.worldSize > 1) group.allReduce(status, 'max');
  if (failure !== undefined) throw failure;
  if (status[0]! > 0) throw new UserError(`loss case ${casePath}: another process could not read or validate it (see its message)`);
  if (status[1] !== -status[3]! || status[2] !== -status[4]!) {
    throw new UserError(
      `loss case ${casePath}: the processes read different cases (between ${-status[3]!} and ${status[1]} cases); every process must see the same file`,
    );
  }
}

function fmt(x: number | undefined): string {
  if (x === undefined) return '-';
  if (!Number.isFinite(x)) return String(x);
  return x.toExponential(1);
}

/**
 * A human-readable report: a header line (source, W, tolerance), one line per case — name,
 * status, loss value against the reference and its relative error, the gradient error, the
 * per-rank loss error (or that the case has none for this W), the output and state-after
 * errors where the case has them, detached inputs that got a gradient; skipped cases say why —
 * and a final summary line (`PASSED` / `FAILED`, with counts). No trailing newline.
 */
export function formatLossCaseReport(report: LossCaseReport): string {
  const W = report.worldSize;
  const split = W === 1 ? 'W = 1 process (the whole batch)' : `W = ${W} processes, rank r holds slice r of N/${W} rows of every batch input`;
  const lines = [`loss cases ${report.source}: ${split}, tolerance ${report.tolerance}`];
  const width = Math.max(...report.results.map((r) => r.name.length), 6);
  for (const r of report.results) {
    const head = `  ${r.name.padEnd(width)}  ${r.status.padEnd(7)}`;
    const e = r.errors;
    if (r.status === 'skipped' || !e) {
      lines.push(`${head}  ${r.reason ?? 'skipped'}`);
      continue;
    }
    const parts = [`loss ${r.value?.toPrecision(7)} vs ${r.expected?.toPrecision(7)} (error ${fmt(e.loss)})`, `gradient error ${fmt(e.grad)}`];
    if (e.rankLoss !== undefined) parts.push(`per-rank loss error ${fmt(e.rankLoss)}`);
    else if (W > 1) parts.push(`per-rank losses not compared (none recorded for W = ${W})`);
    if (e.outputs !== undefined) parts.push(`outputs error ${fmt(e.outputs)}`);
    if (e.stateAfter !== undefined) parts.push(`state-after error ${fmt(e.stateAfter)}`);
    if (e.detached.length > 0) parts.push(`gradient where there must be none: ${e.detached.join(', ')}`);
    lines.push(`${head}  ${parts.join(', ')}`);
  }
  const count = (s: string) => report.results.filter((r) => r.status === s).length;
  lines.push(`${report.passed ? 'PASSED' : 'FAILED'}: ${count('passed')} passed, ${count('failed')} failed, ${count('skipped')} skipped`);
  return lines.join('\n');
}
