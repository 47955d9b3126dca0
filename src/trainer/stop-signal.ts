/**
 * A graceful stop on SIGTERM, SIGINT and SIGUSR1 (Slurm's `--signal` default), as PyTorch
 * Lightning does it: {@link StopSignal} installs the handlers for the duration of a run and
 * says whether a stop was requested, and by which signal; the trainer reads it (injected
 * through {@link TrainerOptions.stop}) at each step, agrees on it over the ranks, writes
 * `last.ckpt` and throws {@link TrainingInterrupted}, which the CLI turns into exit code
 * 128 + the signal's number.
 *
 * Before training starts ({@link StopSignal.arm}) a signal ends the process at once by its
 * default action: nothing of the run has been written yet. While armed, the first signal asks
 * for a stop; a second one ends the process at once, except the same signal again within
 * {@link REPEAT_WINDOW_MS} of the first: with `--devices N`, Ctrl-C in a terminal reaches every
 * rank twice (the terminal signals the whole foreground process group, and the launcher
 * forwards what it receives), as does a Slurm signal sent to every process of a step, and
 * those two copies are one request.
 */
import { constants } from 'node:os';

/** The signals that ask training to stop. */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGUSR1'] as const;

/** One of {@link STOP_SIGNALS}. */
export type StopSignalName = (typeof STOP_SIGNALS)[number];

/**
 * How long a repeat of the first signal still counts as the same request (the copies of one
 * Ctrl-C that reach a rank from the terminal and from the launcher arrive within
 * milliseconds of each other; a person pressing Ctrl-C again to force the stop takes longer).
 */
export const REPEAT_WINDOW_MS = 1000;

/** The signal's number (SIGINT 2, SIGUSR1 10, SIGTERM 15 on Linux). */
export function signalNumber(signal: StopSignalName): number {
  return constants.signals[signal];
}

/** The signal with number `signo` among {@link STOP_SIGNALS}, or undefined. */
export function stopSignalNamed(signo: number): StopSignalName | undefined {
  return STOP_SIGNALS.find((s) => signalNumber(s) === signo);
}

/** The conventional exit code of a process stopped by `signal`: 128 + its number (130, 143, 138). */
export function signalExitCode(signal: StopSignalName): number {
  return 128 + signalNumber(signal);
}

/**
 * Lets the event loop handle pending signals: Node runs signal listeners only between
 * macrotasks, and a training loop whose awaits all settle as microtasks (the CPU engines'
 * reads) never gets there. Resolves after one turn of the loop (setImmediate: after its I/O poll).
 */
export function handlePendingSignals(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** What the trainer reads: whether a stop was requested, and by which signal. */
export interface StopRequest {
  /** The signal that asked this process to stop, or undefined. */
  readonly requested: StopSignalName | undefined;
  /** Training has begun: from now on a signal asks for a graceful stop. */
  arm?(): void;
}

/** Where {@link StopSignal} listens, and how it ends the process (tests pass fakes). */
export interface SignalTarget {
  on(signal: StopSignalName, listener: () => void): unknown;
  off(signal: StopSignalName, listener: () => void): unknown;
  /** Ends this process by `signal`'s default action (called with the listeners removed). */
  kill(signal: StopSignalName): void;
  now(): number;
}

const processTarget: SignalTarget = {
  on: (signal, listener) => process.on(signal, listener),
  off: (signal, listener) => process.off(signal, listener),
  // With no listener left the signal's default action applies (SIGUSR1's too: once a listener
  // was installed, Node no longer starts its inspector on it).
  kill: (signal) => process.kill(process.pid, signal),
  now: () => Date.now(),
};

/** The handlers of the stop signals in this process (see the module comment). */
export class StopSignal implements StopRequest {
  private first: { signal: StopSignalName; at: number } | undefined;
  private armed = false;
  private readonly listeners = new Map<StopSignalName, () => void>();

  constructor(
    private readonly target: SignalTarget = processTarget,
    /** Called once, when the first signal asks for a stop (e.g. to say that the run is stopping). */
    private readonly onRequest?: (signal: StopSignalName) => void,
  ) {}

  /** Installs the handlers and returns this; until {@link arm}, a signal ends the process at once. */
  install(): this {
    for (const signal of STOP_SIGNALS) {
      const listener = () => this.received(signal);
      this.listeners.set(signal, listener);
      this.target.on(signal, listener);
    }
    return this;
  }

  /** Removes the handlers: the signals' default actions apply again. */
  uninstall(): void {
    for (const [signal, listener] of this.listeners) this.target.off(signal, listener);
    this.listeners.clear();
  }

  arm(): void {
    this.armed = true;
  }

  get requested(): StopSignalName | undefined {
    return this.first?.signal;
  }

  private received(signal: StopSignalName): void {
    const now = this.target.now();
    if (this.armed && !this.first) {
      this.first = { signal, at: now };
      this.onRequest?.(signal);
      return;
    }
    if (this.first && signal === this.first.signal && now - this.first.at < REPEAT_WINDOW_MS) return;
    this.uninstall();
    this.target.kill(signal);
  }
}

/**
 * Training stopped at a signal: every rank finished the same optimizer step and
 * `checkpoint` holds it. Thrown by the trainer's `fit` on every rank; the CLI exits with
 * {@link exitCode}.
 */
export class TrainingInterrupted extends Error {
  constructor(
    readonly signal: StopSignalName,
    /** Optimizer steps done. */
    readonly step: number,
    /** The 1-based epoch the stop happened in (the last finished one, at an epoch end). */
    readonly epoch: number,
    /** The checkpoint written at `step` (`<run-dir>/checkpoints/last.ckpt`). */
    readonly checkpoint: string,
  ) {
    super(`interrupted by ${signal} at step ${step} (epoch ${epoch}); ${checkpoint} saved; resume with --resume auto`);
    this.name = 'TrainingInterrupted';
  }

  /** 128 + the signal's number. */
  get exitCode(): number {
    return signalExitCode(this.signal);
  }
}
