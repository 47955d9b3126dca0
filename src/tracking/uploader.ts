/**
 * The uploader: one W&B run streamed through the official JS SDK (`@wandb/sdk`), which
 * runs in a worker thread (uploader-worker.ts), so that W&B can never stop or slow
 * training. `log` only posts a message (no I/O, no awaiting) and the worker's network
 * traffic goes on while the training thread computes; an SDK crash ends the worker, not
 * the run; `finish` waits a bounded time, then gives up (the worker is ended). Problems
 * are collected and reported, never thrown.
 *
 * The protocol between the two threads: the worker gets a {@link WorkerInput}, then
 * `log` messages and one `finish` ({@link ToWorker}); it answers `started`, `problem`s
 * and `finished` ({@link FromWorker}).
 */
import { Worker } from 'node:worker_threads';
import type { HistoryRow } from '../trainer/run-dir.js';
import { wandbBaseUrl, type WandbIdentity } from './identity.js';

/** Waits between attempts of one W&B request (5 attempts, ~7.5 s); transient errors only. */
const DEFAULT_RETRY_DELAYS_MS = [500, 1000, 2000, 4000];

/** What the worker needs to create or resume a run. */
export interface WandbRunStart extends WandbIdentity {
  id: string;
  /** The run's resolved configuration (plain values). */
  config: Record<string, unknown>;
}

/** How an upload ended. */
export interface UploadOutcome {
  /** W&B acknowledged the run, every history row and the summary. */
  ok: boolean;
  /** What went wrong, in order (empty when ok). */
  problems: string[];
  /** The entity the server assigned (the API key's default when none was given). */
  entity?: string;
  url?: string;
  /** The bounded wait ran out and the upload was cut short. */
  timedOut: boolean;
}

/** Options of {@link WandbUploader}. */
export interface UploaderOptions {
  /** The environment the SDK sees (WANDB_API_KEY, WANDB_BASE_URL, ...); default process.env. */
  env?: NodeJS.ProcessEnv;
  /** Waits between attempts of a failing request (transient failures only). */
  retryDelaysMs?: number[];
  /** Called once per distinct problem, as soon as it happens. */
  onProblem?: (message: string) => void;
}

/** Messages to the worker. */
export type ToWorker = { type: 'log'; step: number; row: Record<string, number> } | { type: 'finish'; exitCode: number; summary: Record<string, number> };

/** Messages from the worker. */
export type FromWorker =
  { type: 'started'; entity: string; url: string } | { type: 'problem'; message: string } | { type: 'finished'; ok: boolean; problems: string[] };

/** The worker's `workerData`. */
export interface WorkerInput {
  start: WandbRunStart;
  settings: { baseUrl: string; apiKey: string };
  retryDelaysMs: number[];
}

/** The W&B summary of a history: the last value of every key, the best of every `val/` accuracy, then `extra`. */
export function summarizeHistory(rows: HistoryRow[], extra: Record<string, number> = {}): Record<string, number> {
  const summary: Record<string, number> = {};
  const best: Record<string, number> = {};
  for (const row of rows) {
    for (const [key, value] of Object.entries(row.values)) {
      summary[key] = value;
      if (key.startsWith('val/') && key.includes('acc') && Number.isFinite(value)) best[`${key}_best`] = Math.max(best[`${key}_best`] ?? -Infinity, value);
    }
  }
  if (rows.length > 0) summary._step = rows[rows.length - 1].step;
  return { ...summary, ...best, ...extra };
}

/**
 * Streams one W&B run through the SDK running in a worker thread. `log` only posts a
 * message; `finish` waits a bounded time for the upload to complete. Problems are
 * collected, never thrown.
 */
export class WandbUploader {
  private worker: Worker | undefined;
  private readonly problems: string[] = [];
  private entity: string | undefined;
  private url: string | undefined;
  private finished: UploadOutcome | undefined;
  private settle: ((outcome: UploadOutcome) => void) | undefined;

  constructor(
    readonly run: WandbRunStart,
    private readonly options: UploaderOptions = {},
  ) {}

  /** Starts the worker (and with it the SDK's `wandb.init`). */
  start(): void {
    const env = { ...(this.options.env ?? process.env) };
    delete env.WANDB_MODE; // the uploader always sends; offline runs never start one
    const input: WorkerInput = {
      start: this.run,
      settings: { baseUrl: wandbBaseUrl(env), apiKey: env.WANDB_API_KEY ?? '' },
      retryDelaysMs: this.options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS,
    };
    try {
      this.worker = new Worker(new URL('./uploader-worker.js', import.meta.url), { workerData: input, env, stdout: true, stderr: true });
    } catch (e) {
      this.problem(`cannot start the W&B worker: ${(e as Error).message}`);
      this.end();
      return;
    }
    // The SDK's own output is captured in the worker; anything else stays out of the run's console.
    this.worker.stdout.resume();
    this.worker.stderr.resume();
    this.worker.unref();
    this.worker.on('message', (m: FromWorker) => {
      if (m.type === 'started') {
        this.entity = m.entity;
        this.url = m.url;
      } else if (m.type === 'problem') {
        this.problem(m.message);
      } else if (m.type === 'finished') {
        for (const p of m.problems) this.problem(p);
        this.end(m.ok);
      }
    });
    this.worker.on('error', (e) => this.problem(`W&B worker failed: ${e.message}`));
    this.worker.on('exit', () => this.end());
  }

  /** Queues one history row (returns at once). */
  log(step: number, row: Record<string, number>): void {
    this.post({ type: 'log', step, row });
  }

  /**
   * Ends the run (W&B exit code `exitCode`, final `summary`) and waits at most
   * `timeoutMs` for the worker to upload what is queued; then ends the worker.
   */
  async finish(exitCode: number, summary: Record<string, number>, timeoutMs: number): Promise<UploadOutcome> {
    if (this.finished) return this.finished;
    const done = new Promise<UploadOutcome>((resolve) => (this.settle = resolve));
    this.post({ type: 'finish', exitCode, summary });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
    const result = await Promise.race([done, timeout]);
    clearTimeout(timer);
    if (result === 'timeout') {
      this.problem(`W&B did not finish uploading within ${Math.round(timeoutMs / 1000)} s`);
      this.end(false, true);
    }
    await this.worker?.terminate();
    return this.outcome();
  }

  /** How the upload ended (a failure if it has not ended). */
  private outcome(): UploadOutcome {
    return this.finished ?? { ok: false, problems: [...this.problems], entity: this.entity, url: this.url, timedOut: false };
  }

  private post(message: ToWorker): void {
    if (this.finished || !this.worker) return;
    try {
      this.worker.postMessage(message);
    } catch (e) {
      this.problem(`cannot queue W&B data: ${(e as Error).message}`);
    }
  }

  private problem(message: string): void {
    if (this.problems.includes(message)) return;
    this.problems.push(message);
    this.options.onProblem?.(message);
  }

  private end(ok = false, timedOut = false): void {
    if (this.finished) return;
    if (!ok && this.problems.length === 0) this.problem('the W&B worker stopped before the upload finished');
    this.finished = { ok: ok && this.problems.length === 0, problems: [...this.problems], entity: this.entity, url: this.url, timedOut };
    this.settle?.(this.finished);
  }
}
