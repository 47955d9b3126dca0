/**
 * The training batch loader: {@link MultiViewLoader} yields augmented multi-view batches
 * (optionally computed ahead in worker threads). Evaluation images are made by
 * src/eval/features.ts with the eval transform, in dataset order.
 */
import { Worker } from 'node:worker_threads';
import { BadSamplesFailure, UserError } from '../core/errors.js';
import { validateViewAugmentation, type ViewAugmentation } from './augment/views.js';
import type { Dataset } from './dataset.js';
import { augmentStoreBatch, type AugmentedBatch } from './loader-batch.js';
import type { WorkerInit, WorkerResult, WorkerTask } from './loader-worker.js';
import { PixelReader, pixelStore, type SkippedFile } from './pixels.js';
import type { Sampler } from './sampler.js';

/** A batch of B samples with one array per view. */
export interface MultiViewBatch {
  /** One [B, S_v, S_v, C] array per view (S_v = views[v].cropSize). */
  views: Float32Array[];
  /**
   * `[B, 5]` per view: the crop box (top, left, height, width, in source-image pixels) and 1
   * where the view was flipped (see augmentBatch); absent in batches built by hand.
   */
  crops?: Float32Array[];
  /** [B, S, S, C] of view 0 (all views when their crop sizes are equal). */
  shape: [number, number, number, number];
  /** [B, S_v, S_v, C] of each view. */
  shapes: [number, number, number, number][];
  /** [B] class labels (for online linear probes / kNN monitoring only). */
  labels: Int32Array;
  /** [B] global dataset indices of the samples. */
  indices: Int32Array;
  /** Index of the batch within its epoch (0-based). */
  index: number;
  /** The epoch and augmentation seed the views were drawn for (with `indices`, the keys of per-sample randomness). */
  epoch?: number;
  seed?: number;
}

export interface MultiViewLoaderOptions {
  /** In memory, or a folder whose files are decoded per batch (in the workers when there are any). */
  dataset: Dataset;
  /** One recipe per view; view v of sample i in epoch e is keyed (seed, e, i, v). */
  views: ViewAugmentation[];
  /** Samples per batch (per view); on several ranks, per rank. */
  batchSize: number;
  /** Order of indices per epoch (Sequential, Random, Distributed). */
  sampler: Sampler;
  /** Augmentation seed. */
  seed: number;
  /** Drop the last incomplete batch (default false). */
  dropLast?: boolean;
  /** Worker threads computing augmentations ahead; 0 (default) computes inline. */
  workers?: number;
  /** Batches in flight per worker (default 2); ignored inline. */
  prefetch?: number;
  /** Called once per unreadable file (its batch slot then shows the next readable file). */
  onSkip?: (file: SkippedFile) => void;
  /**
   * Unreadable files tolerated (`--max-bad-samples`; default: no limit): the batch that meets
   * one more throws a {@link BadSamplesFailure}. Counted by this loader (on several ranks, per rank).
   */
  maxSkippedFiles?: number;
}

interface Pending {
  resolve: (batch: AugmentedBatch) => void;
  reject: (err: Error) => void;
}

/** One worker thread and the tasks it owes. */
class WorkerSlot {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  failure: Error | undefined;
  private exited = false;
  private closing = false;

  constructor(init: WorkerInit) {
    this.worker = new Worker(new URL('./loader-worker.js', import.meta.url));
    this.worker.unref();
    this.worker.on('message', (msg: WorkerResult) => {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      // Idle workers don't keep the process alive, but a closing one must: a result queued
      // before terminate() can arrive while it waits, and unref'ing then lets the event loop
      // empty with terminate() unsettled (exit code 13).
      if (this.pending.size === 0 && !this.closing) this.worker.unref();
      if (msg.views && msg.crops && msg.sources) p.resolve({ views: msg.views, crops: msg.crops, sources: msg.sources, skipped: msg.skipped ?? [] });
      else if (msg.badSamples !== undefined) p.reject(new BadSamplesFailure(msg.badSamples));
      else p.reject(new Error(`loader worker failed: ${msg.error}`));
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', (code) => {
      this.exited = true;
      this.fail(new Error(`loader worker exited (code ${code})`));
    });
    this.worker.postMessage(init);
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const p of this.pending.values()) p.reject(this.failure);
    this.pending.clear();
  }

  run(task: WorkerTask): Promise<AugmentedBatch> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.pending.set(task.id, { resolve, reject });
      this.worker.ref();
      this.worker.postMessage(task);
    });
  }

  async terminate(): Promise<void> {
    if (this.exited) return;
    this.failure ??= new Error('loader closed');
    // An idle worker is unref'd; awaiting its termination must keep the process alive, or
    // the event loop can empty with this await unsettled (exit code 13).
    this.closing = true;
    this.worker.ref();
    await this.worker.terminate();
  }
}

