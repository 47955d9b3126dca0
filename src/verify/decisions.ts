/**
 * `verify`'s comparison of discrete decisions (docs/distributed.md, "Decisions"): the W-rank
 * run records every choice of a step (src/methods/decisions.ts), gathered in global-batch order
 * on rank 0; the one-process reference and its round-off twins replay those choices, so the
 * continuous comparison is made given the same decisions, and record their own free choices
 * and scores beside them. A decision the reference would make differently is a legitimate
 * switch when its margin (the reference's best score minus its score of the W-rank run's pick)
 * is within the round-off of the scores the twins measure; beyond it, a failure.
 */
import type { ProcessGroup } from '../core/process-group.js';
import type { BaseMethod } from '../methods/base.js';
import { DecisionRecorder, type DecisionCall } from '../methods/decisions.js';
import { roundoffBound } from './roundoff.js';

/** At most this many differing decisions are listed per step (the count and the largest margin cover all). */
const LISTED_SWITCHES = 20;

/** One decision the reference would make differently from the W-rank run. */
export interface DecisionSwitch {
  /** The choice call of the step (in call order) and its row (the sample, in global-batch order) and rank among its k choices. */
  call: number;
  row: number;
  position: number;
  /** The entry the W-rank run chose (and every one-process run replayed). */
  ranks: number;
  /** The entry the reference's own scores choose. */
  reference: number;
  /** The reference's score of its own choice minus its score of the W-rank run's. */
  margin: number;
}

/** A step's decisions in a {@link VerifyStep}: how many differ, their largest margin, its bound. */
export interface StepDecisions {
  /** What chose (e.g. `nearest-neighbour`). */
  kind: string;
  /** Decisions made in the step (rows × k over all calls). */
  total: number;
  /** Decisions the reference's own scores make differently. */
  differ: number;
  /** Of those, the ones whose margin exceeds the bound (failures). */
  beyond: number;
  /** The largest margin among those that differ (0 when none). */
  largestMargin: number;
  /** `factor` × the largest difference between a twin's and the reference's scores of the replayed entries, at least the tolerance. */
  bound: number;
  /** The smallest gap between consecutive best scores in the reference (how close its nearest tie was). */
  closestTie: number;
  /** The first {@link LISTED_SWITCHES} differing decisions. */
  switches: DecisionSwitch[];
  /** False when the one-process runs' calls could not be matched to the W-rank run's (then nothing is replayed or compared). */
  matched: boolean;
}

/** A new recorder attached to every choosing module of `method` (its queues). */
export function attachRecorder(method: BaseMethod): DecisionRecorder {
  const recorder = new DecisionRecorder();
  for (const [, queue] of method.queues()) queue.decisions = recorder;
  return recorder;
}

/**
 * The W-rank run's calls of a step with every rank's rows, in rank order (so in global-batch
 * order), on every rank: one all-gather of all calls (every rank makes the same calls with its
 * local batch). Entries travel as float32, exact below 2^24.
 */
export function gatherDecisions(calls: DecisionCall[], group: ProcessGroup): DecisionCall[] {
  if (group.worldSize === 1 || calls.length === 0) return calls;
  const parts = (c: DecisionCall) => [c.free, c.used, c.usedScores, c.topScores] as const;
  const local = new Float32Array(calls.reduce((n, c) => n + c.rows * (4 * c.k + 1), 0));
  let at = 0;
  for (const c of calls) for (const p of parts(c)) for (const v of p) local[at++] = v;
  const gathered = group.allGather(local);
  const W = group.worldSize;
  const out = calls.map((c) => {
    const rows = c.rows * W;
    return {
      ...c,
      rows,
      free: new Int32Array(rows * c.k),
      used: new Int32Array(rows * c.k),
      usedScores: new Float32Array(rows * c.k),
      topScores: new Float32Array(rows * (c.k + 1)),
    };
  });
  for (let r = 0; r < W; r++) {
    let offset = r * local.length;
    calls.forEach((c, i) => {
      for (const [j, target] of parts(out[i]!).entries()) {
        const width = j === 3 ? c.k + 1 : c.k;
        target.set(gathered.subarray(offset, offset + c.rows * width), r * c.rows * width);
        offset += c.rows * width;
      }
    });
  }
  return out;
}

/**
 * What a one-process run replays of the W-rank run's calls `ranks`: their choices, with rows
 * in the run's sample order (`orders`: per micro-batch, row i of the run is row `order[i]` of
 * the global batch; none for the reference). The calls split evenly over the micro-batches.
 */
