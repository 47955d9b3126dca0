/**
 * Weights & Biases logging through the official JS SDK (`@wandb/sdk`), built so that W&B
 * can never stop or slow training:
 *
 * - The SDK runs in a worker thread ({@link WandbUploader}). The training loop only posts
 *   messages (no I/O, no awaiting), and the worker's network traffic goes on while the
 *   training thread computes. An SDK crash ends the worker, not the run.
 * - Any failure (no API key, network down, server errors) gives one warning; training goes
 *   on and the local run directory, which always holds every metric, stays the source of
 *   truth. `<runDir>/wandb.json` records the W&B identity of the run (id, project, entity,
 *   name, group, tags) and whether W&B has all of its history, so `ssl-train wandb-sync`
 *   can upload it later (offline runs, failed uploads).
 * - `finalize` waits for the upload a bounded time, then gives up (the worker is ended).
 *
 * The SDK (0.5.1, pinned) needs three workarounds, all applied inside the worker only:
 * its request retry re-awaits the same failed promise instead of re-sending (and can wait
 * for minutes), its file_stream sender ignores HTTP error statuses (history is lost
 * silently), and `wandb.init` forwards neither group nor tags to the server. The worker
 * replaces the two transport methods with bounded retries that re-send and report
 * failures, and adds group, tags and job type to the run's `upsertBucket` call.
 */
import { randomInt } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { format } from 'node:util';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { UserError } from '../core/errors.js';
import type { Logger } from './loggers.js';

/** `online`: stream to W&B while training; `offline`: local only, upload later with wandb-sync; `disabled`: no W&B. */
export type WandbMode = 'online' | 'offline' | 'disabled';

/** Format tag of `wandb.json`. */
export const WANDB_INFO_FORMAT = 'ssl-zoo-wandb/1';

/** Where a run's W&B identity is stored, inside its run directory. */
export const WANDB_INFO_FILE = 'wandb.json';

/** How a run appears in W&B. */
export interface WandbIdentity {
  project: string;
  /** The user or team; unset: the API key's default entity. */
  entity?: string;
  /** Display name. */
  name: string;
  /** Runs of one group are aggregated (e.g. seeds of one method); default `<method>-<backbone>-<dataset>`. */
  group: string;
  tags: string[];
  jobType: string;
}

/**
 * `<runDir>/wandb.json`: everything needed to (re-)upload the run. `state` tells whether
 * W&B holds the whole local history: `synced` (yes), `offline` (never uploaded),
 * `unsynced` (an upload failed or was cut short), `running` (a run in progress, or one
 * that was killed).
 */
export interface WandbRunInfo extends WandbIdentity {
  format: typeof WANDB_INFO_FORMAT;
  /** The W&B run id (8 characters); a resumed run keeps it. */
  id: string;
  mode: 'online' | 'offline';
  state: 'running' | 'synced' | 'unsynced' | 'offline';
  /** W&B server the run was sent to (WANDB_BASE_URL or the public cloud); never the key. */
  baseUrl: string;
  url?: string;
  /** Why W&B does not have everything, when it does not. */
  lastError?: string;
  updatedAt: string;
}

/** One W&B history row: every metric logged at one optimizer step. */
export interface HistoryRow {
  step: number;
  values: Record<string, number>;
}

const PUBLIC_CLOUD = 'https://api.wandb.ai';
const DEFAULT_FINISH_TIMEOUT_MS = 30_000;
/** Waits between attempts of one W&B request (5 attempts, ~7.5 s); transient errors only. */
const DEFAULT_RETRY_DELAYS_MS = [500, 1000, 2000, 4000];
/** One HTTP request to W&B may take this long before it counts as failed. */
const REQUEST_TIMEOUT_MS = 30_000;
const WORKER_KIND = 'ssl-zoo-wandb-worker';

/** The W&B server: WANDB_BASE_URL, or the public cloud. */
export function wandbBaseUrl(env: NodeJS.ProcessEnv = process.env): string {
  return (env.WANDB_BASE_URL || PUBLIC_CLOUD).replace(/\/+$/, '');
}

