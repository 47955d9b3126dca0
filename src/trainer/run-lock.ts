/**
 * The run directory's lock: one training run at a time writes a run directory.
 *
 * The run that writes the directory (global rank 0) holds `<runDir>/ssl-train.lock`, a JSON
 * file naming it: pid, host, start time and command line. The file appears atomically
 * with its content (written to a temporary file, then hard-linked to the lock's name,
 * which fails when the name exists), so a reader never sees a half-written lock. It is
 * removed when the run ends, whichever way (success, failure, a signal that stops the run
 * through its `finally`, or the process exiting); only SIGKILL or a crash leaves it behind.
 *
 * A lock left behind is stale when its pid is no longer alive on this host: the next run
 * takes it over with a warning. A lock from another host (a shared file system) cannot be
 * checked from here: it is respected unless the run is told `--force-unlock`. Taking over
 * is atomic: of two runs taking over the same stale lock, one wins, the other is refused.
 *
 * Readers (`compare`, `knn`, `linear`, `embed`, `export`) take no lock: checkpoints are
 * replaced atomically, and they ignore a `metrics.jsonl` line still being appended.
 * `wandb-sync`, which writes `wandb.json` as a running run's W&B logger does, refuses a run
 * whose lock is held ({@link checkRunDirFree}).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';

/** The lock file's name inside the run directory. */
export const RUN_LOCK_FILE = 'ssl-train.lock';

/** What the lock file records about the run holding it. */
export interface RunLockHolder {
  pid: number;
  host: string;
  /** ISO 8601 time the lock was taken. */
  startedAt: string;
  /** The holder's command line. */
  command: string;
  /** Unique per acquisition: tells this lock from a later one of the same pid. */
  token: string;
}

/** A held lock; {@link RunLock.release} removes it (once; it is also removed at process exit). */
export interface RunLock {
  readonly path: string;
  readonly holder: RunLockHolder;
  release(): void;
}

/** Options of {@link acquireRunLock} and {@link checkRunDirFree}. */
export interface RunLockOptions {
  /** Take over any lock, also a live one or one from another host (`--force-unlock`). */
  forceUnlock?: boolean;
  /** The command line recorded in the lock (default this process's). */
  command?: string;
  /** Where takeover warnings go (default stderr, one line each). */
  warn?: (line: string) => void;
  /** What a refusal tells the user to do when the holder is gone (default `pass --force-unlock`). */
  unlockHint?: string;
  /** The command a refusal's message starts with (`wandb-sync: run directory ...`); none by default. */
  context?: string;
}

/** How many times acquiring goes round (create, find a stale lock, take it over) before giving up. */
const MAX_ATTEMPTS = 20;
/** The longest command line a message quotes. */
const MAX_COMMAND_CHARS = 100;

/** The path of `runDir`'s lock file. */
export function runLockPath(runDir: string): string {
  return join(runDir, RUN_LOCK_FILE);
}

/** This process's command line as a user typed it (`ssl-train --method ...`). */
function ownCommand(): string {
  return ['ssl-train', ...process.argv.slice(2)].join(' ');
}

function errorCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException).code;
}

/** The lock file's text, or undefined when there is none. */
function readLockText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if (errorCode(e) === 'ENOENT') return undefined;
    throw e;
  }
}

/** The holder a lock file's text names, or undefined when it is not a lock this module wrote. */
export function parseRunLock(text: string): RunLockHolder | undefined {
  try {
    const value = JSON.parse(text) as Partial<RunLockHolder>;
    const { pid, host, startedAt, command, token } = value;
    if (!Number.isInteger(pid) || typeof host !== 'string' || typeof startedAt !== 'string' || typeof command !== 'string' || typeof token !== 'string') {
      return undefined;
    }
    return { pid: pid as number, host, startedAt, command, token };
  } catch {
    return undefined;
  }
}

