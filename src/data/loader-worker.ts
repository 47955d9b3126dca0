/**
 * Worker thread of {@link MultiViewLoader}: receives the dataset pixels once (shared
 * memory), then batch index lists, and returns the augmented views (transferred, not
 * copied). It runs exactly the code of the loader's inline path ({@link augmentBatch}).
 */
import { parentPort } from 'node:worker_threads';
import { augmentBatch, type PixelSource, type ViewAugmentation } from './augment/views.js';

/** First message: the dataset and the view recipes. */
export interface WorkerInit {
  type: 'init';
  /** The dataset's pixel memory (shared) and where its pixels start in it. */
  buffer: SharedArrayBuffer;
  byteOffset: number;
  byteLength: number;
  height: number;
  width: number;
  channels: number;
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
  error?: string;
}

if (parentPort) {
  const port = parentPort;
  let source: PixelSource | undefined;
  let views: ViewAugmentation[] = [];
  let seed = 0;
  port.on('message', (msg: WorkerInit | WorkerTask) => {
    if (msg.type === 'init') {
      source = {
        pixels: new Uint8Array(msg.buffer, msg.byteOffset, msg.byteLength),
        height: msg.height,
        width: msg.width,
        channels: msg.channels,
      };
      views = msg.views;
      seed = msg.seed;
      return;
    }
    try {
      if (!source) throw new Error('loader worker got a batch before its init message');
      const out = augmentBatch(source, views, seed, msg.epoch, msg.indices);
      const result: WorkerResult = { id: msg.id, views: out };
      port.postMessage(
        result,
        out.map((a) => a.buffer as ArrayBuffer),
      );
    } catch (e) {
      const result: WorkerResult = { id: msg.id, error: (e as Error).stack ?? String(e) };
      port.postMessage(result);
    }
  });
}
