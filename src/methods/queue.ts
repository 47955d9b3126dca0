import { withoutGradientTape } from '../core/layers.js';
import { Module } from '../core/module.js';
import { detach, l2NormalizeRows } from '../core/ops.js';
import type { Rng } from '../core/random.js';
import { tf, type Tensor, type Tensor1D, type Tensor2D, type Variable } from '../core/tf.js';
import { batchLayout, gatherConstantRows } from '../losses/global-batch.js';
import type { DecisionRecorder } from './decisions.js';

/** The kind of choice {@link FeatureQueue.nearest} and {@link FeatureQueue.nearestK} make (as `verify` reports it). */
const NEAREST_NEIGHBOUR = 'nearest-neighbour';

/** Options of a {@link FeatureQueue}. */
export interface FeatureQueueOptions {
  /** Separate banks, one per view (MoCo keeps the keys of each view apart). Default 1. */
  views?: number;
  /** Also keep the label of every row (`-1` until written), e.g. for a nearest-neighbour accuracy. */
  labels?: boolean;
  /** Draws the initial rows. */
  rng: Rng;
}

/** Where one flush wrote a block of rows: slots `start, start+1, ...` modulo the queue size. */
export interface QueueWrite {
  /** `[1]` int32 on the device: the first slot written (the pointer is never read back to the host). */
  start: Tensor1D;
  count: number;
}

/**
 * A first-in-first-out bank of K past embeddings (MoCo's queue of keys, NNCLR's support
 * set), the one place a method keeps features across steps.
 *
 * Exactness under data parallelism: {@link push} gathers the rows of every rank in rank
 * order (which is the one-process global batch's order, see DistributedSampler), so the
 * queue written on every rank is the queue one process writes; rows are written at the
 * pointer and wrap around. The bank, its labels and the pointer are buffers: saved in
 * checkpoints, restored on resume, compared by `verify`, and initialised from the method's
 * seeded generator (random L2-normalised rows, as solo-learn), so identical on every rank.
 *
 * Rows pushed during a step's loss are written by {@link flush} after the optimizer step
 * (BaseMethod does it), never while the gradient tape may still read the bank; with
 * `--accumulate-grad-batches n` the n micro-batches are written in order after the step.
 */
export class FeatureQueue extends Module {
  /** K: rows per view. */
  readonly size: number;
  /** D: width of a row. */
  readonly dim: number;
  readonly views: number;
  /** `[views, K, D]` float32. */
  private readonly bank: Variable;
  /** `[K]` int32, `-1` where nothing was written yet (only with `labels`). */
  private readonly labelBank: Variable | undefined;
  /** `[1]` int32: the next slot to write. */
  private readonly pointer: Variable;
  private pending: Array<{ rows: Tensor2D[]; labels?: Tensor1D }> = [];
  /** The blocks the last {@link flush} wrote, in order. */
  lastWrites: QueueWrite[] = [];
  /**
   * Where {@link nearest} and {@link nearestK} make their choices when set (`verify` records
   * and replays them: src/methods/decisions.ts); unset in training, where a choice is a plain
   * `argMax`/`topk` on the device.
   */
  decisions: DecisionRecorder | undefined;

  constructor(size: number, dim: number, options: FeatureQueueOptions) {
    super();
    if (!(Number.isInteger(size) && size >= 1)) throw new Error(`FeatureQueue: size must be an integer >= 1, got ${size}`);
    this.size = size;
    this.dim = dim;
    this.views = options.views ?? 1;
    const initial = tf.tidy(() => {
      const draws = tf.tensor2d(options.rng.normalArray(this.views * size * dim, 0, 1), [this.views * size, dim]);
      return tf.reshape(l2NormalizeRows(draws), [this.views, size, dim]);
    });
    this.bank = this.addBuffer('bank', initial);
    this.labelBank = options.labels ? this.addBuffer('labels', tf.fill([size], -1, 'int32')) : undefined;
    this.pointer = this.addBuffer('pointer', tf.zeros([1], 'int32'));
  }

  /** The rows of `view`, `[K, D]` (a constant: no gradient flows into the queue). */
  rows(view = 0): Tensor2D {
    return tf.tidy(() => tf.reshape(tf.slice(this.bank, [view, 0, 0], [1, this.size, this.dim]), [this.size, this.dim]));
  }

  /** The labels of the rows, `[K]` int32 (`-1`: not written yet). */
  labels(): Tensor1D {
    if (!this.labelBank) throw new Error('FeatureQueue: created without labels');
    return this.labelBank.clone() as Tensor1D;
  }

