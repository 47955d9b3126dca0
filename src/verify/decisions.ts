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
import { ClusterMemory } from '../methods/cluster-memory.js';
import { DecisionRecorder, type DecisionCall } from '../methods/decisions.js';
import { roundoffBound } from './roundoff.js';

/** What the comparison reads of a decision call a round-off twin made while replaying. */
export type ReplayedCall = Pick<DecisionCall, 'batchRows' | 'rows' | 'k' | 'usedScores'>;

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

/** A new recorder attached to every choosing module of `method` (its support sets' lookups, its k-means). */
export function attachRecorder(method: BaseMethod): DecisionRecorder {
  const recorder = new DecisionRecorder();
  for (const [, queue] of method.queues()) queue.decisions = recorder;
  for (const [, memory] of method.memoryModules()) if (memory instanceof ClusterMemory) memory.decisions = recorder;
  return recorder;
}

/**
 * The W-rank run's calls of a step with every rank's rows, in rank order (so in global-batch
 * order, and a k-means E step's shards in bank order), on every rank. Every rank makes the same
 * calls, a lookup with its local batch, an E step with its shard (whose sizes may differ by
 * one): one all-gather of the row counts, then one of all calls, padded to the longest rank.
 * Entries travel as float32, exact below 2^24.
 */
export function gatherDecisions(calls: DecisionCall[], group: ProcessGroup): DecisionCall[] {
  const W = group.worldSize;
  if (W === 1 || calls.length === 0) return calls;
  const counts = group.allGather(Float32Array.from(calls, (c) => c.rows));
  const rowsOf = (r: number, i: number) => counts[r * calls.length + i]!;
  const widths = (c: DecisionCall) => [c.k, c.k, c.k, c.k + 1];
  const length = (r: number) => calls.reduce((n, c, i) => n + rowsOf(r, i) * (4 * c.k + 1), 0);
  const longest = Math.max(...Array.from({ length: W }, (_, r) => length(r)));
  const local = new Float32Array(longest);
  let at = 0;
  for (const c of calls) for (const part of [c.free, c.used, c.usedScores, c.topScores]) for (const v of part) local[at++] = v;
  const gathered = group.allGather(local);
  const out = calls.map((c, i) => {
    const rows = Array.from({ length: W }, (_, r) => rowsOf(r, i)).reduce((a, b) => a + b, 0);
    const parts = widths(c).map((w, j) => (j < 2 ? new Int32Array(rows * w) : new Float32Array(rows * w)));
    return {
      call: {
        ...c,
        rows,
        free: parts[0] as Int32Array,
        used: parts[1] as Int32Array,
        usedScores: parts[2] as Float32Array,
        topScores: parts[3] as Float32Array,
      },
      parts,
    };
  });
  const filled = calls.map(() => [0, 0, 0, 0]);
  for (let r = 0; r < W; r++) {
    let offset = r * longest;
    calls.forEach((c, i) => {
      widths(c).forEach((w, j) => {
        const n = rowsOf(r, i) * w;
        out[i]!.parts[j]!.set(gathered.subarray(offset, offset + n), filled[i]![j]!);
        filled[i]![j]! += n;
        offset += n;
      });
    });
  }
  return out.map((o) => o.call);
}

/** The sample order of each batch call (`orders[m]` for the calls of micro-batch m, the batch calls split evenly); none for bank rows. */
function callOrders(calls: Array<Pick<DecisionCall, 'batchRows'>>, orders: Int32Array[]): Array<Int32Array | undefined> {
  const batchCalls = calls.filter((c) => c.batchRows).length;
  const perBatch = batchCalls / Math.max(orders.length, 1);
  let seen = 0;
  return calls.map((c) => (c.batchRows ? orders[Math.floor(seen++ / perBatch)] : undefined));
}

/**
 * What a one-process run replays of the W-rank run's calls `ranks`: their choices, with rows
 * in the run's sample order (`orders`: per micro-batch, row i of the run is row `order[i]` of
 * the global batch; none for the reference). The batch calls split evenly over the
 * micro-batches; a k-means call's rows are the bank's, the same in every run.
 */
export function replayOf(ranks: DecisionCall[], orders?: Int32Array[]): Array<{ used: Int32Array; rows: number; k: number }> {
  const ordered = orders ? callOrders(ranks, orders) : [];
  return ranks.map((c, i) => {
    const order = ordered[i];
    if (!order || order.length !== c.rows) return { used: c.used, rows: c.rows, k: c.k };
    const used = new Int32Array(c.used.length);
    order.forEach((from, row) => used.set(c.used.subarray(from * c.k, (from + 1) * c.k), row * c.k));
    return { used, rows: c.rows, k: c.k };
  });
}

/** Whether `a` and `b` are the same calls in number and shape. */
function sameCalls(a: Array<Pick<DecisionCall, 'rows' | 'k'>>, b: Array<Pick<DecisionCall, 'rows' | 'k'>>): boolean {
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
  twins: Array<{ calls: ReplayedCall[]; orders: Int32Array[] }>,
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
    const ordered = callOrders(calls, orders);
    calls.forEach((c, i) => {
      const order = ordered[i];
      const ref = reference[i]!;
      for (let row = 0; row < c.rows; row++) {
        const refRow = order ? order[row]! : row;
        for (let p = 0; p < c.k; p++) {
          roundoff = Math.max(roundoff, Math.abs(c.usedScores[row * c.k + p]! - ref.usedScores[refRow * c.k + p]!));
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
