import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Injection token of every {@link Logger} (resolved with `injectAll`). */
export const LOGGER = Symbol.for('ssl-zoo.Logger');

/** A metrics sink (local run directory, W&B, ...). Only rank 0 logs. */
export interface Logger {
  /** The run's full resolved configuration, once at the start. */
  logHyperparams(config: Record<string, unknown>): void;
  /** Metrics named `train/...` or `val/...` at an optimizer step. */
  logMetrics(metrics: Record<string, number>, step: number): void;
  /** End of the run: summary values and whether it finished or failed. */
  finalize(status: 'success' | 'failed', summary: Record<string, number>): void | Promise<void>;
}

/**
 * The local run directory, the source of truth for a run: `config.json`,
 * `metrics.jsonl` (one JSON object per logging call: `{"step", "time", ...metrics}`)
 * and `summary.json`. The directory is created at the first write, not at construction:
 * every rank constructs the logger, only rank 0 logs, so only rank 0 creates it (other
 * ranks may see another file system, or the same shared one).
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

  logHyperparams(config: Record<string, unknown>): void {
    writeFileSync(join(this.dir(), 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  }

  logMetrics(metrics: Record<string, number>, step: number): void {
    this.dir();
    appendFileSync(this.metricsPath, `${JSON.stringify({ step, time: Date.now() / 1000, ...metrics })}\n`);
  }

  finalize(status: 'success' | 'failed', summary: Record<string, number>): void {
    writeFileSync(join(this.dir(), 'summary.json'), `${JSON.stringify({ status, ...summary }, null, 2)}\n`);
  }
}
