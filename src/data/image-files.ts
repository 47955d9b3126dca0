/**
 * Image files on disk (Node): decoding with sharp, and whether a file's folder still exists.
 * The browser build uses ./image-files.browser.ts in its place.
 */
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import sharp from 'sharp';

// No operation cache: it would keep decoded images alive, and a folder is read once per epoch.
sharp.cache(false);

/**
 * Decodes the image file at `path` to [height, width, channels] bytes (channels 1 or 3):
 * EXIF orientation applied, alpha flattened onto black, resized to cover and centre cropped
 * (an image already of the target size is not resampled). Rejects when the file is missing,
 * not an image, or corrupt (libvips warnings, e.g. a truncated JPEG, count as errors).
 */
export async function decodeImage(path: string, height: number, width: number, channels: number): Promise<Uint8Array> {
  let pipeline = sharp(path, { failOn: 'warning' }).autoOrient().flatten({ background: '#000000' }).resize(width, height, { fit: 'cover', position: 'centre' });
  pipeline = channels === 1 ? pipeline.toColourspace('b-w') : pipeline.toColourspace('srgb');
  const { data, info } = await pipeline.raw({ depth: 'uchar' }).toBuffer({ resolveWithObject: true });
  if (info.width !== width || info.height !== height || info.channels !== channels) {
    throw new Error(`decoded to ${info.width}x${info.height}x${info.channels}, expected ${width}x${height}x${channels}`);
  }
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The folder holding `file` when that folder no longer exists, else undefined. */
export function missingFolderOf(file: string): string | undefined {
  const folder = dirname(file);
  return existsSync(folder) ? undefined : folder;
}
