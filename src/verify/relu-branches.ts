/**
 * ReLU branches as decisions (docs/distributed.md, "ReLU branches"). A ReLU's gradient takes
 * one of two branches, `dy` where its input x > 0 and 0 elsewhere; an input within round-off
 * of zero takes either in two correct float32 runs, and one such switch moves a few gradient
 * entries by up to ~10% of their tensor's scale, more than the rest of the round-off together
 * (src/verify/roundoff.ts). So `verify` treats the branch of every differentiated ReLU input
 * near zero as a decision, as it treats nearest neighbours (src/verify/decisions.ts):
 *
 * - the W-rank run records, on every rank, each ReLU input within {@link NEAR_ZERO} of its
 *   tensor's largest |x| of zero, and the branch it took; its gradients are training's, untouched;
 * - the one-process runs (the reference and its twins) replay those branches at those entries
 *   (each in its own sample order) and read their own inputs there, so the continuous
 *   comparison is made given the same branches;
 * - a branch the reference's own input takes differently is a switch; its margin is that
 *   input's |x| over its tensor's largest |x|, and it is legitimate within `factor` times the
 *   largest difference between a twin's and the reference's inputs at the replayed entries
 *   (relative alike), a failure beyond.
 *
 * Only ReLUs on the gradient tape are decisions (a forward-only ReLU is continuous). The
 * entries of a call map from the ranks to the global batch by shape: an input of the same shape
 * on every rank and in the reference is global (e.g. a hinge over the global batch's statistics:
 * rank 0's entries); one whose first axis is V blocks of the local batch (views concatenated
 * along the batch, or one) holds block v's local rows at `v·N + rank·n` in the reference.
 */
import { tf, type Tensor } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { broadcastMessage, packMessage, unpackMessage } from './messages.js';
import { roundoffBound } from './roundoff.js';

/** A ReLU input within this fraction of its tensor's largest |x| of zero is recorded by the W-rank run (2^-12: ~4000 float32 ulps of the largest). */
export const NEAR_ZERO = 2 ** -12;

/** At most this many switches are listed per step (the count and the largest margin cover all). */
const LISTED_SWITCHES = 10;

/** One differentiated ReLU of a W-rank step on one rank: its input's shape, its near-zero entries (flat indices) and their branches (1: x > 0). */
export interface RankBranchCall {
  shape: number[];
  index: Int32Array;
  taken: Float32Array;
}

/** A W-rank step's ReLU calls on every rank (`ranks[r][c]`: rank r's call c), the same on every rank after {@link gatherBranches}. */
export interface GatheredBranches {
  ranks: RankBranchCall[][];
  /** Each rank's samples per micro-batch. */
  localBatch: number;
}

/** What a one-process run read at the replayed entries of a step: per call, its inputs there and its largest |x|. */
export interface ReplayedBranches {
  at: Float32Array[];
  scale: number[];
  /** The replayed branches, per call, in the order of `at` (the same in every run: rank 0 compares the reference's). */
  taken: Float32Array[];
  /** Whether a call could not be mapped to the W-rank run's (it took its own branches there). */
  unmatched: boolean;
}

/** A step's ReLU branches in a verify step: how many near-zero inputs, how many switched, their largest margin, its bound. */
export interface StepBranches {
  /** Near-zero ReLU inputs the W-rank run recorded (over every rank and call). */
  total: number;
  differ: number;
  /** Of those, the ones whose margin exceeds the bound (failures). */
  beyond: number;
  largestMargin: number;
  bound: number;
  /** The first switches: call (in backward order), entry (its place among the call's replayed entries, rank by rank) and margin. */
  switches: Array<{ call: number; entry: number; margin: number }>;
  /** False when the one-process runs' ReLU calls could not be matched to the W-rank run's (nothing was replayed). */
  matched: boolean;
}

/** What the `Relu` gradient consults while a step is watched. */
interface BranchWatcher {
  /** Called with each differentiated ReLU's input; returns the 0/1 branch mask to use, or undefined for the gradient's own. */
  branches(x: Tensor): Tensor | undefined;
}

let watching: BranchWatcher | undefined;
let original: tf.GradConfig | undefined;

/** Routes the `Relu` gradient through the watcher of {@link watchBranches} (idempotent; the current gradient stays in use when nothing watches). */
export function installBranchWatch(): void {
  if (original !== undefined) return;
  const current = tf.getGradient('Relu');
  if (current == null) throw new Error('verify: no gradient is registered for Relu');
  original = current;
  tf.registerGradient({
    kernelName: 'Relu',
    inputsToSave: ['x'],
    gradFunc: (dy, saved, attrs) => {
      const mask = watching?.branches(saved[0]!);
      return mask ? { x: () => tf.mul(dy as Tensor, mask) } : current.gradFunc(dy, saved, attrs);
    },
  });
}

/** Puts the `Relu` gradient of before {@link installBranchWatch} back. */
export function uninstallBranchWatch(): void {
  if (original === undefined) return;
  tf.registerGradient(original);
  original = undefined;
}

