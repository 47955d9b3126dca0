/** One batch of augmented views from a pixel store: the code shared by the loader's inline path and its workers. */
import { augmentBatch, type ViewAugmentation } from './augment/views.js';
import type { PixelReader, SkippedFile } from './pixels.js';

/** The views of a batch and where its images came from. */
export interface AugmentedBatch {
  /** One [B, S_v, S_v, C] array per view. */
  views: Float32Array[];
  /** One [B, 5] array per view: crop box (top, left, height, width) and flipped (0/1); see augmentBatch. */
  crops: Float32Array[];
  /** [B] index each sample's image came from (differs from the asked one for a replaced unreadable file). */
  sources: Int32Array;
  skipped: SkippedFile[];
}

/** Reads the images `indices` ([B]) and computes their views, keyed by (seed, epoch, index, view). */
export async function augmentStoreBatch(
  reader: PixelReader,
  views: readonly ViewAugmentation[],
  seed: number,
  epoch: number,
  indices: Int32Array,
): Promise<AugmentedBatch> {
  const { height, width, channels } = reader.store;
  const batch = await reader.read(indices);
  const out = augmentBatch({ pixels: batch.pixels, height, width, channels }, views, seed, epoch, indices, batch.rows);
  return { views: out.views, crops: out.crops, sources: batch.sources, skipped: batch.skipped };
}
