/**
 * Where a batch's image bytes come from. A {@link PixelStore} is a plain, structured-cloneable
 * description sent once to each loader worker: either the shared memory of an in-memory
 * dataset (read in place, no copy: the speed of the in-memory datasets is unchanged) or a
 * list of image files, decoded with sharp when a batch needs them (nothing else of a folder
 * is held in memory). A {@link PixelReader} turns a batch's indices into pixels.
 *
 * Decoding (see {@link decodeImage}): EXIF orientation applied, alpha flattened onto black,
 * resized to *cover* height x width (aspect ratio kept, the shorter side fits) and centre
 * cropped, converted to 1 (luminance) or 3 (sRGB) channels. An image already of the target
 * size is not resampled, so lossless files (PNG) decode to exactly their pixels.
 */
import { BadSamplesFailure } from '../core/errors.js';
import { isInMemory, type Dataset } from './dataset.js';
// The platform's image files (Node: sharp and the file system; browser: its .browser.ts).
import { decodeImage, missingFolderOf } from './image-files.js';

export { decodeImage } from './image-files.js';

/** An in-memory dataset's pixels ([N, H, W, C]) in shared memory. */
export interface MemoryPixels {
  kind: 'memory';
  buffer: SharedArrayBuffer;
  byteOffset: number;
  byteLength: number;
  height: number;
  width: number;
  channels: number;
}

/** Image files, decoded on demand to [H, W, C]. */
export interface FilePixels {
  kind: 'files';
  /** [N] paths; index i is `files[i]`. */
  files: readonly string[];
  height: number;
  width: number;
  channels: number;
}

export type PixelStore = MemoryPixels | FilePixels;

/** A file that could not be decoded, and why. */
export interface SkippedFile {
  path: string;
  reason: string;
}

/** The pixels of a batch of B samples. */
export interface PixelBatch {
  /** [R, H, W, C] bytes: the whole in-memory dataset, or the batch's decoded images (R = B). */
  pixels: Uint8Array;
  /** [B] row of `pixels` holding sample k. */
  rows: ArrayLike<number>;
  /** [B] index whose image sample k shows: the asked index, or the one that replaced an unreadable file. */
  sources: Int32Array;
  /** Files found unreadable while reading this batch (each reported once per reader). */
  skipped: SkippedFile[];
}

/** Shared-memory copy of the pixels (the dataset's own memory when already shared). */
function sharedPixels(pixels: Uint8Array): { buffer: SharedArrayBuffer; byteOffset: number; byteLength: number } {
  if (pixels.buffer instanceof SharedArrayBuffer) {
    return { buffer: pixels.buffer, byteOffset: pixels.byteOffset, byteLength: pixels.byteLength };
  }
  const buffer = new SharedArrayBuffer(pixels.byteLength);
  new Uint8Array(buffer).set(pixels);
  return { buffer, byteOffset: 0, byteLength: pixels.byteLength };
}

/** The store of a dataset's images. */
export function pixelStore(ds: Dataset): PixelStore {
  const shape = { height: ds.height, width: ds.width, channels: ds.channels };
  if (isInMemory(ds)) return { kind: 'memory', ...sharedPixels(ds.pixels), ...shape };
  return { kind: 'files', files: ds.files, ...shape };
}

/** Unreadable files tried in a row before a batch gives up (the folder is mostly unreadable). */
const MAX_CONSECUTIVE_SKIPS = 64;

/**
 * Reads batches from a store. In memory: the store's pixels, rows = indices. From files:
 * the batch's images decoded concurrently into [B, H, W, C]; an unreadable file i is replaced
 * by the next readable file (i+1, i+2, ... cyclically) — a function of the folder only, so
 * every worker and rank replaces it the same way — and reported once per reader.
 */
export class PixelReader {
  private readonly memory: Uint8Array | undefined;
  /** index -> why it cannot be read (files only). */
  private readonly unreadable = new Map<number, string>();

  constructor(readonly store: PixelStore) {
    this.memory = store.kind === 'memory' ? new Uint8Array(store.buffer, store.byteOffset, store.byteLength) : undefined;
  }

  /** The pixels of the samples `indices` ([B] dataset indices). */
  async read(indices: Int32Array): Promise<PixelBatch> {
    if (this.memory) return { pixels: this.memory, rows: indices, sources: indices, skipped: [] };
    const { height, width, channels } = this.store;
    const imageBytes = height * width * channels;
    const pixels = new Uint8Array(indices.length * imageBytes);
    const sources = new Int32Array(indices.length);
    const skipped: SkippedFile[] = [];
    await Promise.all(
      Array.from(indices, async (index, k) => {
        const [source, image] = await this.decodeFrom(index, skipped);
        sources[k] = source;
        pixels.set(image, k * imageBytes);
      }),
    );
    return { pixels, rows: Int32Array.from({ length: indices.length }, (_, k) => k), sources, skipped };
  }

  /** The first readable image from `index` on (cyclically), and its index. */
  private async decodeFrom(index: number, skipped: SkippedFile[]): Promise<[number, Uint8Array]> {
    const store = this.store as FilePixels;
    const n = store.files.length;
    const attempts = Math.min(n, MAX_CONSECUTIVE_SKIPS);
    let lastReason = '';
    for (let attempt = 0; attempt < attempts; attempt++) {
      const i = (index + attempt) % n;
      if (this.unreadable.has(i)) {
        lastReason = this.unreadable.get(i)!;
        continue;
      }
      try {
        return [i, await decodeImage(store.files[i], store.height, store.width, store.channels)];
      } catch (e) {
        lastReason = (e as Error).message.split('\n')[0];
        this.unreadable.set(i, lastReason);
        skipped.push({ path: store.files[i], reason: lastReason });
      }
    }
    const folder = missingFolderOf(store.files[index]);
    if (folder !== undefined) throw new BadSamplesFailure(`the data folder ${folder} no longer exists (it held ${store.files[index]})`);
    throw new BadSamplesFailure(`no readable image among ${attempts} consecutive files from ${store.files[index]} (the last: ${lastReason})`);
  }
}
