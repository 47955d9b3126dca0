/**
 * Worker thread of {@link MultiViewLoader}: receives the dataset's pixel store once (shared
 * memory, or the file list), then batch index lists, and returns the augmented views and
 * their crop boxes (transferred, not copied). It runs exactly the code of the loader's
 * inline path ({@link augmentStoreBatch}).
 */
import { parentPort } from 'node:worker_threads';
import { BadSamplesFailure } from '../core/errors.js';
import type { ViewAugmentation } from './augment/views.js';
import { augmentStoreBatch } from './loader-batch.js';
import { PixelReader, type PixelStore, type SkippedFile } from './pixels.js';

/** First message: where the pixels come from and the view recipes. */
export interface WorkerInit {
  type: 'init';
  store: PixelStore;
  views: ViewAugmentation[];
  seed: number;
}

/** A batch to compute. */
export interface WorkerTask {
  type: 'batch';
  id: number;
  epoch: number;
  /** [B] dataset indices */
  indices: Int32Array;
}

/** The views of a batch, or the error that stopped it. */
export interface WorkerResult {
  id: number;
  views?: Float32Array[];
  /** One [B, 5] crop box and flip array per view (see augmentBatch). */
  crops?: Float32Array[];
  /** [B] index each sample's image came from (see PixelBatch.sources). */
  sources?: Int32Array;
  /** Files found unreadable on the way. */
  skipped?: SkippedFile[];
  error?: string;
  /** The message of a {@link BadSamplesFailure} (the data is unreadable, not a bug). */
  badSamples?: string;
}

if (parentPort) {
  const port = parentPort;
  let reader: PixelReader | undefined;
  let views: ViewAugmentation[] = [];
  let seed = 0;
  port.on('message', (msg: WorkerInit | WorkerTask) => {
    if (msg.type === 'init') {
      reader = new PixelReader(msg.store);
      views = msg.views;
      seed = msg.seed;
      return;
    }
    const fail = (e: unknown): void =>
      port.postMessage({
        id: msg.id,
        error: (e as Error).stack ?? String(e),
        badSamples: e instanceof BadSamplesFailure ? e.message : undefined,
      } satisfies WorkerResult);
    if (!reader) return fail(new Error('loader worker got a batch before its init message'));
    augmentStoreBatch(reader, views, seed, msg.epoch, msg.indices).then((batch) => {
      const result: WorkerResult = { id: msg.id, ...batch };
      port.postMessage(
        result,
        [...batch.views, ...batch.crops].map((a) => a.buffer as ArrayBuffer),
      );
    }, fail);
  });
}
