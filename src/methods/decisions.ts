/**
 * The discrete choices a method makes in a training step (the nearest neighbours in a support
 * set, a k-means assignment: top-k or top-1 by score), made in one place so that `ssl-train verify` can record and
 * replay them (docs/distributed.md, "Decisions"). In training no recorder is attached and a
 * choice is the plain `topk`/`argMax` on the device: nothing is read back, nothing waits.
 */
import { tf, type Tensor, type Tensor2D } from '../core/tf.js';

/**
 * One recorded choice call on the host: `rows` rows, each choosing `k` entries of the scored
 * set, flattened row-major (`[rows, k]`).
 */
export interface DecisionCall {
  /** What chose (e.g. `nearest-neighbour`), for reports. */
  kind: string;
  /** Whether the rows are the step's batch samples in its order (a support-set lookup), not rows of a bank indexed by sample (k-means). */
  batchRows: boolean;
  rows: number;
  k: number;
  /** `[rows, k]` the entries the scores pick (best first): this run's own decisions. */
  free: Int32Array;
  /** `[rows, k + 1]` the scores of the k + 1 best entries, best first (the last is `-Infinity` when there are only k entries). */
  topScores: Float32Array;
  /** `[rows, k]` the entries used: `free`, or the replayed ones. */
  used: Int32Array;
  /** `[rows, k]` this run's scores of the entries used. */
  usedScores: Float32Array;
}

/** A call's device results until the step ends (read back asynchronously by {@link DecisionRecorder.takeStep}). */
interface PendingCall {
  kind: string;
  batchRows: boolean;
  rows: number;
  k: number;
  free: Tensor;
  topScores: Tensor;
  used: Tensor;
  usedScores: Tensor;
}

/**
 * Records every choice of a run (and, when given a step's decisions to replay, uses those
 * instead of its own), for `verify`: attach it to a method's choosing modules (see
 * `FeatureQueue.decisions`), run a step, {@link takeStep}. The calls of a step are matched to
 * the replayed ones in order; a call whose row count or k differs from the next replayed call
 * (or one beyond them) chooses freely and marks the step {@link unmatched}.
 */
export class DecisionRecorder {
  private pending: PendingCall[] = [];
  private replay: Array<{ used: Int32Array; rows: number; k: number }> | undefined;
  private unmatchedCall = false;

  /** Replays `calls` (each `[rows, k]` entries) in the coming step's calls, in order. */
  replayNext(calls: Array<{ used: Int32Array; rows: number; k: number }>): void {
    this.replay = calls;
  }

  /**
   * The `k` best entries of each row of `scores` `[rows, K]` (best first; `[rows, k]` int32),
   * or the replayed ones; records both with their scores. `batchRows`: the rows are the step's
   * batch samples (see {@link DecisionCall}). Call it off the gradient tape.
   */
  choose(kind: string, scores: Tensor2D, k: number, batchRows = true): Tensor2D {
    const [rows, entries] = scores.shape;
    const call = this.pending.length;
    const forced = this.replay?.[call];
    const matches = forced !== undefined && forced.rows === rows && forced.k === k;
    if (this.replay && !matches) this.unmatchedCall = true;
    const top = tf.topk(scores, Math.min(k + 1, entries));
    const free = tf.slice(top.indices, [0, 0], [rows, k]) as Tensor2D;
    const topScores = k + 1 <= entries ? top.values : tf.concat([top.values, tf.fill([rows, 1], -Infinity)], 1);
    const used = matches ? tf.tensor2d(forced.used, [rows, k], 'int32') : free;
    const at = tf.stack([tf.tile(tf.reshape(tf.range(0, rows, 1, 'int32'), [rows, 1]), [1, k]), used], 2);
    const usedScores = tf.gatherND(scores, at);
    this.pending.push({ kind, batchRows, rows, k, free: tf.keep(free), topScores: tf.keep(topScores), used: tf.keep(used), usedScores: tf.keep(usedScores) });
    tf.dispose([top.indices, at, ...(topScores === top.values ? [] : [top.values])]);
    return tf.clone(used) as Tensor2D;
  }

  /** Whether a call of the step just taken could not be matched to a replayed one (it chose freely). */
  get unmatched(): boolean {
    return this.unmatchedCall;
  }

  /** The step's calls, read back asynchronously; clears the recorder (and the replay) for the next step. */
  async takeStep(): Promise<DecisionCall[]> {
    const pending = this.pending;
    this.pending = [];
    this.replay = undefined;
    this.unmatchedCall = false;
    try {
      return await Promise.all(
        pending.map(async (p) => ({
          kind: p.kind,
          batchRows: p.batchRows,
          rows: p.rows,
          k: p.k,
          free: Int32Array.from(await p.free.data<'int32'>()),
          topScores: Float32Array.from(await p.topScores.data<'float32'>()),
          used: Int32Array.from(await p.used.data<'int32'>()),
          usedScores: Float32Array.from(await p.usedScores.data<'float32'>()),
        })),
      );
    } finally {
      for (const p of pending) disposeCall(p);
    }
  }

  /** Frees what was recorded and not taken. */
  dispose(): void {
    for (const p of this.pending) disposeCall(p);
    this.pending = [];
  }
}

function disposeCall(p: PendingCall): void {
  tf.dispose([...new Set([p.free, p.topScores, p.used, p.usedScores])]);
}