export function replayOf(ranks: DecisionCall[], orders?: Int32Array[]): Array<{ used: Int32Array; rows: number; k: number }> {
  const perBatch = orders ? ranks.length / orders.length : 0;
  return ranks.map((c, i) => {
    const order = orders?.[Math.floor(i / perBatch)];
    if (!order || order.length !== c.rows) return { used: c.used, rows: c.rows, k: c.k };
    const used = new Int32Array(c.used.length);
    order.forEach((from, row) => used.set(c.used.subarray(from * c.k, (from + 1) * c.k), row * c.k));
    return { used, rows: c.rows, k: c.k };
  });
}

/** Whether `a` and `b` are the same calls in number and shape. */
function sameCalls(a: DecisionCall[], b: DecisionCall[]): boolean {
  return a.length === b.length && a.every((c, i) => c.rows === b[i]!.rows && c.k === b[i]!.k);
}

/**
 * Compares a step's decisions: the W-rank run's `ranks` (gathered), the reference's
 * `reference` (which replayed them) and each twin's (`twins`, with the sample orders of its
 * micro-batches, also replayed). `matched`: whether every one-process run could replay every
 * call. Returns undefined when the step made no decision.
 */
export function compareDecisions(
  ranks: DecisionCall[],
  reference: DecisionCall[],
  twins: Array<{ calls: DecisionCall[]; orders: Int32Array[] }>,
  factor: number,
  tolerance: number,
  matched: boolean,
): StepDecisions | undefined {
  if (ranks.length === 0 && reference.length === 0) return undefined;
  const kind = (ranks[0] ?? reference[0])!.kind;
  const total = ranks.reduce((n, c) => n + c.rows * c.k, 0);
  const none = { kind, total, differ: 0, beyond: 0, largestMargin: 0, bound: tolerance, closestTie: Infinity, switches: [] };
  if (!matched || !sameCalls(ranks, reference) || twins.some((t) => !sameCalls(t.calls, reference))) return { ...none, matched: false };
  let roundoff = 0;
  for (const { calls, orders } of twins) {
    const perBatch = calls.length / orders.length;
    calls.forEach((c, i) => {
      const order = orders[Math.floor(i / perBatch)]!;
      const ref = reference[i]!;
      for (let row = 0; row < c.rows; row++) {
        for (let p = 0; p < c.k; p++) {
          roundoff = Math.max(roundoff, Math.abs(c.usedScores[row * c.k + p]! - ref.usedScores[order[row]! * c.k + p]!));
        }
      }
    });
  }
  const result: StepDecisions = { ...none, bound: roundoffBound(roundoff, factor, tolerance), matched: true };
  reference.forEach((ref, i) => {
    const w = ranks[i]!;
    for (let row = 0; row < ref.rows; row++) {
      for (let p = 0; p < ref.k; p++) {
        const top = ref.topScores[row * (ref.k + 1) + p]!;
        result.closestTie = Math.min(result.closestTie, top - ref.topScores[row * (ref.k + 1) + p + 1]!);
        const at = row * ref.k + p;
        if (w.used[at] === ref.free[at]) continue;
        const margin = Math.abs(top - ref.usedScores[at]!);
        result.differ++;
        if (margin > result.bound) result.beyond++;
        result.largestMargin = Math.max(result.largestMargin, margin);
        if (result.switches.length < LISTED_SWITCHES) result.switches.push({ call: i, row, position: p, ranks: w.used[at]!, reference: ref.free[at]!, margin });
      }
    }
  });
  return result;
}

/** The `decisions` cell of a step: `0 differ`, `k differ, largest margin m / b`, or `not matched`. */
export function formatDecisions(d: StepDecisions | undefined): string {
  if (!d) return '';
  if (!d.matched) return 'not matched';
  const e = (x: number) => x.toExponential(2);
  return d.differ === 0 ? '0 differ' : `${d.differ} differ, largest margin ${e(d.largestMargin)} / ${e(d.bound)}`;
}

/**
 * The verdict on the decisions of all steps: how many differ beyond their bound (failures),
 * the largest margin among them and the smallest bound, and how many switched within it.
 */
export function decisionVerdict(
  steps: Array<StepDecisions | undefined>,
): { kind: string; beyond: number; largest: number; bound: number; within: number } | undefined {
  const all = steps.filter((d): d is StepDecisions => d !== undefined && d.matched);
  if (all.length === 0) return undefined;
  const verdict = { kind: all[0]!.kind, beyond: 0, largest: 0, bound: Infinity, within: 0 };
  for (const d of all) {
    verdict.beyond += d.beyond;
    verdict.within += d.differ - d.beyond;
    if (d.beyond > 0) {
      verdict.largest = Math.max(verdict.largest, d.largestMargin);
      verdict.bound = Math.min(verdict.bound, d.bound);
    }
  }
  return verdict;
}
