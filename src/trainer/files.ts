import { appendFileSync, closeSync, fsyncSync, openSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { asIoFailure, atPath } from '../core/errors.js';

/**
 * Writes `chunks` to `path` atomically: a temporary file in the same directory
 * (`<path>.tmp-<pid>`), fsync, rename over `path`, then fsync of the directory so the
 * rename itself survives a power loss. A crash leaves either the old file or the new
 * one under `path`, never a mix (at worst a stray temporary file). A failed write (disk
 * full, read-only or vanished folder, ...) removes the temporary file, leaves `path` as it
 * was and throws an `IoFailure` naming `path`.
 */
export function writeFileAtomic(path: string, chunks: Array<Uint8Array | string>): void {
  const tmp = `${path}.tmp-${process.pid}`;
  let fd: number | undefined;
  try {
    fd = openSync(tmp, 'w');
    for (const chunk of chunks) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
      for (let done = 0; done < bytes.byteLength;) done += writeSync(fd, bytes, done, bytes.byteLength - done);
    }
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    renameSync(tmp, path);
  } catch (e) {
    if (fd !== undefined) closeQuietly(fd);
    removeQuietly(tmp);
    throw asIoFailure(e, path, 'writing');
  }
  syncDirectory(dirname(path));
}

/** `writeFileSync`, failing with an `IoFailure` naming `path`. */
export function writeFileReported(path: string, data: string | Uint8Array): void {
  atPath(path, 'writing', () => writeFileSync(path, data));
}

/** `appendFileSync`, failing with an `IoFailure` naming `path`. */
export function appendFileReported(path: string, data: string): void {
  atPath(path, 'writing', () => appendFileSync(path, data));
}

// After a failed write: that error is the one reported, not one of the clean-up.
function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // See above.
  }
}

function removeQuietly(tmp: string): void {
  try {
    rmSync(tmp, { force: true });
  } catch {
    // See above (e.g. a folder of that name, which is not ours).
  }
}

/** fsync of a directory (its entries); a no-op where directories cannot be opened or synced. */
function syncDirectory(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Not supported on this platform or file system: the rename is still atomic.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