function checkPositiveInt(field: string, v: number, min: number): void {
  if (!Number.isInteger(v) || v < min) {
    throw new UserError(`${field}: ${JSON.stringify(v)} is not allowed; expected an integer >= ${min}`);
  }
}

/**
 * Yields batches of augmented views: batch b of `epoch` holds the samples
 * `sampler.indices(epoch)[b*B .. (b+1)*B)` and, for each view v, the arrays
 * [B, S_v, S_v, C]. Every sample's views are keyed by (seed, epoch, index, view), so the
 * output is the same inline (`workers: 0`) and with any number of workers. With workers,
 * up to `workers * prefetch` batches are computed ahead while the consumer trains. A folder
 * dataset's files are read and decoded per batch where its views are made (a worker, or
 * inline), so memory does not grow with the folder. Call {@link close} when done (idle workers do not keep the process alive either way).
 */
export class MultiViewLoader {
  readonly dataset: Dataset;
  readonly views: readonly ViewAugmentation[];
  readonly batchSize: number;
  readonly sampler: Sampler;
  readonly seed: number;
  readonly dropLast: boolean;
  readonly workers: number;
  readonly prefetch: number;
  private slots: WorkerSlot[] | undefined;
  private inlineReader: PixelReader | undefined;
  private nextTaskId = 0;
  private readonly onSkip: ((file: SkippedFile) => void) | undefined;
  private readonly maxSkippedFiles: number;
  private readonly skippedPaths = new Set<string>();

  constructor(options: MultiViewLoaderOptions) {
    const { dataset, views, sampler } = options;
    if (!Array.isArray(views) || views.length === 0) {
      throw new UserError('views: an empty list is not allowed; expected at least one view augmentation');
    }
    views.forEach((v, i) => validateViewAugmentation(v, dataset.channels, `views[${i}]`));
    checkPositiveInt('batchSize', options.batchSize, 1);
    if (!Number.isInteger(options.seed)) {
      throw new UserError(`seed: ${JSON.stringify(options.seed)} is not allowed; expected an integer`);
    }
    const workers = options.workers ?? 0;
    checkPositiveInt('workers', workers, 0);
    const prefetch = options.prefetch ?? 2;
    checkPositiveInt('prefetch', prefetch, 1);
    this.dataset = dataset;
    this.views = views.map((v) => ({ ...v }));
    this.batchSize = options.batchSize;
    this.sampler = sampler;
    this.seed = options.seed;
    this.dropLast = options.dropLast ?? false;
    this.workers = workers;
    this.prefetch = prefetch;
    this.onSkip = options.onSkip;
    this.maxSkippedFiles = options.maxSkippedFiles ?? Infinity;
  }

  /** Number of distinct unreadable files met so far. */
  get skippedFiles(): number {
    return this.skippedPaths.size;
  }

  /** Batches per epoch: floor(L / B) with dropLast, else ceil(L / B) (L = sampler.length). */
  numBatches(): number {
    const L = this.sampler.length;
    return this.dropLast ? Math.floor(L / this.batchSize) : Math.ceil(L / this.batchSize);
  }

  private epochIndices(epoch: number): Int32Array {
    const all = this.sampler.indices(epoch);
    if (all.length !== this.sampler.length) {
      throw new Error(`sampler returned ${all.length} indices for epoch ${epoch}, expected ${this.sampler.length}`);
    }
    const n = this.dataset.length;
    for (let i = 0; i < all.length; i++) {
      if (!(all[i] >= 0 && all[i] < n)) {
        throw new Error(`sampler index ${all[i]} is out of range for dataset ${this.dataset.name} of ${n} images`);
      }
    }
    return all;
  }

