import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import {
  deriveWandbIdentity,
  historyRows,
  newWandbRunId,
  parseMetricsJsonl,
  parseTags,
  readWandbRunInfo,
  summarizeHistory,
  wandbApiKeyAvailable,
  wandbBaseUrl,
  WANDB_INFO_FORMAT,
  WandbUploader,
  writeWandbRunInfo,
  type HistoryRow,
  type WandbRunInfo,
} from '../trainer/wandb-logger.js';

/** Options of {@link wandbSync}. */
export interface WandbSyncOptions {
  /** The environment (WANDB_API_KEY, WANDB_BASE_URL, ...); default process.env. */
  env?: NodeJS.ProcessEnv;
  /** How long one run's upload may take (default 120 s). */
  timeoutMs?: number;
  retryDelaysMs?: number[];
}

/** The outcome of syncing one run directory. */
export interface WandbSyncResult {
  runDir: string;
  id: string;
  /** History rows sent (one per logged optimizer step). */
  rows: number;
  ok: boolean;
  url?: string;
  problems: string[];
}

/** A run directory's contents, checked before anything is uploaded. */
interface LocalRun {
  runDir: string;
  config: Record<string, unknown>;
  rows: HistoryRow[];
  summary: Record<string, number>;
  status: string;
}

function readJsonObject(path: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UserError(`${what}: ${path} is not valid JSON (${(e as Error).message.split('\n')[0]})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UserError(`${what}: ${path} must hold a JSON object`);
  return value as Record<string, unknown>;
}

/**
 * Reads what a run directory must hold to be uploaded: `config.json` and `metrics.jsonl`
 * (`summary.json` when the run finished). Each problem is a user error naming the path.
 */
export function readLocalRun(runDir: string, command = 'wandb-sync'): LocalRun {
  if (!existsSync(runDir) || !statSync(runDir).isDirectory()) throw new UserError(`${command}: ${runDir} is not a run directory (it does not exist)`);
  const configPath = join(runDir, 'config.json');
  const metricsPath = join(runDir, 'metrics.jsonl');
  if (!existsSync(configPath)) throw new UserError(`${command}: ${runDir} is not a run directory (no config.json)`);
  if (!existsSync(metricsPath)) throw new UserError(`${command}: ${runDir} has no metrics.jsonl (nothing was logged)`);
  const config = readJsonObject(configPath, command);
  const rows = historyRows(parseMetricsJsonl(readFileSync(metricsPath, 'utf8'), metricsPath));
  const summaryPath = join(runDir, 'summary.json');
  const summaryJson = existsSync(summaryPath) ? readJsonObject(summaryPath, command) : {};
  const summary = Object.fromEntries(Object.entries(summaryJson).filter((e): e is [string, number] => typeof e[1] === 'number'));
  return { runDir, config, rows, summary, status: typeof summaryJson.status === 'string' ? summaryJson.status : 'unfinished' };
}

/** The run's W&B record: `wandb.json` when it has one, else a new run named from its config (and written). */
function runInfoFor(run: LocalRun, env: NodeJS.ProcessEnv): WandbRunInfo {
  const existing = readWandbRunInfo(run.runDir);
  if (existing) return existing;
  const c = run.config;
  const str = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : undefined);
  const identity = deriveWandbIdentity(
    c,
    {
      project: str(c.wandbProject),
      entity: str(c.wandbEntity),
      name: str(c.wandbName),
      group: str(c.wandbGroup),
      tags: c.wandbTags === undefined ? undefined : parseTags(c.wandbTags as string | string[]),
    },
    env,
  );
  const info: WandbRunInfo = {
    format: WANDB_INFO_FORMAT,
    id: newWandbRunId(),
    ...identity,
    mode: 'offline',
    state: 'offline',
    baseUrl: wandbBaseUrl(env),
    updatedAt: '',
  };
  writeWandbRunInfo(run.runDir, info);
  return info;
}

/**
 * Uploads finished runs to W&B from their run directories: config, every history row
 * (from `metrics.jsonl`, one row per optimizer step, from the first) and the summary,
 * under the id, project, group and tags in `wandb.json` (a run without one gets a new W&B
 * run, recorded there). Uploading again is harmless: history rows go to the same line
 * offsets and replace what the server had. Every directory is checked before anything
 * is sent; problems with them are user errors.
 */
export async function wandbSync(runDirs: string[], options: WandbSyncOptions = {}): Promise<WandbSyncResult[]> {
  const env = options.env ?? process.env;
  if (runDirs.length === 0) throw new UserError('wandb-sync: no RUN_DIR given');
  const runs = runDirs.map((dir) => readLocalRun(dir));
  const baseUrl = wandbBaseUrl(env);
  if (!wandbApiKeyAvailable(env, baseUrl)) {
    throw new UserError(`wandb-sync: no W&B API key for ${baseUrl}: set WANDB_API_KEY (or log in with \`wandb login\`)`);
  }
  const results: WandbSyncResult[] = [];
  for (const run of runs) {
    const info = runInfoFor(run, env);
    const uploader = new WandbUploader(
      { id: info.id, project: info.project, entity: info.entity, name: info.name, group: info.group, tags: info.tags, jobType: info.jobType, config: run.config },
      { env, retryDelaysMs: options.retryDelaysMs },
    );
    uploader.start();
    for (const row of run.rows) uploader.log(row.step, row.values);
    const outcome = await uploader.finish(run.status === 'success' ? 0 : 1, summarizeHistory(run.rows, run.summary), options.timeoutMs ?? 120_000);
    const updated: WandbRunInfo = { ...info, baseUrl, entity: outcome.entity ?? info.entity, url: outcome.url ?? info.url, state: outcome.ok ? 'synced' : 'unsynced' };
    if (outcome.ok) delete updated.lastError;
    else updated.lastError = outcome.problems[0];
    writeWandbRunInfo(run.runDir, updated);
    results.push({ runDir: run.runDir, id: info.id, rows: run.rows.length, ok: outcome.ok, url: updated.url, problems: outcome.problems });
  }
  return results;
}

/** One line per run for the terminal. */
export function formatSyncResult(r: WandbSyncResult): string {
  return r.ok
    ? `synced ${r.runDir} -> ${r.url ?? r.id} (${r.rows} history rows)`
    : `failed ${r.runDir}: ${r.problems[0] ?? 'upload did not finish'} (the run directory is unchanged; run wandb-sync again)`;
}