/**
 * The mode asked for: the explicit setting, else WANDB_MODE (`offline`/`dryrun` ->
 * offline, `disabled` -> disabled, `online`/`run` -> online), else online.
 */
export function resolveWandbMode(explicit: WandbMode | undefined, env: NodeJS.ProcessEnv = process.env): WandbMode {
  if (explicit) return explicit;
  const mode = (env.WANDB_MODE ?? '').trim().toLowerCase();
  if (mode === 'offline' || mode === 'dryrun') return 'offline';
  if (mode === 'disabled') return 'disabled';
  if (mode === '' || mode === 'online' || mode === 'run') return 'online';
  throw new UserError(`WANDB_MODE: ${JSON.stringify(env.WANDB_MODE)} is not allowed; expected online, offline or disabled`);
}

/** Splits `a,b , c` into tags (also accepts a list). */
export function parseTags(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value : value.split(',');
  return items.map((t) => t.trim()).filter((t) => t.length > 0);
}

function text(value: unknown, fallback: string): string {
  return typeof value === 'string' && value.length > 0 ? value : typeof value === 'number' ? String(value) : fallback;
}

/**
 * The W&B identity of a run from its resolved config, so that W&B's grouping compares
 * methods out of the box: project `ssl-zoo-<dataset>` (runs on one dataset side by side),
 * group `<method>-<backbone>-<dataset>` (seeds of one setup aggregate), name
 * `<method>-<backbone>-<dataset>-seed<seed>`, tags method, backbone and dataset. Explicit
 * settings win over WANDB_PROJECT, WANDB_ENTITY, WANDB_NAME, WANDB_RUN_GROUP and
 * WANDB_TAGS, which win over the derived values.
 */
export function deriveWandbIdentity(
  config: Record<string, unknown>,
  overrides: Partial<WandbIdentity> = {},
  env: NodeJS.ProcessEnv = process.env,
): WandbIdentity {
  const method = text(config.method, 'run');
  const backbone = text(config.backbone, 'backbone');
  const dataset = text(config.dataset, 'data');
  const setup = `${method}-${backbone}-${dataset}`;
  const extraTags = overrides.tags ?? parseTags(env.WANDB_TAGS);
  return {
    project: overrides.project || env.WANDB_PROJECT || `ssl-zoo-${dataset}`,
    entity: overrides.entity || env.WANDB_ENTITY || undefined,
    name: overrides.name || env.WANDB_NAME || `${setup}-seed${text(config.seed, '0')}`,
    group: overrides.group || env.WANDB_RUN_GROUP || setup,
    tags: [...new Set([method, backbone, dataset, ...extraTags])],
    jobType: overrides.jobType || 'pretrain',
  };
}

/** A new W&B run id: 8 characters of [a-z0-9], as the SDK makes them. */
export function newWandbRunId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from({ length: 8 }, () => alphabet[randomInt(alphabet.length)]).join('');
}

/** Reads `<runDir>/wandb.json`, or undefined when there is none; a corrupt file is a user error. */
export function readWandbRunInfo(runDir: string): WandbRunInfo | undefined {
  const path = join(runDir, WANDB_INFO_FILE);
  if (!existsSync(path)) return undefined;
  let info: Partial<WandbRunInfo>;
  try {
    info = JSON.parse(readFileSync(path, 'utf8')) as Partial<WandbRunInfo>;
  } catch (e) {
    throw new UserError(`${path}: not valid JSON (${(e as Error).message})`);
  }
  if (info.format !== WANDB_INFO_FORMAT || typeof info.id !== 'string' || typeof info.project !== 'string') {
    throw new UserError(`${path}: not an ssl-zoo W&B record (expected format ${WANDB_INFO_FORMAT} with id and project)`);
  }
  return info as WandbRunInfo;
}