/** Runs `fn` (one step of a run) with `watcher` consulted by every `Relu` gradient. */
export async function watchBranches<T>(watcher: BranchWatcher, fn: () => Promise<T>): Promise<T> {
  watching = watcher;
  try {
    return await fn();
  } finally {
    watching = undefined;
  }
}

/**
 * The W-rank run's recorder: notes each ReLU input's near-zero entries and branches; its
 * gradients stay the gradient's own. Each input is read back asynchronously as soon as the
 * event loop turns (between micro-batches) and scanned in one pass: no tensor op of its own,
 * and nothing held beyond the buffer the tape already holds.
 */
export class BranchRecorder implements BranchWatcher {
  private pending: Array<Promise<RankBranchCall>> = [];

  branches(x: Tensor): undefined {
    const input = tf.keep(tf.clone(x));
    const call = input
      .data<'float32'>()
      .then((values) => nearZeroEntries(input.shape.slice(), values))
      .finally(() => input.dispose());
    call.catch(() => undefined); // awaited by takeStep; a step abandoned by an error must not warn of an unhandled rejection
    this.pending.push(call);
    return undefined;
  }

  /** The step's calls in order; clears the recorder. */
  async takeStep(): Promise<RankBranchCall[]> {
    const pending = this.pending;
    this.pending = [];
    return Promise.all(pending);
  }

  /** Drops the calls not taken (their inputs are released once read). */
  dispose(): void {
    this.pending = [];
  }
}

/** The entries of a ReLU input (`values`, of `shape`) within {@link NEAR_ZERO} of its largest |x| of zero, and their branches (1: x > 0). */
function nearZeroEntries(shape: number[], values: Float32Array): RankBranchCall {
  let largest = 0;
  for (let i = 0; i < values.length; i++) {
    const magnitude = Math.abs(values[i]!);
    if (magnitude > largest) largest = magnitude;
  }
  const threshold = largest * NEAR_ZERO; // exact: a power of two times a float32
  const index: number[] = [];
  for (let i = 0; i < values.length; i++) if (Math.abs(values[i]!) <= threshold) index.push(i);
  return { shape, index: Int32Array.from(index), taken: Float32Array.from(index, (i) => (values[i]! > 0 ? 1 : 0)) };
}

/** Every rank's calls on every rank: each rank's in one broadcast, rank by rank (every rank calls it; several ranks only, as the recorder). */
export function gatherBranches(calls: RankBranchCall[], localBatch: number, group: ProcessGroup): GatheredBranches {
  const mine = packMessage(
    calls.map((c) => c.shape),
    calls.flatMap((c) => [c.index, c.taken]),
  );
  const ranks = Array.from({ length: group.worldSize }, (_, r) => {
    const { header, arrays } = unpackMessage<number[][]>(broadcastMessage(group.rank === r ? mine : undefined, r, group));
    return header.map((shape, c) => ({ shape, index: arrays[2 * c] as Int32Array, taken: arrays[2 * c + 1] as Float32Array }));
  });
  return { ranks, localBatch };
}