  /**
   * The slot the next row is written to: a read of the device (synchronous, so not for a
   * training step, nor for the WebGPU engine; flush and the searches use the pointer on the
   * device).
   */
  get position(): number {
    return this.pointer.dataSync()[0];
  }

  /**
   * Queues the rows of this step for writing: `rows` one `[B, D]` per view (detached),
   * `labels` `[B]` when the queue keeps labels. The rows of every rank are gathered in rank
   * order over the process group the method's loss runs in (`[N, D]`, N = W·B); call it
   * from the method's `embeddingLoss`. Written by {@link flush}.
   */
  push(rows: Tensor[], labels?: Tensor): void {
    if (rows.length !== this.views) throw new Error(`FeatureQueue.push: ${rows.length} view(s) given, the queue has ${this.views}`);
    if (rows.some((r) => r.rank !== 2 || r.shape[1] !== this.dim || r.shape[0] !== rows[0].shape[0])) {
      throw new Error(`FeatureQueue.push: every view must be [B, ${this.dim}], got ${rows.map((r) => `[${r.shape.join(', ')}]`).join(', ')}`);
    }
    if (this.labelBank && !labels) throw new Error('FeatureQueue.push: this queue keeps labels; pass them');
    const layout = batchLayout('FeatureQueue.push', rows[0].shape[0], undefined);
    const gathered = rows.map((r) => tf.keep(gatherConstantRows(detach(r) as Tensor2D, layout) as Tensor2D));
    const gatheredLabels = this.labelBank && labels ? tf.keep(gatherConstantRows(tf.cast(labels, 'int32'), layout) as Tensor1D) : undefined;
    this.pending.push({ rows: gathered, labels: gatheredLabels });
  }

  /**
   * Writes the pushed rows at the pointer, block after block in push order, wrapping
   * around at K; the oldest rows are overwritten. A block of more than K rows keeps its
   * last K. Records the slots written in {@link lastWrites}. Runs on the device: the pointer
   * `[1]` int32 is never read back (slots `(pointer + i) mod K` are built with tensor ops).
   */
  flush(): void {
    this.disposeLastWrites();
    for (const { rows, labels } of this.pending) {
      const n = rows[0].shape[0];
      const skip = Math.max(0, n - this.size);
      const start = tf.tidy(() => this.slotsFrom(this.pointer as Tensor as Tensor1D, tf.tensor1d([skip], 'int32')));
      tf.tidy(() => {
        const slots = this.slotsFrom(start, tf.range(0, n - skip, 1, 'int32') as Tensor1D); // [n']
        const written = tf.stack(rows.map((r) => tf.slice(r, skip, n - skip))); // [views, n', D]
        this.bank.assign(scatterRows(this.bank, slots, written, 1));
        if (this.labelBank && labels) this.labelBank.assign(scatterRows(this.labelBank, slots, tf.slice(labels, skip, n - skip), 0));
        this.pointer.assign(this.slotsFrom(this.pointer as Tensor as Tensor1D, tf.tensor1d([n], 'int32')));
      });
      this.lastWrites.push({ start, count: n - skip });
      tf.dispose([...rows, ...(labels ? [labels] : [])]);
    }
    this.pending = [];
  }