  private startWorkers(): WorkerSlot[] {
    if (!this.slots) {
      const init: WorkerInit = {
        type: 'init',
        store: pixelStore(this.dataset),
        views: this.views.map((v) => ({ ...v })),
        seed: this.seed,
      };
      this.slots = Array.from({ length: this.workers }, () => new WorkerSlot(init));
    }
    return this.slots;
  }

  /**
   * The batch (labels of the images it shows); reports its newly met unreadable files, and
   * stops at the one over `maxSkippedFiles`.
   */
  private makeBatch(epoch: number, index: number, indices: Int32Array, { views, crops, sources, skipped }: AugmentedBatch): MultiViewBatch {
    for (const file of skipped) {
      if (this.skippedPaths.has(file.path)) continue;
      this.skippedPaths.add(file.path);
      if (this.skippedPaths.size > this.maxSkippedFiles) {
        throw new BadSamplesFailure(
          `${this.skippedPaths.size} training images are unreadable, more than --max-bad-samples allows (${this.maxSkippedFiles}); the last: ${file.path}: ${file.reason}`,
        );
      }
      this.onSkip?.(file);
    }
    const B = indices.length;
    const c = this.dataset.channels;
    const labels = new Int32Array(B);
    for (let k = 0; k < B; k++) labels[k] = this.dataset.labels[sources[k]];
    const shapes = this.views.map((v) => [B, v.cropSize, v.cropSize, c] as [number, number, number, number]);
    return { views, crops, shape: [...shapes[0]], shapes, labels, indices, index, epoch, seed: this.seed };
  }

  /**
   * The batches of `epoch` from batch `startBatch` on (default 0); batches before it are
   * neither computed nor yielded, so a resumed run continues mid-epoch cheaply.
   */
  async *batches(epoch: number, startBatch = 0): AsyncGenerator<MultiViewBatch> {
    if (!Number.isInteger(epoch) || epoch < 0) {
      throw new UserError(`epoch: ${JSON.stringify(epoch)} is not allowed; expected an integer >= 0`);
    }
    const nb = this.numBatches();
    if (!Number.isInteger(startBatch) || startBatch < 0 || startBatch > nb) {
      throw new UserError(`startBatch: ${JSON.stringify(startBatch)} is not allowed; expected an integer in 0..${nb}`);
    }
    const all = this.epochIndices(epoch);
    const B = this.batchSize;
    const batchIndices = (b: number): Int32Array => all.slice(b * B, Math.min((b + 1) * B, all.length));

    if (this.workers === 0) {
      this.inlineReader ??= new PixelReader(pixelStore(this.dataset));
      for (let b = startBatch; b < nb; b++) {
        const indices = batchIndices(b);
        yield this.makeBatch(epoch, b, indices, await augmentStoreBatch(this.inlineReader, this.views, this.seed, epoch, indices));
      }
      return;
    }

    const slots = this.startWorkers();
    const ahead = this.workers * this.prefetch;
    const inflight = new Map<number, Promise<AugmentedBatch>>();
    let next = startBatch;
    for (let b = startBatch; b < nb; b++) {
      while (next < nb && next < b + ahead) {
        const task: WorkerTask = { type: 'batch', id: this.nextTaskId++, epoch, indices: batchIndices(next) };
        const promise = slots[next % slots.length].run(task);
        promise.catch(() => undefined); // awaited below, or abandoned if the consumer stops early
        inflight.set(next, promise);
        next++;
      }
      const batch = await inflight.get(b)!;
      inflight.delete(b);
      yield this.makeBatch(epoch, b, batchIndices(b), batch);
    }
  }

  /** Terminates the worker threads (a later {@link batches} call starts new ones). */
  async close(): Promise<void> {
    const slots = this.slots;
    this.slots = undefined;
    if (slots) await Promise.all(slots.map((s) => s.terminate()));
  }
}
