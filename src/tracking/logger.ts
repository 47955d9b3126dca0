/**
 * {@link WandbLogger}: the trainer's {@link Logger} for Weights & Biases, built so that
 * W&B can never stop or slow training. Uploads go through a {@link WandbUploader} (the SDK
 * in a worker thread). Any failure (no API key, network down, server errors) gives one
 * warning; training goes on and the local run directory, which always holds every
 * metric, stays the source of truth. `<runDir>/wandb.json` records the run's W&B identity
 * and whether W&B has all of its history, so `ssl-train wandb-sync` can upload it later.
 * `finalize` waits for the upload a bounded time, then gives up.
 */
import type { Logger, RunStatus } from '../trainer/loggers.js';
import { signalExitCode, STOP_SIGNALS, type StopSignalName } from '../trainer/stop-signal.js';
import { historyRows, readMetrics, type HistoryRow } from '../trainer/run-dir.js';
import {
  deriveWandbIdentity,
  newWandbRunId,
  readWandbRunInfo,
  resolveWandbMode,
  wandbApiKeyAvailable,
  wandbBaseUrl,
  WANDB_INFO_FORMAT,
  writeWandbRunInfo,
  type WandbMode,
  type WandbRunInfo,
} from './identity.js';
import { summarizeHistory, WandbUploader } from './uploader.js';

const DEFAULT_FINISH_TIMEOUT_MS = 30_000;

/** Options of {@link WandbLogger} (flags and environment resolved by the CLI). */
export interface WandbLoggerOptions {
  runDir: string;
  project?: string;
  entity?: string;
  name?: string;
  group?: string;
  /** Added to the derived tags (method, backbone, dataset). */
  tags?: string[];
  /** Default: WANDB_MODE, else online. */
  mode?: WandbMode;
  /** Continue the W&B run recorded in `<runDir>/wandb.json` (same id) instead of starting a new one. */
  resume?: boolean;
  /** The environment (WANDB_*) to honour; default process.env. */
  env?: NodeJS.ProcessEnv;
  /** How long `finalize` waits for the upload (default 30 s). */
  finishTimeoutMs?: number;
  retryDelaysMs?: number[];
  /** Where the one warning and the final note go (default: stderr lines prefixed `ssl-train:`). */
  print?: (line: string) => void;
}

/**
 * A {@link Logger} that mirrors the run to Weights & Biases (rank 0 only: the trainer
 * calls loggers on rank 0 alone, and nothing starts before `logHyperparams`).
 *
 * Step semantics: one W&B history row per optimizer step (`_step` = the trainer's global
 * step), holding the `train/...` metrics of that step and, at an epoch end, the `val/...`
 * metrics computed after it. A resumed run (`resume`) reuses the run id stored in the run
 * directory and first re-sends the history logged before it, so the W&B run ends with the
 * whole history even if an earlier part of it never reached W&B.
 */
export class WandbLogger implements Logger {
  private readonly env: NodeJS.ProcessEnv;
  private readonly mode: WandbMode;
  private info: WandbRunInfo | undefined;
  private uploader: WandbUploader | undefined;
  private warned = false;
  private replay: HistoryRow[] = [];
  private readonly rows: HistoryRow[] = [];
  private pending: HistoryRow | undefined;
  /** Where the trainer said training continues ({@link beginAt}); undefined when it did not say. */
  private startStep: number | undefined;

  constructor(private readonly options: WandbLoggerOptions) {
    this.env = options.env ?? process.env;
    this.mode = resolveWandbMode(options.mode, this.env);
  }

  /** The run's W&B record (after `logHyperparams`), as stored in `wandb.json`. */
  get runInfo(): WandbRunInfo | undefined {
    return this.info;
  }

  private print(line: string): void {
    if (this.options.print) this.options.print(line);
    else process.stderr.write(`ssl-train: ${line}\n`);
  }

  /** Writes `wandb.json`; a failed write (disk full, ...) is a warning: W&B never stops training. */
  private saveInfo(info: WandbRunInfo): void {
    try {
      writeWandbRunInfo(this.options.runDir, info);
    } catch (e) {
      this.warnOnce((e as Error).message);
    }
  }

  private warnOnce(reason: string): void {
    if (this.info) this.info.lastError ??= reason;
    if (this.warned) return;
    this.warned = true;
    const dir = this.options.runDir;
    this.print(`warning: W&B: ${reason}; training goes on and every metric stays in ${dir} (upload later: ssl-train wandb-sync ${dir})`);
  }

