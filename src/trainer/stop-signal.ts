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
 * for a stop and the handlers are removed, so that a second signal ends the process at once
 * by its default action, even inside a long computation or a blocked collective.
 *
 * With `--devices N`, Ctrl-C in a terminal reaches each rank twice: from the terminal, which
 * signals the whole foreground process group, and from the launcher, which forwards what it
 * receives (a Slurm signal sent to every process of a step does the same). So the launcher
 * forwards the first signal as a message on the IPC channel it opens to each rank
 * ({@link STOP_MESSAGE}), not as a signal, to the ranks that said they listen for it
 * ({@link STOP_LISTENING_MESSAGE}): a rank takes it as a stop request like a signal, or as
 * the same request when a signal came first, and a signal after it as the second one. The
 * launcher forwards any further signal as itself.
 */
import { constants } from 'node:os';

/** The signals that ask training to stop. */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGUSR1'] as const;

/** One of {@link STOP_SIGNALS}. */
export type StopSignalName = (typeof STOP_SIGNALS)[number];

/** The type of the launcher's message that forwards a stop signal over the IPC channel: `{ type, signal }`. */
export const STOP_MESSAGE = 'ssl-zoo-stop';

/**
 * The type of a worker's message to its launcher once it listens for {@link STOP_MESSAGE}
 * (`{ type }`); until then, and for workers that never do, the launcher forwards signals as
 * themselves.
 */
export const STOP_LISTENING_MESSAGE = 'ssl-zoo-stop-listening';

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
  /** Listens to the launcher's messages (none without an IPC channel). */
  onMessage(listener: (message: unknown) => void): void;
  offMessage(listener: (message: unknown) => void): void;
  /** Ends this process by `signal`'s default action (called with the listeners removed). */
  kill(signal: StopSignalName): void;
}

const processTarget: SignalTarget = {
  on: (signal, listener) => process.on(signal, listener),
  off: (signal, listener) => process.off(signal, listener),
  onMessage: (listener) => {
    if (!process.channel || !process.send) return;
    process.on('message', listener);
    process.channel.unref(); // listening must not keep the process alive
    process.send({ type: STOP_LISTENING_MESSAGE });
  },
  offMessage: (listener) => process.off('message', listener),
  // With no listener left the signal's default action applies (SIGUSR1's too: once a listener
  // was installed, Node no longer starts its inspector on it).
  kill: (signal) => process.kill(process.pid, signal),
};

/** The signal a launcher's stop message forwards, or undefined for any other message. */
function forwardedSignal(message: unknown): StopSignalName | undefined {
  const m = message as { type?: unknown; signal?: unknown } | null;
  return m?.type === STOP_MESSAGE && STOP_SIGNALS.includes(m.signal as StopSignalName) ? (m.signal as StopSignalName) : undefined;
}

/** The handlers of the stop signals in this process (see the module comment). */
export class StopSignal implements StopRequest {
  private first: StopSignalName | undefined;
  private armed = false;
  private readonly listeners = new Map<StopSignalName, () => void>();
  private readonly onMessage = (message: unknown) => {
    const signal = forwardedSignal(message);
    if (signal) this.received(signal);
  };

  constructor(private readonly target: SignalTarget = processTarget) {}

  /** Installs the handlers and returns this; until {@link arm}, a signal ends the process at once. */
  install(): this {
    for (const signal of STOP_SIGNALS) {
      const listener = () => this.received(signal);
      this.listeners.set(signal, listener);
      this.target.on(signal, listener);
    }
    this.target.onMessage(this.onMessage);
    return this;
  }

  /** Removes the handlers: the signals' default actions apply again. */
  uninstall(): void {
    this.removeSignalListeners();
    this.target.offMessage(this.onMessage);
  }

  arm(): void {
    this.armed = true;
  }

  get requested(): StopSignalName | undefined {
    return this.first;
  }

  private removeSignalListeners(): void {
    for (const [signal, listener] of this.listeners) this.target.off(signal, listener);
    this.listeners.clear();
  }

  private received(signal: StopSignalName): void {
    if (this.first) return; // the launcher's copy of the signal that asked for the stop
    if (!this.armed) {
      this.uninstall();
      this.target.kill(signal);
      return;
    }
    this.first = signal;
    // From now on a signal has its default action: the second one ends the process at once.
    this.removeSignalListeners();
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
