import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './files.js';

/** Injection token of every {@link Logger} (resolved with `injectAll`). */
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
  /** End of the run: summary values, whether it finished or failed, and why it failed. */
  finalize(status: 'success' | 'failed', summary: Record<string, number>, reason?: string): void | Promise<void>;
}

/**
 * The local run directory, the source of truth for a run: `config.json`,
 * `metrics.jsonl` (one JSON object per logging call: `{"step", "time", ...metrics}`)
 * and `summary.json` (`{"status", "reason" (when failed), ...summary}`, written at the end).
 * The directory is created at the first write, not at construction: every rank constructs
 * the logger, only rank 0 logs, so only rank 0 creates it (other ranks may see another file
 * system, or the same shared one).
 */
export class RunDirLogger implements Logger {
  private readonly metricsPath: string;
  private created = false;

  constructor(readonly runDir: string) {
    this.metricsPath = join(runDir, 'metrics.jsonl');
  }

  private dir(): string {
    if (!this.created) mkdirSync(this.runDir, { recursive: true });
    this.created = true;
    return this.runDir;
  }

  /**
   * Cuts `metrics.jsonl` back to the rows of steps <= `step` (rewritten atomically; lines
   * that are not JSON, such as one cut short by a crash, go too) and removes the
   * `summary.json` of an earlier attempt: until this run ends, the run is unfinished.
   */
  beginAt(step: number): void {
    rmSync(join(this.runDir, 'summary.json'), { force: true });
    if (!existsSync(this.metricsPath)) return;
    const lines = readFileSync(this.metricsPath, 'utf8').split('\n').filter((l) => l.trim() !== '');
    const kept = lines.filter((line) => {
      try {
        const row = JSON.parse(line) as { step?: unknown };
        return typeof row.step === 'number' && row.step <= step;
      } catch {
        return false;
      }
    });
    if (kept.length === lines.length) return;
    writeFileAtomic(this.metricsPath, [kept.map((l) => `${l}\n`).join('')]);
  }

  logHyperparams(config: Record<string, unknown>): void {
    writeFileSync(join(this.dir(), 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  }

  logMetrics(metrics: Record<string, number>, step: number): void {
    this.dir();
    appendFileSync(this.metricsPath, `${JSON.stringify({ step, time: Date.now() / 1000, ...metrics })}\n`);
  }

  finalize(status: 'success' | 'failed', summary: Record<string, number>, reason?: string): void {
    const record = reason === undefined ? { status, ...summary } : { status, reason, ...summary };
    writeFileAtomic(join(this.dir(), 'summary.json'), [`${JSON.stringify(record, null, 2)}\n`]);
  }
}