  /**
   * Training continues after `step`: a resumed run (step > 0) continues the W&B run of
   * `wandb.json` and re-sends the history up to `step` only (what an earlier attempt
   * logged after it is redone); a fresh start (0) begins a new W&B run. Without this
   * call, the `resume` option decides.
   */
  beginAt(step: number): void {
    this.startStep = step;
  }

  logHyperparams(config: Record<string, unknown>): void {
    if (this.mode === 'disabled') return;
    const { runDir } = this.options;
    const identity = deriveWandbIdentity(config, this.options, this.env);
    const resuming = this.startStep !== undefined ? this.startStep > 0 : this.options.resume;
    const previous = resuming ? readWandbRunInfo(runDir) : undefined;
    if (previous) {
      // Prior history (before this process appends to it), re-sent ahead of the new rows.
      this.replay = historyRows(readMetrics(runDir));
      const upTo = this.startStep;
      if (upTo !== undefined) this.replay = this.replay.filter((row) => row.step <= upTo);
    }
    const baseUrl = wandbBaseUrl(this.env);
    this.info = {
      format: WANDB_INFO_FORMAT,
      id: previous?.id ?? newWandbRunId(),
      ...identity,
      // A resumed run keeps the entity it was created under.
      entity: identity.entity ?? previous?.entity,
      mode: this.mode,
      state: this.mode === 'offline' ? 'offline' : 'running',
      baseUrl,
      url: previous?.url,
      updatedAt: '',
    };
    this.saveInfo(this.info);
    if (this.mode === 'offline') return;
    if (!wandbApiKeyAvailable(this.env, baseUrl)) {
      this.info.state = 'unsynced';
      this.warnOnce(`no API key for ${baseUrl} (set WANDB_API_KEY, or log in with \`wandb login\`)`);
      this.saveInfo(this.info);
      return;
    }
    const { id, project, entity, name, group, tags, jobType } = this.info;
    this.uploader = new WandbUploader(
      { id, project, entity, name, group, tags, jobType, config },
      { env: this.env, retryDelaysMs: this.options.retryDelaysMs, onProblem: (m) => this.warnOnce(m) },
    );
    this.uploader.start();
  }

  logMetrics(metrics: Record<string, number>, step: number): void {
    if (!this.info) return;
    if (this.pending && this.pending.step === step) {
      Object.assign(this.pending.values, metrics);
      return;
    }
    if (this.replay.length > 0) {
      // Prior rows up to the first new step; from there on this run's values replace them.
      for (const row of this.replay) if (row.step < step) this.send(row);
      this.replay = [];
    }
    if (this.pending) this.send(this.pending);
    this.pending = { step, values: { ...metrics } };
  }

  private send(row: HistoryRow): void {
    this.rows.push(row);
    this.uploader?.log(row.step, row.values);
  }

  /**
   * Ends the W&B run with the exit code the CLI exits with: 0 (success), 1 (failed), or
   * 128 + the signal's number for a run a signal interrupted (the JS SDK has no other way to
   * say so: W&B shows it as ended with that code; `--resume auto` continues the same W&B run).
   */
  async finalize(status: RunStatus, summary: Record<string, number>, _reason?: string, signal?: string): Promise<void> {
    const info = this.info;
    if (!info) return;
    for (const row of this.replay) this.send(row);
    this.replay = [];
    if (this.pending) this.send(this.pending);
    this.pending = undefined;
    const { runDir } = this.options;
    if (this.mode === 'offline') {
      this.print(`W&B offline run ${info.id} kept in ${runDir}; upload it with: ssl-train wandb-sync ${runDir}`);
      return;
    }
    if (!this.uploader) return;
    const outcome = await this.uploader.finish(
      wandbExitCode(status, signal),
      summarizeHistory(this.rows, summary),
      this.options.finishTimeoutMs ?? DEFAULT_FINISH_TIMEOUT_MS,
    );
    info.entity = outcome.entity ?? info.entity;
    info.url = outcome.url ?? info.url;
    if (outcome.ok) {
      info.state = 'synced';
      delete info.lastError;
    } else {
      info.state = 'unsynced';
      info.lastError = outcome.problems[0];
      this.warnOnce(outcome.problems[0] ?? 'the upload did not finish');
    }
    this.saveInfo(info);
  }
}

/** The exit code W&B records for a run that ended with `status` (see {@link WandbLogger.finalize}). */
export function wandbExitCode(status: RunStatus, signal?: string): number {
  if (status === 'success') return 0;
  if (status === 'interrupted' && STOP_SIGNALS.includes(signal as StopSignalName)) return signalExitCode(signal as StopSignalName);
  return 1;
}
