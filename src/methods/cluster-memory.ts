import { invalidValue } from '../core/errors.js';
import { Module } from '../core/module.js';
import { detach, l2NormalizeRows } from '../core/ops.js';
import { Rng } from '../core/random.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Tensor, type Tensor1D, type Tensor2D, type Variable } from '../core/tf.js';
import { batchLayout, gatherConstantRows, gatherIntsOverRanks } from '../losses/global-batch.js';
import { sphericalKMeans } from '../losses/kmeans.js';
import type { DecisionRecorder } from './decisions.js';

/** The shape of a {@link ClusterMemory}. */
export interface ClusterMemoryOptions {
  /** N: samples in the training set (the bank has a row per sample and view). */
  datasetSize: number;
  /** V: views kept (DeepCluster v2: the two global crops). */
  views: number;
  /** D: width of a row. */
  dim: number;
  /** K per head: prototypes (k-means clusters) of each head. */
  prototypes: number;
  /** H: heads (independent clusterings; head h clusters view h mod V). */
  heads: number;
  /** Draws the initial prototypes and the key of the k-means initialisations. */
  rng: Rng;
}

/**
 * DeepCluster v2's state: a memory bank of every sample's latest projection per view, indexed
 * by dataset index, the epoch each sample was last written in, each head's cluster of every
 * sample and each head's prototypes (the k-means centroids).
 *
 * Exactness under data parallelism (docs/design.md contract 7): {@link push} gathers the rows
 * and dataset indices of every rank in rank order, so every rank writes the whole global batch
 * and holds the one-process bank (solo-learn keeps a per-rank bank by batch position instead);
 * {@link cluster} runs k-means over that bank with the work spread over the ranks and the sums
 * all-reduced ({@link sphericalKMeans}), initialised from rows drawn by (seed, epoch, head),
 * never by rank. Everything is a buffer: checkpointed, compared by `verify`, and a resume at
 * an epoch boundary re-clusters the saved bank to the same result.
 *
 * Memory: V·N·D float32 for the bank (CIFAR-10 with the defaults: 2 × 50000 × 128 × 4 B =
 * 51 MB), plus H·N int32 assignments and H·K·D float32 prototypes, on every rank.
 */
export class ClusterMemory extends Module {
  readonly options: Omit<ClusterMemoryOptions, 'rng'>;
  /** `[V, N, D]` float32: the latest row of every sample and view (zeros until written). */
  private readonly bank: Variable;
  /** `[N]` int32: the epoch each sample's rows were last written in (`-1`: never). */
  private readonly writtenEpoch: Variable;
  /** `[H, N]` int32: each head's cluster of every sample (`-1`: none, not clustered this epoch). */
  private readonly assignments: Variable;
  /** `[H, K, D]` float32: each head's L2-normalised prototypes. */
  private readonly prototypeBank: Variable;
  /** Key of the k-means initialisations: (key, epoch, head). */
  private readonly seed: number;
  private pending: Array<{ rows: Tensor2D[]; indices: Int32Array }> = [];
  /** Where k-means makes its assignments when set (`verify` records and replays them: src/methods/decisions.ts). */
  decisions: DecisionRecorder | undefined;

  constructor(options: ClusterMemoryOptions) {
    super();
    const { rng, ...shape } = options;
    const { datasetSize: n, views, dim, prototypes: k, heads } = shape;
    for (const [name, value] of Object.entries(shape)) {
      if (!(Number.isInteger(value) && value >= 1)) throw new Error(`ClusterMemory: ${name} must be an integer >= 1, got ${value}`);
    }
    this.options = shape;
    this.bank = this.addBuffer('bank', tf.zeros([views, n, dim]));
    this.writtenEpoch = this.addBuffer('written_epoch', tf.fill([n], -1, 'int32'));
    this.assignments = this.addBuffer('assignments', tf.fill([heads, n], -1, 'int32'));
    const initial = tf.tidy(() => tf.reshape(l2NormalizeRows(tf.tensor2d(rng.normalArray(heads * k * dim), [heads * k, dim])), [heads, k, dim]));
    this.prototypeBank = this.addBuffer('prototypes', initial);
    this.seed = rng.int(2 ** 31 - 1);
  }

  /** Head `h`'s prototypes `[K, D]` (a constant). */
  prototypes(h: number): Tensor2D {
    const { prototypes: k, dim } = this.options;
    return tf.tidy(() => tf.reshape(tf.slice(this.prototypeBank, [h, 0, 0], [1, k, dim]), [k, dim]));
  }

  /** Each head's clusters of the samples `indices` `[B]`: `[B]` int32 per head (`-1`: none), on the device (the caller disposes them). */
  targets(indices: Int32Array): Tensor1D[] {
    return tf.tidy(() => tf.unstack(tf.gather(this.assignments, tf.tensor1d(indices, 'int32'), 1)) as Tensor1D[]);
  }

