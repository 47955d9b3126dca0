/**
 * `verify`'s one-process runs, on rank 0 or spread over the first k ranks (`--one-process-ranks
 * k`): after each W-rank step, the reference (run 0) and its round-off twins (runs 1 to
 * {@link ROUNDOFF_TWINS}) each take the step on the whole global batch, run j on rank j mod k,
 * every one from rank 0's state before the step;
 * rank 0 then receives every run's result (loss, gradients, state after, decisions, ReLU branches) and
 * compares. Each rank holds one one-process model and optimizer besides its W-rank one,
 * stepped once per run it owns (no copy per twin), and over k ranks the runs take the time of
 * ceil(5 / k) full-batch steps instead of 5, for k times the memory of one (on one host: every
 * such rank holds a global batch's activations). Where a run takes place changes no bit of its
 * result: each rank runs the same code from the same state with the same thread count.
 */
import type { ProcessGroup } from '../core/process-group.js';
import type { ReplayedCall } from './decisions.js';
import { broadcastMessage, packMessage, unpackMessage, type MessageArray } from './messages.js';
import type { ReplayedBranches } from './relu-branches.js';
import { ROUNDOFF_TWINS } from './roundoff.js';
import type { HostTensor, RunState, StateArrays, StepResult } from './steps.js';

/** The one-process runs of a step: the reference and its twins. */
export const ONE_PROCESS_RUNS = 1 + ROUNDOFF_TWINS;

/** The one-process runs (0: the reference, t + 1: twin t) that `rank` takes when the first `spread` ranks run them. */
export function runsOfRank(rank: number, spread: number): number[] {
  return Array.from({ length: ONE_PROCESS_RUNS }, (_, j) => j).filter((j) => j % spread === rank);
}

/** A one-process run's step as rank 0 compares it: loss, gradients, state after, decisions. */
export interface OneProcessOut extends StepResult {
  state: StateArrays;
  /** The step's decision calls (the reference's in full; a twin's as far as the comparison reads them). */
  calls: ReplayedCall[];
  /** The sample order of each micro-batch (twins; empty for the reference). */
  orders: Int32Array[];
  /** Whether a call could not replay the W-rank run's (it chose freely). */
  unmatched: boolean;
  /** What the run read at the W-rank run's replayed ReLU branches (several ranks only). */
  branches?: ReplayedBranches;
}

/** Rank 0's `state` on every rank when the first `spread` ranks run one-process runs (every rank calls it; rank 0 passes its state). */
export function shareRunState(state: RunState | undefined, group: ProcessGroup, spread: number): RunState | undefined {
  if (group.worldSize === 1 || spread === 1) return state;
  type Header = { model: Array<[string, number[]]>; slots: Array<[string, number[]]>; meta: unknown };
  const entries = (tensors: Record<string, HostTensor>) => Object.entries(tensors);
  const message =
    group.rank === 0
      ? packMessage(
          {
            model: entries(state!.model).map(([name, t]) => [name, t.shape]),
            slots: entries(state!.slots).map(([name, t]) => [name, t.shape]),
            meta: state!.meta,
          } satisfies Header,
          [...entries(state!.model), ...entries(state!.slots)].map(([, t]) => t.values),
        )
      : undefined;
  if (group.rank === 0) {
    broadcastMessage(message, 0, group);
    return state!;
  }
  const { header, arrays } = unpackMessage<Header>(broadcastMessage(undefined, 0, group));
  let at = 0;
  const tensors = (list: Array<[string, number[]]>) => Object.fromEntries(list.map(([name, shape]) => [name, { values: arrays[at++]!, shape }]));
  return { model: tensors(header.model), slots: tensors(header.slots), meta: header.meta };
}

/**
 * Every one-process run's result on rank 0, in run order (undefined on the other ranks). Every
 * rank calls it with the results of the runs it owns ({@link runsOfRank} of `spread`); each run
 * owned by another rank than 0 travels in one broadcast from its owner.
 */
export function collectOnRankZero(mine: Map<number, OneProcessOut>, group: ProcessGroup, spread: number): OneProcessOut[] | undefined {
  const outs: OneProcessOut[] = [];
  for (let j = 0; j < ONE_PROCESS_RUNS; j++) {
    const owner = j % spread;
    if (owner === 0) {
      if (group.rank === 0) outs.push(mine.get(j)!);
      continue;
    }
    const received = broadcastMessage(group.rank === owner ? packOut(mine.get(j)!) : undefined, owner, group);
    if (group.rank === 0) outs.push(unpackOut(received));
  }
  return group.rank === 0 ? outs : undefined;
}

interface OutHeader {
  loss: number;
  unmatched: boolean;
  grads: string[];
  state: string[];
  calls: Array<{ batchRows: boolean; rows: number; k: number }>;
  orders: number;
  branches?: { scale: number[]; unmatched: boolean; calls: number };
}

function packOut(out: OneProcessOut): Float32Array {
  const header: OutHeader = {
    loss: out.loss,
    unmatched: out.unmatched,
    grads: Object.keys(out.grads),
    state: Object.keys(out.state),
    calls: out.calls.map(({ batchRows, rows, k }) => ({ batchRows, rows, k })),
    orders: out.orders.length,
    ...(out.branches && { branches: { scale: out.branches.scale, unmatched: out.branches.unmatched, calls: out.branches.at.length } }),
  };
  const branches = out.branches ? [...out.branches.at, ...out.branches.taken] : [];
  const arrays: MessageArray[] = [...Object.values(out.grads), ...Object.values(out.state), ...out.calls.map((c) => c.usedScores), ...out.orders, ...branches];
  return packMessage(header, arrays);
}

function unpackOut(message: Float32Array): OneProcessOut {
  const { header, arrays } = unpackMessage<OutHeader>(message);
  let at = 0;
  const next = () => arrays[at++]!;
  const grads = Object.fromEntries(header.grads.map((name) => [name, next() as Float32Array]));
  const state = Object.fromEntries(header.state.map((name) => [name, next()]));
  const calls = header.calls.map((c) => ({ ...c, usedScores: next() as Float32Array }));
  const orders = Array.from({ length: header.orders }, () => next() as Int32Array);
  const b = header.branches;
  const floats = (n: number) => Array.from({ length: n }, () => next() as Float32Array);
  const branches = b && { scale: b.scale, unmatched: b.unmatched, at: floats(b.calls), taken: floats(b.calls) };
  return { loss: header.loss, unmatched: header.unmatched, grads, state, calls, orders, ...(branches && { branches }) };
}