/** Writes `<runDir>/wandb.json` atomically (temporary file, then rename). */
export function writeWandbRunInfo(runDir: string, info: WandbRunInfo): void {
  const path = join(runDir, WANDB_INFO_FILE);
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify({ ...info, updatedAt: new Date().toISOString() }, null, 2)}\n`);
  renameSync(tmp, path);
}

/** One parsed line of `metrics.jsonl`. */
export interface MetricsRecord {
  step: number;
  /** Unix seconds when it was logged. */
  time?: number;
  values: Record<string, number>;
}

/**
 * Parses `metrics.jsonl` (one `{"step", "time", ...metrics}` object per line; `null`, a
 * non-finite value as JSON writes it, reads as NaN). A malformed line is a user error
 * naming the file and line.
 */
export function parseMetricsJsonl(content: string, path: string): MetricsRecord[] {
  const records: MetricsRecord[] = [];
  content.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let object: unknown;
    try {
      object = JSON.parse(line);
    } catch {
      throw new UserError(`${path}:${i + 1}: not a JSON object`);
    }
    if (typeof object !== 'object' || object === null || Array.isArray(object)) throw new UserError(`${path}:${i + 1}: not a JSON object`);
    const { step, time, ...rest } = object as Record<string, unknown>;
    if (typeof step !== 'number' || !Number.isInteger(step) || step < 0) {
      throw new UserError(`${path}:${i + 1}: "step" must be an integer >= 0, got ${JSON.stringify(step)}`);
    }
    const values: Record<string, number> = {};
    for (const [key, value] of Object.entries(rest)) {
      if (typeof value === 'number') values[key] = value;
      else if (value === null) values[key] = NaN;
    }
    records.push({ step, time: typeof time === 'number' ? time : undefined, values });
  });
  return records;
}

/**
 * The run's history as W&B shows it: one row per optimizer step holding every metric
 * logged at that step (training and validation), in increasing step order. When a step
 * was logged again (a resumed run repeats the steps after its last checkpoint), the later
 * values win.
 */
export function historyRows(records: MetricsRecord[]): HistoryRow[] {
  const byStep = new Map<number, Record<string, number>>();
  for (const r of records) byStep.set(r.step, { ...(byStep.get(r.step) ?? {}), ...r.values });
  return [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([step, values]) => ({ step, values }));
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

/** Whether the SDK will find an API key for `baseUrl`: WANDB_API_KEY, or a `.netrc` entry (what `wandb login` writes). */
export function wandbApiKeyAvailable(env: NodeJS.ProcessEnv = process.env, baseUrl = wandbBaseUrl(env)): boolean {
  if (env.WANDB_API_KEY) return true;
  const netrc = env.NETRC || join(env.HOME || homedir(), '.netrc');
  if (!existsSync(netrc)) return false;
  const host = baseUrl.split('://').pop()?.split('/')[0] ?? '';
  let content: string;
  try {
    content = readFileSync(netrc, 'utf8');
  } catch {
    return false;
  }
  const tokens = content.replace(/#.*$/gm, '').split(/\s+/).filter(Boolean);
  let machine: string | undefined;
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i] === 'machine') machine = tokens[i + 1];
    else if (tokens[i] === 'password' && machine === host && tokens[i + 1]) return true;
  }
  return false;
}

/** Wraps config values the way W&B stores them: `{ key: { value, desc } }`. */
function wandbConfig(config: Record<string, unknown>): Record<string, { value: unknown; desc: null }> {
  return Object.fromEntries(Object.entries(config).filter(([, v]) => v !== undefined).map(([k, v]) => [k, { value: v, desc: null }]));
}

// ---------------------------------------------------------------------------------------
// The uploader: the SDK in a worker thread.

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

type ToWorker =
  | { type: 'log'; step: number; row: Record<string, number> }
  | { type: 'finish'; exitCode: number; summary: Record<string, number> };

type FromWorker =
  | { type: 'started'; entity: string; url: string }
  | { type: 'problem'; message: string }
  | { type: 'finished'; ok: boolean; problems: string[] };

interface WorkerInput {
  kind: typeof WORKER_KIND;
  start: WandbRunStart;
  settings: { baseUrl: string; apiKey: string };
  retryDelaysMs: number[];
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
      kind: WORKER_KIND,
      start: this.run,
      settings: { baseUrl: wandbBaseUrl(env), apiKey: env.WANDB_API_KEY ?? '' },
      retryDelaysMs: this.options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS,
    };
    try {
      this.worker = new Worker(new URL(import.meta.url), { workerData: input, env, stdout: true, stderr: true });
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

// ---------------------------------------------------------------------------------------
// The logger.

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
      const metricsPath = join(runDir, 'metrics.jsonl');
      if (existsSync(metricsPath)) this.replay = historyRows(parseMetricsJsonl(readFileSync(metricsPath, 'utf8'), metricsPath));
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
    writeWandbRunInfo(runDir, this.info);
    if (this.mode === 'offline') return;
    if (!wandbApiKeyAvailable(this.env, baseUrl)) {
      this.info.state = 'unsynced';
      this.warnOnce(`no API key for ${baseUrl} (set WANDB_API_KEY, or log in with \`wandb login\`)`);
      writeWandbRunInfo(runDir, this.info);
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

  async finalize(status: 'success' | 'failed', summary: Record<string, number>): Promise<void> {
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
      status === 'success' ? 0 : 1,
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
    writeWandbRunInfo(runDir, info);
  }
}