/** The holder of `runDir`'s lock, or undefined when it is not locked (or the lock is unreadable). */
export function readRunLock(runDir: string): RunLockHolder | undefined {
  const text = readLockText(runLockPath(runDir));
  return text === undefined ? undefined : parseRunLock(text);
}

/** Whether process `pid` exists on this host (EPERM: it exists, owned by another user). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return errorCode(e) !== 'ESRCH';
  }
}

/** `alive` (this host, pid running), `dead` (this host, pid gone: stale), `foreign` (another host), `unknown` (unreadable lock). */
type HolderState = 'alive' | 'dead' | 'foreign' | 'unknown';

function holderState(holder: RunLockHolder | undefined): HolderState {
  if (!holder) return 'unknown';
  if (holder.host !== hostname()) return 'foreign';
  return processAlive(holder.pid) ? 'alive' : 'dead';
}

/** `14:02:11` today, else `2026-11-26 14:02:11` (local time); the raw text when it is no date. */
function formatSince(iso: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, '0');
  const time = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  const now = new Date();
  if (date.toDateString() === now.toDateString()) return time;
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${time}`;
}

function shortCommand(command: string): string {
  return command.length <= MAX_COMMAND_CHARS ? command : `${command.slice(0, MAX_COMMAND_CHARS - 4)} ...`;
}

/** `pid 1234 on host h since 14:02:11 (ssl-train ...)`. */
function describeHolder(holder: RunLockHolder): string {
  return `pid ${holder.pid} on host ${holder.host} since ${formatSince(holder.startedAt)} (${shortCommand(holder.command)})`;
}

/** The one-line refusal of a run into a directory whose lock is held. */
function inUseError(runDir: string, holder: RunLockHolder | undefined, state: HolderState, options: RunLockOptions): UserError {
  const { unlockHint = 'pass --force-unlock', context } = options;
  const prefix = context === undefined ? '' : `${context}: `;
  if (!holder) {
    return new UserError(
      `${prefix}run directory ${runDir} is locked by ${runLockPath(runDir)}, which names no holder (empty or not written by ssl-train); ${unlockHint} if no run is using it`,
    );
  }
  const where = state === 'foreign' ? ' (another host: whether it still runs cannot be checked from here)' : '';
  return new UserError(`${prefix}run directory ${runDir} is in use by ${describeHolder(holder)}${where}; wait for it, or ${unlockHint} if that run is gone`);
}

/**
 * Throws the one-line user error of a run into `runDir` while another run holds its lock
 * (alive on this host, or on another host without `forceUnlock`). A stale lock is no
 * obstacle (the run takes it over). Reads only: for the launcher, before it spawns workers.
 */
export function checkRunDirFree(runDir: string, options: RunLockOptions = {}): void {
  if (options.forceUnlock) return;
  const text = readLockText(runLockPath(runDir));
  if (text === undefined) return;
  const holder = parseRunLock(text);
  const state = holderState(holder);
  if (state !== 'dead') throw inUseError(runDir, holder, state, options);
}

/** Creates the lock file holding `text`, atomically; false when a lock file exists. */
function tryCreate(path: string, text: string, token: string): boolean {
  const tmp = `${path}.tmp-${token}`;
  writeFileSync(tmp, text);
  try {
    linkSync(tmp, path);
    return true;
  } catch (e) {
    const code = errorCode(e);
    if (code === 'EEXIST') return false;
    // A file system without hard links: an exclusive create (a reader may see it empty for a moment).
    if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS') return createExclusive(path, text);
    throw e;
  } finally {
    rmSync(tmp, { force: true });
  }
}

function createExclusive(path: string, text: string): boolean {
  try {
    writeFileSync(path, text, { flag: 'wx' });
    return true;
  } catch (e) {
    if (errorCode(e) === 'EEXIST') return false;
    throw e;
  }
}

/**
 * Removes the lock file at `path` if it still holds `seen` (a lock judged stale, or forced),
 * atomically with respect to other takers: the file is renamed to a name of this taker's
 * own (`token`; of concurrent renames one succeeds), then checked; a lock that another run
 * put there since `seen` was read is linked back. True when `seen` was removed.
 */
export function removeLockIfUnchanged(path: string, seen: string, token: string): boolean {
  const moved = `${path}.stale-${token}`;
  try {
    renameSync(path, moved);
  } catch (e) {
    if (errorCode(e) === 'ENOENT') return false; // another taker moved it first
    throw e;
  }
  try {
    if (readFileSync(moved, 'utf8') === seen) return true;
    try {
      linkSync(moved, path); // not the lock we judged: give it back
    } catch (e) {
      if (errorCode(e) !== 'EEXIST') throw e;
    }
    return false;
  } finally {
    rmSync(moved, { force: true });
  }
}

/**
 * Takes the lock of `runDir` for this process (creating the directory): the caller is the
 * run that writes the directory. A stale lock (dead pid on this host) is taken over with a
 * one-line warning, as is any lock with `forceUnlock`; otherwise a held lock is a
 * {@link UserError} naming its holder, and nothing in the directory is changed.
 */
export function acquireRunLock(runDir: string, options: RunLockOptions = {}): RunLock {
  try {
    return takeLock(runDir, options);
  } catch (e) {
    // The directory or the lock file cannot be made (not a directory, no permission, disk full): one line.
    if (e instanceof UserError || errorCode(e) === undefined) throw e;
    throw new UserError(`run directory ${runDir}: cannot take its lock: ${(e as Error).message}`);
  }
}

function takeLock(runDir: string, options: RunLockOptions): RunLock {
  const warn = options.warn ?? ((line: string) => process.stderr.write(`${line}\n`));
  const createdDir = !existsSync(runDir);
  mkdirSync(runDir, { recursive: true });
  const path = runLockPath(runDir);
  const token = `${process.pid}-${randomBytes(6).toString('hex')}`;
  const holder: RunLockHolder = { pid: process.pid, host: hostname(), startedAt: new Date().toISOString(), command: options.command ?? ownCommand(), token };
  const text = `${JSON.stringify(holder, null, 2)}\n`;
  // The warning about the lock this run removed, said once the lock is ours (a run that
  // removes a stale lock and then loses the race for it is refused without it).
  let takeover: string | undefined;
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    if (tryCreate(path, text, token)) {
      if (takeover !== undefined) warn(takeover);
      return heldLock(runDir, path, holder, createdDir);
    }
    const seen = readLockText(path);
    if (seen === undefined) continue; // released or moved meanwhile: try again
    const previous = parseRunLock(seen);
    const state = holderState(previous);
    if (state !== 'dead' && !options.forceUnlock) throw inUseError(runDir, previous, state, options);
    if (!removeLockIfUnchanged(path, seen, token)) continue;
    const who = previous ? describeHolder(previous) : 'an unreadable lock file';
    takeover =
      state === 'dead'
        ? `ssl-train: warning: run directory ${runDir}: taking over the lock of ${who}, which is no longer running`
        : `ssl-train: warning: --force-unlock: taking over the lock of run directory ${runDir} from ${who}`;
  }
  throw new UserError(`run directory ${runDir}: could not take its lock ${path} (other runs kept taking it); try again`);
}

function heldLock(runDir: string, path: string, holder: RunLockHolder, createdDir: boolean): RunLock {
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    process.removeListener('exit', release);
    const text = readLockText(path);
    // Another run may have taken it over (--force-unlock): its lock stays.
    if (text !== undefined && parseRunLock(text)?.token === holder.token) rmSync(path, { force: true });
    if (createdDir) removeIfEmpty(runDir);
  };
  process.on('exit', release);
  return { path, holder, release };
}

/** Removes a directory this run created and left empty (a run that failed before writing). */
function removeIfEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // Not empty (the run wrote something), or gone: it stays as it is.
  }
}
