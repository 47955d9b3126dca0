/**
 * Image files in the browser build (in place of ./image-files.ts): a page has no file paths
 * to decode; its images arrive as pixels (in-memory datasets). Decoding picked files in the
 * page (createImageBitmap) is not in this build yet.
 */
import { UserError } from '../core/errors.js';

/** Refuses: the browser build reads no image files by path (see the module comment). */
export async function decodeImage(path: string): Promise<Uint8Array> {
  throw new UserError(`image file ${path}: the browser build decodes no files by path; give the page's images as an in-memory dataset`);
}

/** A page has no folders to check: always undefined. */
export function missingFolderOf(): string | undefined {
  return undefined;
}
