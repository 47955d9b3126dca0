/**
 * Test-only fault injection for a spawned CLI, loaded before it with
 * `NODE_OPTIONS=--import <this file>` (see {@link faultEnv}); production code has no hook.
 * It patches `node:fs` (the module object, and the named ESM exports through
 * `syncBuiltinESMExports`), driven by the JSON in `SSL_ZOO_TEST_FAULTS` ({@link Faults}):
 *
 * - `failWrites`: writes to files whose path matches `pattern` fail with `code` the way the
 *   kernel fails them: after the first `skipFiles` such files were written in full, the next
 *   one takes `afterBytes` bytes and then its `write` fails (errno error without a path, as
 *   Node gives for a write to a file descriptor). With `atOpen`, opening (and `mkdir`,
 *   `access` for writing) fails instead, with the path, as on a read-only file system.
 * - `removeWhenWritten`: when a file matching `pattern` is written for the `nth` time
 *   (default 1), `paths` are removed (recursively): e.g. data files deleted mid-run, at the
 *   first `metrics.jsonl` row.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { fileURLToPath } from 'node:url';

/** What {@link faultEnv} sets up. */
export interface Faults {
  failWrites?: { pattern: string; code: string; skipFiles?: number; afterBytes?: number; atOpen?: boolean };
  removeWhenWritten?: { pattern: string; paths: string[]; nth?: number };
}

/** The environment that loads this preload into a spawned CLI (and its workers) with `faults`. */
export function faultEnv(faults: Faults): NodeJS.ProcessEnv {
  const preload = fileURLToPath(import.meta.url);
  return { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${preload}`.trim(), SSL_ZOO_TEST_FAULTS: JSON.stringify(faults) };
}

const WORDS: Record<string, [number, string]> = {
  ENOSPC: [-28, 'no space left on device'],
  EDQUOT: [-122, 'disk quota exceeded'],
  EROFS: [-30, 'read-only file system'],
  EACCES: [-13, 'permission denied'],
  EIO: [-5, 'i/o error'],
};

/** An error as Node's fs makes it: "ENOSPC: no space left on device, write" (with `path`: ", open '<path>'"). */
function systemError(code: string, syscall: string, path?: string): NodeJS.ErrnoException {
  const [errno, words] = WORDS[code] ?? [-1, code.toLowerCase()];
  const error: NodeJS.ErrnoException = new Error(`${code}: ${words}, ${syscall}${path === undefined ? '' : ` '${path}'`}`);
  Object.assign(error, { errno, code, syscall, ...(path === undefined ? {} : { path }) });
  return error;
}

function install(faults: Faults): void {
  const original = { ...fs };
  const failWrites = faults.failWrites;
  const failPattern = failWrites && new RegExp(failWrites.pattern);
  const removal = faults.removeWhenWritten;
  const removalPattern = removal && new RegExp(removal.pattern);
  let filesWritten = 0;
  let removalWrites = 0;
  /** Open descriptors of matching files: bytes they may still take (Infinity: all). */
  const budgets = new Map<number, number>();

  const pathOf = (p: fs.PathLike | number): string | undefined => (typeof p === 'number' ? undefined : String(p));
  const isWrite = (flags: fs.OpenMode | undefined) => typeof flags === 'string' && /[wa+]/.test(flags);
  /** A write to `path` begins: removals, then the byte budget of the file (Infinity when it is not failed). */
  const beginWrite = (path: string | undefined): number => {
    if (path === undefined) return Infinity;
    if (removal && removalPattern!.test(path) && ++removalWrites === (removal.nth ?? 1)) {
      for (const p of removal.paths) original.rmSync(p, { recursive: true, force: true });
    }
    if (!failWrites || !failPattern!.test(path)) return Infinity;
    if (failWrites.atOpen) throw systemError(failWrites.code, 'open', path);
    return filesWritten++ < (failWrites.skipFiles ?? 0) ? Infinity : (failWrites.afterBytes ?? 0);
  };

  /** Inside a whole-file write: the fs calls it makes itself (open, write, writeFileSync) are not counted again. */
  let inWholeFile = false;
  const wholeFileWrite = (path: fs.PathOrFileDescriptor, write: () => void): void => {
    if (inWholeFile) return write();
    if (beginWrite(pathOf(path as fs.PathLike)) !== Infinity) throw systemError(failWrites!.code, 'write');
    inWholeFile = true;
    try {
      write();
    } finally {
      inWholeFile = false;
    }
  };

  const patched: Partial<typeof fs> = {
    openSync(path: fs.PathLike, flags?: fs.OpenMode, mode?: fs.Mode): number {
      const budget = isWrite(flags) && !inWholeFile ? beginWrite(pathOf(path)) : Infinity;
      const fd = original.openSync(path, flags ?? 'r', mode);
      if (budget !== Infinity) budgets.set(fd, budget);
      return fd;
    },
    closeSync(fd: number): void {
      budgets.delete(fd);
      original.closeSync(fd);
    },
    writeSync(fd: number, buffer: NodeJS.ArrayBufferView | string, ...rest: unknown[]): number {
      const budget = budgets.get(fd);
      if (budget === undefined) return (original.writeSync as (...a: unknown[]) => number)(fd, buffer, ...rest);
      if (budget <= 0) throw systemError(failWrites!.code, 'write');
      const bytes = typeof buffer === 'string' ? Buffer.from(buffer) : Buffer.from(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      const [offset = 0, length = bytes.byteLength - Number(offset)] = rest as [number?, number?];
      const n = Math.min(Number(length), budget);
      const written = original.writeSync(fd, bytes, Number(offset), n);
      budgets.set(fd, budget - written);
      return written;
    },
    writeFileSync(path: fs.PathOrFileDescriptor, data: string | NodeJS.ArrayBufferView, options?: fs.WriteFileOptions): void {
      wholeFileWrite(path, () => original.writeFileSync(path, data, options));
    },
    appendFileSync(path: fs.PathOrFileDescriptor, data: string | Uint8Array, options?: fs.WriteFileOptions): void {
      wholeFileWrite(path, () => original.appendFileSync(path, data, options));
    },
    mkdirSync(path: fs.PathLike, options?: fs.MakeDirectoryOptions | fs.Mode | null) {
      if (failWrites?.atOpen && failPattern!.test(String(path))) throw systemError(failWrites.code, 'mkdir', String(path));
      return original.mkdirSync(path, options as fs.MakeDirectoryOptions);
    },
    accessSync(path: fs.PathLike, mode?: number): void {
      if (failWrites?.atOpen && mode !== undefined && mode & fs.constants.W_OK && failPattern!.test(String(path))) {
        throw systemError(failWrites.code, 'access', String(path));
      }
      original.accessSync(path, mode);
    },
  } as Partial<typeof fs>;
  Object.assign(fs, patched);
  syncBuiltinESMExports();
}

const spec = process.env.SSL_ZOO_TEST_FAULTS;
if (spec) install(JSON.parse(spec) as Faults);
