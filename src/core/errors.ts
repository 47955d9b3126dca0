/**
 * A mistake of the user's (bad flag, config value, data file, environment). The CLI prints
 * its message on one line, without a stack trace, and exits with code 2.
 */
export class UserError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UserError';
  }
}

/** Formats the usual "field: value is not allowed; allowed: ..." message. */
export function invalidValue(field: string, value: unknown, allowed: string): UserError {
  return new UserError(`${field}: ${JSON.stringify(value)} is not allowed; expected ${allowed}`);
}

/**
 * A run that cannot go on although the input was fine (e.g. training diverged to NaN).
 * The CLI prints its message on one line, without a stack trace, and exits with code 1.
 */
export class TrainingFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TrainingFailure';
  }
}

/**
 * The error codes of the environment (disk, permissions, vanished files, limits) rather
 * than of a bug: a failed read or write with one of them is an {@link IoFailure}.
 */
const ENVIRONMENT_CODES = new Set([
  'ENOSPC',
  'EDQUOT',
  'EROFS',
  'EACCES',
  'EPERM',
  'EIO',
  'ENOENT',
  'ENOTDIR',
  'EISDIR',
  'EMFILE',
  'ENFILE',
  'EFBIG',
  'ENAMETOOLONG',
  'ELOOP',
  'EBUSY',
  'ETXTBSY',
  'ESTALE',
  'ENXIO',
  'ENODEV',
  'EEXIST',
  'ENOTEMPTY',
]);

/** What a Node file-system error says about the environment: its code, and the error in words. */
export function environmentCode(error: unknown): { code: string; words: string } | undefined {
  const e = error as NodeJS.ErrnoException | undefined;
  if (!(e instanceof Error) || typeof e.code !== 'string' || !ENVIRONMENT_CODES.has(e.code)) return undefined;
  // Node's message is "ENOSPC: no space left on device, write '/path'".
  const words = /^[A-Z0-9_]+: ([^,]+)/.exec(e.message)?.[1] ?? e.code;
  return { code: e.code, words };
}

/**
 * A read or write the environment refused (disk full, read-only or vanished folder,
 * permissions, too many open files): what, where and why, on one line without a stack
 * trace. `exitCode` is 1 for a run that failed, 2 for a bad input the user gave (e.g. an
 * unreadable `--config` file).
 */
export class IoFailure extends Error {
  constructor(
    /** The file or folder. */
    readonly path: string,
    /** What was done to it, as in "while writing": `writing`, `reading`, `creating`, ... */
    readonly operation: string,
    /** The error code (ENOSPC, EACCES, ...). */
    readonly code: string,
    /** The error in words ("no space left on device"). */
    readonly words: string,
    readonly exitCode: 1 | 2 = 1,
    /** What the user should know too (e.g. which checkpoint is still good). */
    readonly note?: string,
  ) {
    super(`${words} while ${operation} ${path}${note === undefined ? '' : `; ${note}`}`);
    this.name = 'IoFailure';
  }

  /** The same failure with `note` added to its message. */
  withNote(note: string): IoFailure {
    return new IoFailure(this.path, this.operation, this.code, this.words, this.exitCode, note);
  }
}

/**
 * `error` as an {@link IoFailure} of `operation` on `path` when it is an environment error
 * (an `IoFailure` already is one), else `error` unchanged (a bug keeps its stack).
 */
export function asIoFailure(error: unknown, path: string, operation: string, exitCode: 1 | 2 = 1): unknown {
  if (error instanceof IoFailure) return error;
  const env = environmentCode(error);
  return env ? new IoFailure(path, operation, env.code, env.words, exitCode) : error;
}

/** Runs `action` on `path`; an environment error it throws becomes an {@link IoFailure} naming `path` and `operation`. */
export function atPath<T>(path: string, operation: string, action: () => T, exitCode: 1 | 2 = 1): T {
  try {
    return action();
  } catch (e) {
    throw asIoFailure(e, path, operation, exitCode);
  }
}

/** The operation a system call was, in the words of "while ... PATH". */
const SYSCALL_WORDS: Record<string, string> = {
  open: 'opening',
  read: 'reading',
  write: 'writing',
  mkdir: 'creating',
  scandir: 'listing',
  opendir: 'listing',
  rename: 'renaming',
  unlink: 'removing',
  rmdir: 'removing',
  rm: 'removing',
  stat: 'reading',
  lstat: 'reading',
  fstat: 'reading',
  access: 'accessing',
  copyfile: 'copying',
  fsync: 'writing',
  close: 'closing',
};

/**
 * An environment error that no write site wrapped, as an {@link IoFailure} (from the path and
 * system call Node's error carries), or undefined when `error` is not one.
 */
export function unwrappedIoFailure(error: unknown): IoFailure | undefined {
  if (error instanceof IoFailure) return error;
  const env = environmentCode(error);
  if (!env) return undefined;
  const { path, syscall } = error as NodeJS.ErrnoException;
  const operation = (syscall && SYSCALL_WORDS[syscall]) ?? (syscall ? `${syscall} of` : 'using');
  return new IoFailure(path ?? 'a file (Node did not say which)', operation, env.code, env.words);
}

/**
 * More training files were unreadable than `--max-bad-samples` allows: the run stops (exit
 * code 1) rather than train on a data set that is no longer the one asked for.
 */
export class BadSamplesFailure extends TrainingFailure {
  constructor(
    /** Without the note. */
    readonly detail: string,
    readonly note?: string,
  ) {
    super(note === undefined ? detail : `${detail}; ${note}`);
    this.name = 'BadSamplesFailure';
  }

  /** The same failure with `note` added to its message. */
  withNote(note: string): BadSamplesFailure {
    return new BadSamplesFailure(this.detail, note);
  }
}
