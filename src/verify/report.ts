/**
 * `ssl-train verify`'s report: the table of a {@link VerifyResult}, one row a step, and its
 * verdict line.
 */
import { decisionVerdict, formatDecisions } from './decisions.js';
import type { VerifyResult, VerifyStep } from './harness.js';
import { formatBranches, type StepBranches } from './relu-branches.js';

/** A readable table of a {@link VerifyResult}. */
export function formatVerifyResult(result: VerifyResult, method: string): string {
  const e = (x: number) => x.toExponential(2);
  const cell = (d: number, b: number) => `${e(d)} / ${e(b)}`.padEnd(21);
  const queues = result.steps.some((s) => s.queues);
  const decisions = result.steps.some((s) => s.decisions);
  const branches = result.steps.some((s) => s.branches);
  const decisionCell = (s: VerifyStep) => (decisions ? `${formatDecisions(s.decisions).padEnd(44)} ` : '');
  const branchCell = (s: VerifyStep) => (branches ? `${formatBranches(s.branches).padEnd(40)} ` : '');
  const lines = [
    `verify ${method}: ${result.worldSize} rank(s) vs one process on the same global batch`,
    `relative difference / its bound (${result.roundoffFactor} x the measured float32 round-off, at least ${e(result.tolerance)}); gradients and parameters in norm over all tensors`,
    `step  ${'loss'.padEnd(21)} ${'gradients'.padEnd(21)} ${'parameters'.padEnd(21)} ${queues ? `${'queues'.padEnd(21)} ` : ''}` +
      `${decisions ? `${'decisions (margin / bound)'.padEnd(44)} ` : ''}${branches ? `${'ReLU branches near 0 (margin / bound)'.padEnd(40)} ` : ''}` +
      `largest share (gradients; parameters${queues ? '; queues' : ''})`,
    ...result.steps.map(
      (s) =>
        `${String(s.step).padEnd(5)} ${cell(s.loss, s.lossBound)} ${cell(s.gradients, s.gradientsBound)} ${cell(s.parameters, s.parametersBound)} ` +
        `${s.queues ? `${cell(s.queues.value, s.queues.bound)} ` : ''}${decisionCell(s)}${branchCell(s)}${s.gradientsTensor}; ${s.parametersTensor}${s.queues ? `; ${s.queues.tensor}` : ''}`,
    ),
    ...result.steps.flatMap((s) => (s.decisions?.switches.length ? [formatSwitches(s)] : [])),
    verdictLine(result),
  ];
  return lines.join('\n');
}

/** A step's differing decisions: `step 2, nearest-neighbour switches (sample: W-rank pick / reference pick, margin): ...`. */
function formatSwitches(s: VerifyStep): string {
  const d = s.decisions!;
  const listed = d.switches.map((w) => `${w.row}${w.position ? `#${w.position + 1}` : ''}: ${w.ranks} / ${w.reference}, ${w.margin.toExponential(1)}`);
  const more = d.differ > d.switches.length ? `, ... (${d.differ} in all)` : '';
  return `step ${s.step}, ${d.kind} switches (sample: W-rank pick / reference pick, margin): ${listed.join('; ')}${more}`;
}

/** The last line: PASSED or FAILED, a decision or ReLU-branch failure named as one, switches within round-off counted. */
function verdictLine(result: VerifyResult): string {
  const worst = `the worst difference is ${result.worst.toFixed(2)} of its bound`;
  const e = (x: number) => x.toExponential(1);
  const verdict = decisionVerdict(result.steps.map((s) => s.decisions));
  const branches = result.steps.map((s) => s.branches).filter((b): b is StepBranches => b !== undefined && b.matched);
  const branchesBeyond = branches.filter((b) => b.beyond > 0);
  const failures = [
    ...(verdict && verdict.beyond > 0
      ? [`${verdict.beyond} ${verdict.kind} decision(s) differ by up to ${e(verdict.largest)}, beyond round-off ${e(verdict.bound)}`]
      : []),
    ...(branchesBeyond.length > 0
      ? [
          `${branchesBeyond.reduce((n, b) => n + b.beyond, 0)} ReLU branch(es) switched by up to ${e(Math.max(...branchesBeyond.map((b) => b.largestMargin)))}, ` +
            `beyond round-off ${e(Math.min(...branchesBeyond.map((b) => b.bound)))}`,
        ]
      : []),
  ];
  if (failures.length > 0) return `FAILED: ${worst}: ${failures.join('; ')}`;
  const within = [
    ...(verdict?.within ? [`${verdict.within} ${verdict.kind} decision(s)`] : []),
    ...(branches.some((b) => b.differ > 0) ? [`${branches.reduce((n, b) => n + b.differ, 0)} ReLU branch(es)`] : []),
  ];
  const switched = within.length > 0 ? `; ${within.join(' and ')} switched within round-off (replayed)` : '';
  return `${result.passed ? 'PASSED' : 'FAILED'}: ${worst}${switched}`;
}