  /**
   * The nearest row of `view` to each row of `z` `[B, D]` by inner product (solo-learn's
   * `find_nn`; with normalised rows, cosine): their slots `[B]` int32 and the rows `[B, D]`
   * (constants).
   *
   * Under a gradient tape the search runs off the tape (tfjs would otherwise differentiate the
   * gather with respect to its int32 indices, an error, whenever `z` depends on a trained
   * variable), and the rows depend on `z` with gradient exactly 0, like {@link detach}: a
   * caller that differentiates with respect to `z` (the gradient cache) gets zeros, not none.
   */
  nearest(z: Tensor2D, view = 0): { index: Tensor1D; rows: Tensor2D } {
    const bank = this.rows(view);
    const index = withoutGradientTape(() =>
      tf.tidy(() => {
        const scores = tf.matMul(z, bank, false, true) as Tensor2D;
        return (this.decisions ? tf.reshape(this.decisions.choose(NEAREST_NEIGHBOUR, scores, 1), [-1]) : tf.argMax(scores, 1)) as Tensor1D;
      }),
    );
    const lookup = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
      const input = args[0] as Tensor;
      return { value: tf.gather(bank, index), gradFunc: () => tf.zerosLike(input) };
    });
    const rows = lookup(z) as Tensor2D;
    bank.dispose();
    return { index, rows };
  }

  /**
   * The `k` nearest rows of `view` to each row of `z` `[B, D]` by inner product, nearest
   * first (solo-learn's All4One `find_nn`, `topk(k)`): their slots `[B, k]` int32 and the rows
   * `[B, k, D]` (constants, gradient exactly 0 with respect to `z`, as {@link nearest}).
   */
  nearestK(z: Tensor2D, k: number, view = 0): { index: tf.Tensor2D; rows: tf.Tensor3D } {
    if (!(Number.isInteger(k) && k >= 1 && k <= this.size)) throw new Error(`FeatureQueue.nearestK: k must be an integer in [1, ${this.size}], got ${k}`);
    const bank = this.rows(view);
    const index = withoutGradientTape(() =>
      tf.tidy(() => {
        const scores = tf.matMul(z, bank, false, true) as Tensor2D;
        return this.decisions ? this.decisions.choose(NEAREST_NEIGHBOUR, scores, k) : (tf.topk(scores, k).indices as tf.Tensor2D);
      }),
    );
    const lookup = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
      const input = args[0] as Tensor;
      return { value: tf.gather(bank, index), gradFunc: () => tf.zerosLike(input) };
    });
    const rows = lookup(z) as Tensor as tf.Tensor3D;
    bank.dispose();
    return { index, rows };
  }

  /**
   * Reorders the rows the last {@link flush} wrote: block j's row i moves to the slot of
   * row `orders[j][i]` of that block (verify's round-off twins see their samples in another
   * order and put them back, so their queue can be compared with the reference's).
   */
  reorderLastWrites(orders: Int32Array[]): void {
    if (orders.length !== this.lastWrites.length)
      throw new Error(`FeatureQueue.reorderLastWrites: ${orders.length} orders for ${this.lastWrites.length} blocks`);
    this.lastWrites.forEach(({ start, count }, j) => {
      const order = orders[j];
      if (order.length !== count) throw new Error(`FeatureQueue.reorderLastWrites: block ${j} has ${count} rows, order has ${order.length}`);
      tf.tidy(() => {
        const from = this.slotsFrom(start, tf.range(0, count, 1, 'int32') as Tensor1D);
        const to = this.slotsFrom(start, tf.tensor1d(order, 'int32'));
        this.bank.assign(scatterRows(this.bank, to, tf.gather(this.bank, from, 1), 1));
        if (this.labelBank) this.labelBank.assign(scatterRows(this.labelBank, to, tf.gather(this.labelBank, from, 0), 0));
      });
    });
  }

  /** Slots `(start + offsets) mod K`, `[n]` int32, from `start` `[1]` and `offsets` `[n]` (both int32, on the device). */
  private slotsFrom(start: Tensor1D, offsets: Tensor1D): Tensor1D {
    return tf.mod(tf.add(offsets, start), tf.scalar(this.size, 'int32')) as Tensor1D;
  }

  private disposeLastWrites(): void {
    tf.dispose(this.lastWrites.map((w) => w.start));
    this.lastWrites = [];
  }

  /** Frees the rows pushed and not written, then the buffers. */
  override dispose(): void {
    for (const { rows, labels } of this.pending) tf.dispose([...rows, ...(labels ? [labels] : [])]);
    this.pending = [];
    this.disposeLastWrites();
    super.dispose();
  }
}

/**
 * `target` with the entries at `slots` `[n]` int32 (distinct, on the device) along `axis` (0
 * or 1) replaced by `values` (same rank, n entries along `axis`). One scatter that copies only
 * the written rows: a full-size gather/where over the bank took seconds per step at MoCo's
 * 2 x 32768 x 256.
 */
function scatterRows(target: Tensor, slots: Tensor1D, values: Tensor, axis: 0 | 1): Tensor {
  const n = slots.shape[0];
  if (axis === 0) return tf.tensorScatterUpdate(target, tf.reshape(slots, [n, 1]), values);
  const views = values.shape[0]!;
  // Indices [views·n, 2]: (v, slots[i]) for every view v, then row i.
  const viewColumn = tf.reshape(tf.tile(tf.reshape(tf.range(0, views, 1, 'int32'), [views, 1]), [1, n]), [views * n, 1]);
  const slotColumn = tf.reshape(tf.tile(tf.reshape(slots, [1, n]), [views, 1]), [views * n, 1]);
  const rows = tf.reshape(values, [views * n, ...values.shape.slice(2)]);
  return tf.tensorScatterUpdate(target, tf.concat([viewColumn, slotColumn], 1), rows);
}