  /**
   * Queues the rows of this step: `rows` one `[B, D]` per view, `indices` `[B]` their dataset
   * indices; gathered over the ranks of the scoped process group in rank order (call it from
   * the method's `embeddingLoss`). Written by {@link flush}.
   */
  push(rows: Tensor[], indices: Int32Array): void {
    const { views, dim } = this.options;
    if (rows.length !== views || rows.some((r) => r.rank !== 2 || r.shape[1] !== dim || r.shape[0] !== indices.length)) {
      throw new Error(
        `ClusterMemory.push: expected ${views} views of [${indices.length}, ${dim}], got ${rows.map((r) => `[${r.shape.join(', ')}]`).join(', ')}`,
      );
    }
    const layout = batchLayout('ClusterMemory.push', indices.length, undefined);
    const gathered = rows.map((r) => tf.keep(gatherConstantRows(detach(r) as Tensor2D, layout)));
    this.pending.push({ rows: gathered, indices: gatherIntsOverRanks(indices, layout) });
  }

  /** Writes the pushed rows at their samples (in push order) and marks them written in `epoch`. */
  flush(epoch: number): void {
    for (const { rows, indices } of this.pending) {
      const { views } = this.options;
      tf.tidy(() => {
        const at = new Int32Array(2 * views * indices.length);
        for (let v = 0; v < views; v++) for (let i = 0; i < indices.length; i++) at.set([v, indices[i]!], 2 * (v * indices.length + i));
        const values = tf.concat(rows, 0);
        this.bank.assign(tf.tensorScatterUpdate(this.bank, tf.tensor2d(at, [at.length / 2, 2], 'int32'), values));
        const slots = tf.tensor2d(indices, [indices.length, 1], 'int32');
        this.writtenEpoch.assign(tf.tensorScatterUpdate(this.writtenEpoch, slots, tf.fill([indices.length], epoch, 'int32')));
      });
      tf.dispose(rows);
    }
    this.pending = [];
  }

  /**
   * The start of `epoch`: each head runs `iterations` rounds of k-means over the rows written
   * in the previous epoch (head h on view h mod V; centroids initialised with K of those rows
   * drawn by (seed, epoch, h)); its prototypes become the centroids and its assignments the
   * clusters of those samples (`-1` for the others). Nothing happens when no row was written in
   * the previous epoch (epoch 0: every target is then `-1`). Fewer such rows than K is an error.
   * The k-means work is spread over the ranks of `group` (every rank must call it).
   */
  cluster(epoch: number, iterations: number, group: ProcessGroup | undefined): void {
    if (epoch === 0) return;
    const { datasetSize: n, views, dim, prototypes: k, heads } = this.options;
    const written = this.writtenEpoch.dataSync() as Int32Array;
    const seen: number[] = [];
    written.forEach((e, i) => e === epoch - 1 && seen.push(i));
    const samples = Int32Array.from(seen);
    if (samples.length === 0) return;
    if (samples.length < k) {
      throw invalidValue(
        'method_args.num_prototypes',
        k,
        `at most ${samples.length}, the samples seen in epoch ${epoch - 1} (k-means needs a row per initial centroid)`,
      );
    }
    const assignments = new Int32Array(heads * n).fill(-1);
    const prototypes = new Float32Array(heads * k * dim);
    for (let h = 0; h < heads; h++) {
      const rows = tf.tidy(
        () => tf.gather(tf.reshape(tf.slice(this.bank, [h % views, 0, 0], [1, n, dim]), [n, dim]), tf.tensor1d(samples, 'int32')).dataSync() as Float32Array,
      );
      const draws = Rng.keyed(this.seed, epoch, h).permutation(samples.length).subarray(0, k);
      const initial = new Float32Array(k * dim);
      draws.forEach((row, c) => initial.set(rows.subarray(row * dim, (row + 1) * dim), c * dim));
      const decisions = this.decisions;
      const assignWith = decisions && ((scores: Tensor2D) => tf.reshape(decisions.choose('k-means', scores, 1, false), [-1]) as Tensor1D);
      const result = sphericalKMeans(rows, dim, initial, iterations, group, assignWith);
      samples.forEach((sample, i) => (assignments[h * n + sample] = result.assignments[i]!));
      prototypes.set(result.centroids, h * k * dim);
    }
    tf.tidy(() => {
      this.assignments.assign(tf.tensor2d(assignments, [heads, n], 'int32'));
      this.prototypeBank.assign(tf.tensor3d(prototypes, [heads, k, dim]));
    });
  }

  /** Frees the rows pushed and not written, then the buffers. */
  override dispose(): void {
    for (const { rows } of this.pending) tf.dispose(rows);
    this.pending = [];
    super.dispose();
  }
}
