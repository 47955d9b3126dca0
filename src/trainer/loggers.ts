import { mkdirSync } from 'node:fs';
import { appendMetrics, rewindRunDir, writeRunConfig, writeRunSummary, type RunStatus } from './run-dir.js';

export type { RunStatus } from './run-dir.js';

/**
 * Injection token of the {@link Logger}s (the trainer injects them all, in registration
 * order). Register an instance (`registerInstance(LOGGER, logger)`) or a class
 * (`register(LOGGER, MyLogger)`, constructed from the run's container: an `@injectable()`
 * one may `@inject(STRATEGY)`, `@inject(TRAINER_OPTIONS)`, ...).
 */
export const LOGGER = Symbol.for('ssl-zoo.Logger');

/** A metrics sink (local run directory, W&B, ...). Only rank 0 logs. */
export interface Logger {
  /**
   * Called once before {@link logHyperparams}: training continues after optimizer step
   * `step` (0 for a fresh start, a checkpoint's step when resuming). Anything an earlier
   * attempt logged after `step` is history that is about to be redone, so a logger that
   * keeps history drops it: every step then appears exactly once.
   */
  beginAt?(step: number): void;
  /** The run's full resolved configuration, once at the start. */
  logHyperparams(config: Record<string, unknown>): void;
  /** Metrics named `train/...` or `val/...` at an optimizer step. */
  logMetrics(metrics: Record<string, number>, step: number): void;
  /**
   * End of the run: summary values, whether it finished, failed or was interrupted, why it
   * failed or stopped, and for an interrupted run the signal that stopped it.
   */
  finalize(status: RunStatus, summary: Record<string, number>, reason?: string, signal?: string): void | Promise<void>;
}

/**
 * Logs to the local run directory, the source of truth for a run (`config.json`,
 * `metrics.jsonl`, `summary.json`; see run-dir.ts).
 * The directory is created at the first write, not at construction: every rank constructs
 * the logger, only rank 0 logs, so only rank 0 creates it (other ranks may see another file
 * system, or the same shared one).
 */
export class RunDirLogger implements Logger {
  private created = false;

  constructor(readonly runDir: string) {}

  private dir(): string {
    if (!this.created) mkdirSync(this.runDir, { recursive: true });
    this.created = true;
    return this.runDir;
  }

  /** Drops what an earlier attempt logged after `step`, and its summary (see {@link rewindRunDir}). */
  beginAt(step: number): void {
    rewindRunDir(this.runDir, step);
  }

  logHyperparams(config: Record<string, unknown>): void {
    writeRunConfig(this.dir(), config);
  }

  logMetrics(metrics: Record<string, number>, step: number): void {
    appendMetrics(this.dir(), step, metrics);
  }

  finalize(status: RunStatus, summary: Record<string, number>, reason?: string, signal?: string): void {
    writeRunSummary(this.dir(), status, summary, reason, signal);
  }
}