const sameShape = (a: number[], b: number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

/**
 * Call `c`'s W-rank entries as flat indices into a one-process run's input of shape `shape`
 * (rank by rank, each rank's in its order: the same list for every run), with their branches;
 * `order`: the run's sample order for this call's micro-batch (row i is global sample
 * `order[i]`; none for the reference). Undefined when the shapes do not map (see the module
 * comment).
 */
export function replayEntries(
  gathered: GatheredBranches,
  c: number,
  shape: number[],
  order?: Int32Array,
): { index: Int32Array; taken: Float32Array } | undefined {
  const calls = gathered.ranks.map((r) => r[c]);
  if (calls.some((call) => call === undefined)) return undefined;
  const ranks = calls as RankBranchCall[];
  if (ranks.every((call) => sameShape(call.shape, shape))) return { index: ranks[0]!.index, taken: ranks[0]!.taken };
  const n = gathered.localBatch;
  const W = ranks.length;
  const rows = ranks[0]!.shape[0] ?? 0;
  const blocks = rows / n;
  if (!Number.isInteger(blocks) || blocks < 1 || shape[0] !== blocks * W * n) return undefined;
  if (!ranks.every((call) => sameShape(call.shape, ranks[0]!.shape)) || !sameShape(shape.slice(1), ranks[0]!.shape.slice(1))) return undefined;
  const rowSize = shape.slice(1).reduce((a, b) => a * b, 1);
  const runSample = new Int32Array(W * n).map((_, g) => g);
  if (order) order.forEach((global, i) => (runSample[global] = i));
  const total = ranks.reduce((m, call) => m + call.index.length, 0);
  const index = new Int32Array(total);
  const taken = new Float32Array(total);
  let at = 0;
  ranks.forEach((call, r) => {
    for (let e = 0; e < call.index.length; e++, at++) {
      const flat = call.index[e]!;
      const row = Math.floor(flat / rowSize);
      const block = Math.floor(row / n);
      index[at] = (block * W * n + runSample[r * n + (row % n)]!) * rowSize + (flat % rowSize);
      taken[at] = call.taken[e]!;
    }
  });
  return { index, taken };
}

/**
 * A one-process run's replayer: at each ReLU call, the W-rank run's branches at its near-zero
 * entries (mapped to this run's input by {@link replayEntries}), the run's own elsewhere; reads
 * its inputs at those entries. A twin's calls split evenly over its micro-batches, each in
 * its sample order ({@link inOrders}).
 */
export class BranchReplayer implements BranchWatcher {
  private calls = 0;
  private pending: Array<{ at: Tensor; scale: Tensor; taken: Float32Array }> = [];
  private unmatchedCall = false;

  private orders: Int32Array[] = [];

  constructor(private readonly gathered: GatheredBranches) {}

  /** The run's sample order per micro-batch (a twin's, known once its batches are drawn). */
  inOrders(orders: Int32Array[]): void {
    this.orders = orders;
  }

  branches(x: Tensor): Tensor | undefined {
    const c = this.calls++;
    const perBatch = (this.gathered.ranks[0]?.length ?? 0) / Math.max(this.orders.length, 1);
    const entries = replayEntries(this.gathered, c, x.shape, this.orders[Math.floor(c / perBatch)]);
    if (!entries) {
      this.unmatchedCall = true;
      return undefined;
    }
    const m = entries.index.length;
    const [mask, at, scale] = tf.tidy(() => {
      const flat = tf.reshape(x, [-1]);
      const own = tf.step(flat);
      const index = tf.tensor1d(entries.index, 'int32');
      const replayed = m === 0 ? own : tf.tensorScatterUpdate(own, tf.reshape(index, [m, 1]), tf.tensor1d(entries.taken));
      return [tf.reshape(replayed, x.shape), tf.gather(flat, index), tf.max(tf.abs(flat))];
    });
    this.pending.push({ at: tf.keep(at), scale: tf.keep(scale), taken: entries.taken });
    return mask;
  }

  /** What the step read, asynchronously; the replayer is then spent. */
  async takeStep(): Promise<ReplayedBranches> {
    const pending = this.pending;
    this.pending = [];
    const unmatched = this.unmatchedCall || this.calls !== (this.gathered.ranks[0]?.length ?? 0);
    try {
      const at = await Promise.all(pending.map(async (p) => Float32Array.from(await p.at.data<'float32'>())));
      const scale = await Promise.all(pending.map(async (p) => (await p.scale.data<'float32'>())[0]!));
      return { at, scale, taken: pending.map((p) => p.taken), unmatched };
    } finally {
      this.dispose(pending);
    }
  }

  dispose(pending = this.pending): void {
    for (const p of pending) tf.dispose([p.at, p.scale]);
    if (pending === this.pending) this.pending = [];
  }
}

/**
 * Compares a step's ReLU branches: the reference's own branch at each replayed entry against
 * the W-rank run's (`reference.taken`), its margin against `factor` times the largest difference
 * between a twin's input and the reference's at the replayed entries, both relative to the
 * reference's largest |x| of the call, at least `tolerance`. Undefined when no ReLU was differentiated.
 */
export function compareBranches(
  gathered: GatheredBranches,
  reference: ReplayedBranches,
  twins: ReplayedBranches[],
  factor: number,
  tolerance: number,
): StepBranches | undefined {
  const calls = gathered.ranks[0]?.length ?? 0;
  if (calls === 0) return undefined;
  const total = reference.taken.reduce((n, t) => n + t.length, 0);
  const none: StepBranches = { total, differ: 0, beyond: 0, largestMargin: 0, bound: tolerance, switches: [], matched: false };
  if ([reference, ...twins].some((r) => r.unmatched || r.at.length !== calls)) return none;
  const relative = (v: number, c: number) => (reference.scale[c]! > 0 ? v / reference.scale[c]! : v);
  let roundoff = 0;
  for (const twin of twins) {
    twin.at.forEach((values, c) => {
      const ref = reference.at[c]!;
      for (let e = 0; e < values.length; e++) roundoff = Math.max(roundoff, relative(Math.abs(values[e]! - ref[e]!), c));
    });
  }
  const result: StepBranches = { ...none, bound: roundoffBound(roundoff, factor, tolerance), matched: true };
  reference.at.forEach((values, c) => {
    const taken = reference.taken[c]!;
    for (let e = 0; e < values.length; e++) {
      if ((values[e]! > 0 ? 1 : 0) === taken[e]) continue;
      const margin = relative(Math.abs(values[e]!), c);
      result.differ++;
      if (margin > result.bound) result.beyond++;
      result.largestMargin = Math.max(result.largestMargin, margin);
      if (result.switches.length < LISTED_SWITCHES) result.switches.push({ call: c, entry: e, margin });
    }
  });
  return result;
}

/** The `ReLU branches` cell of a step: `k/n switched` (near-zero inputs), with the largest margin and its bound when some did, or `not matched`. */
export function formatBranches(b: StepBranches | undefined): string {
  if (!b) return '';
  if (!b.matched) return 'not matched';
  const e = (x: number) => x.toExponential(2);
  return `${b.differ}/${b.total} switched${b.differ > 0 ? `, ${e(b.largestMargin)} / ${e(b.bound)}` : ''}`;
}