// ---------------------------------------------------------------------------------------
// The worker thread: the SDK, patched for bounded retries, group and tags.

/** The SDK objects the worker patches (their runtime shape in @wandb/sdk 0.5.1). */
interface SdkInternalApi {
  defaultEntity: string;
  client: { request(options: { document: string; variables: unknown; signal?: AbortSignal }): Promise<unknown> };
}
interface SdkFileStream {
  settings: { baseUrl: string; apiKey?: string };
  runPath: string;
}
interface SdkDocument {
  toString(): string;
}
interface SdkInternalApiClass {
  new (host: string, key?: string, entity?: string): { upsertRun(vars: Record<string, unknown>): Promise<unknown> };
  prototype: unknown;
}

/** An HTTP status worth retrying (or none: a network error or timeout). */
function transient(status: number | undefined): boolean {
  return status === undefined || status === 408 || status === 429 || status >= 500;
}

function describeError(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as Error & { cause?: unknown }).cause;
    const status = (e as { response?: { status?: number } }).response?.status;
    const base = status ? `HTTP ${status}` : e.message.split('\n')[0].slice(0, 200);
    return cause instanceof Error ? `${base} (${cause.message})` : base;
  }
  return String(e).slice(0, 200);
}

async function workerMain(input: WorkerInput): Promise<void> {
  const port = parentPort;
  if (!port) return;
  const problems: string[] = [];
  let failInit: ((e: Error) => void) | undefined;
  const report = (message: string): void => {
    if (problems.includes(message)) return;
    problems.push(message);
    port.postMessage({ type: 'problem', message } satisfies FromWorker);
    failInit?.(new Error(message));
  };
  // The SDK prints progress and errors on the console; errors become problems, the rest is dropped.
  console.log = console.info = console.debug = console.warn = () => undefined;
  console.error = (...args: unknown[]) => report(format(...args).split('\n')[0].slice(0, 300));
  // An SDK listener throws on a failed run instead of rejecting; keep it from ending the worker.
  process.on('uncaughtException', (e) => report(describeError(e)));
  process.on('unhandledRejection', (e) => report(describeError(e)));

  const inbox: ToWorker[] = [];
  let wake: (() => void) | undefined;
  port.on('message', (m: ToWorker) => {
    inbox.push(m);
    wake?.();
  });
  const next = async (): Promise<ToWorker> => {
    while (inbox.length === 0) await new Promise<void>((resolve) => (wake = resolve));
    return inbox.shift() as ToWorker;
  };

  const retrying = async <T>(what: string, attempt: () => Promise<T>, status: (e: unknown) => number | undefined): Promise<T | null> => {
    const delays = input.retryDelaysMs;
    for (let i = 0; ; i++) {
      try {
        return await attempt();
      } catch (e) {
        if (i >= delays.length || !transient(status(e))) {
          report(`${what} failed: ${describeError(e)}`);
          return null;
        }
        await new Promise((resolve) => setTimeout(resolve, delays[i]));
      }
    }
  };

  const { default: wandb } = await import('@wandb/sdk');
  // The SDK's internal modules (not in its exports map), the very instances its entry point loads.
  const sdkRoot = import.meta.resolve('@wandb/sdk');
  const { InternalApi } = (await import(new URL('./dist/internal/api.js', sdkRoot).href)) as { InternalApi: SdkInternalApiClass };
  const { FileStream } = (await import(new URL('./dist/internal/filestream.js', sdkRoot).href)) as { FileStream: { prototype: unknown } };
  const { start } = input;
  const apiProto = InternalApi.prototype as {
    execute(this: SdkInternalApi, query: SdkDocument, vars: Record<string, unknown>): Promise<unknown>;
    upsertRun(this: SdkInternalApi, vars: Record<string, unknown>): Promise<unknown>;
  };
  apiProto.execute = function (query, vars) {
    if (vars.entity === '') vars.entity = this.defaultEntity;
    const operation = /(query|mutation)\s+(\w+)/.exec(query.toString())?.[2] ?? 'GraphQL request';
    return retrying(
      `W&B ${operation}`,
      () => this.client.request({ document: query.toString(), variables: vars, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }),
      (e) => (e as { response?: { status?: number } }).response?.status,
    );
  };
  const upsertRun = apiProto.upsertRun;
  apiProto.upsertRun = function (vars) {
    // wandb.init drops these; W&B sets them through the same upsertBucket mutation.
    // (In place: the SDK reads the entity that execute() fills in back from this object.)
    if (vars.name === start.id) Object.assign(vars, { groupName: start.group, tags: start.tags, jobType: start.jobType });
    return upsertRun.call(this, vars);
  };
  (FileStream.prototype as unknown as { send(this: SdkFileStream, data: unknown): Promise<unknown> }).send = function (data) {
    const body = JSON.stringify(data);
    return retrying(
      'W&B file_stream upload',
      async () => {
        const res = await fetch(this.settings.baseUrl + this.runPath, {
          method: 'POST',
          body,
          headers: {
            'Content-Type': 'application/json',
            Authorization: `Basic ${Buffer.from(`api:${this.settings.apiKey ?? ''}`).toString('base64')}`,
          },
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        await res.arrayBuffer();
        if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status}`), { response: { status: res.status } });
        return res;
      },
      (e) => (e as { response?: { status?: number } }).response?.status,
    );
  };

  type SdkRun = Awaited<ReturnType<typeof wandb.init>>;
  let run: SdkRun | undefined;
  try {
    if (problems.length > 0) throw new Error(problems[0]);
    const failed = new Promise<never>((_, reject) => (failInit = reject));
    run = await Promise.race([
      wandb.init({
        id: start.id,
        project: start.project,
        entity: start.entity,
        name: start.name,
        config: wandbConfig(start.config),
        settings: { ...input.settings, offline: false, silent: true },
      }),
      failed,
    ]);
    failInit = undefined;
    port.postMessage({ type: 'started', entity: run.entity, url: run.url() } satisfies FromWorker);
  } catch (e) {
    failInit = undefined;
    report(`cannot start the run: ${describeError(e)}`);
    run = undefined;
  }

  for (;;) {
    const message = await next();
    if (message.type === 'log') {
      run?.log({ ...message.row }, message.step);
      continue;
    }
    if (run) {
      try {
        await run.finish(message.exitCode);
        // The summary goes last, so the file stream's running summary does not replace it.
        const api = new InternalApi(input.settings.baseUrl, input.settings.apiKey, run.entity);
        const done = await api.upsertRun({ name: start.id, project: start.project, entity: run.entity, summaryMetrics: JSON.stringify(message.summary) });
        if (!done) report('W&B summary upload failed');
      } catch (e) {
        report(`cannot finish the run: ${describeError(e)}`);
      }
    }
    port.postMessage({ type: 'finished', ok: run !== undefined && problems.length === 0, problems } satisfies FromWorker);
    return;
  }
}

if (!isMainThread && (workerData as Partial<WorkerInput> | null)?.kind === WORKER_KIND) {
  void workerMain(workerData as WorkerInput);
}
