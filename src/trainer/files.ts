import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Writes `chunks` to `path` atomically: a temporary file in the same directory
 * (`<path>.tmp-<pid>`), fsync, rename over `path`, then fsync of the directory so the
 * rename itself survives a power loss. A crash leaves either the old file or the new
 * one under `path`, never a mix (at worst a stray temporary file).
 */
export function writeFileAtomic(path: string, chunks: Array<Uint8Array | string>): void {
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    for (const chunk of chunks) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
      for (let done = 0; done < bytes.byteLength;) done += writeSync(fd, bytes, done, bytes.byteLength - done);
    }
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw e;
  }
  closeSync(fd);
  renameSync(tmp, path);
  syncDirectory(dirname(path));
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
