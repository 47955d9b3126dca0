import { UserError } from '../core/errors.js';
import {
  deriveWandbIdentity,
  newWandbRunId,
  parseTags,
  readWandbRunInfo,
  summarizeHistory,
  wandbApiKeyAvailable,
  wandbBaseUrl,
  WANDB_INFO_FORMAT,
  wandbExitCode,
  WandbUploader,
  writeWandbRunInfo,
  type WandbRunInfo,
} from '../tracking/index.js';
import { historyRows, readRunDir, readRunSummary, runStatus, type HistoryRow } from '../trainer/run-dir.js';
import { checkRunDirFree, runLockPath } from '../trainer/run-lock.js';

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
  /** What stopped an interrupted run (`SIGTERM`, ...). */
  signal?: string;
}

/**
 * Reads what a run directory must hold to be uploaded: `config.json` and `metrics.jsonl`
 * (`summary.json` when the run finished). Each problem is a user error naming the path.
 */
export function readLocalRun(runDir: string, command = 'wandb-sync'): LocalRun {
  const { config, records } = readRunDir(runDir, command);
  const rows = historyRows(records);
  const summaryJson = readRunSummary(runDir, command) ?? {};
  const summary = Object.fromEntries(Object.entries(summaryJson).filter((e): e is [string, number] => typeof e[1] === 'number'));
  const signal = typeof summaryJson.signal === 'string' ? summaryJson.signal : undefined;
  return { runDir, config, rows, summary, status: runStatus(summaryJson), signal };
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
 * is sent; problems with them are user errors, and so is a run still training (its lock held).
 */
export async function wandbSync(runDirs: string[], options: WandbSyncOptions = {}): Promise<WandbSyncResult[]> {
  const env = options.env ?? process.env;
  if (runDirs.length === 0) throw new UserError('wandb-sync: no RUN_DIR given');
  // A run still training writes wandb.json and its history itself: it is uploaded once it is done.
  for (const dir of runDirs) checkRunDirFree(dir, { unlockHint: `delete ${runLockPath(dir)}`, context: 'wandb-sync' });
  const runs = runDirs.map((dir) => readLocalRun(dir));
  const baseUrl = wandbBaseUrl(env);
  if (!wandbApiKeyAvailable(env, baseUrl)) {
    throw new UserError(`wandb-sync: no W&B API key for ${baseUrl}: set WANDB_API_KEY (or log in with \`wandb login\`)`);
  }
  const results: WandbSyncResult[] = [];
  for (const run of runs) {
    const info = runInfoFor(run, env);
    const uploader = new WandbUploader(
      {
        id: info.id,
        project: info.project,
        entity: info.entity,
        name: info.name,
        group: info.group,
        tags: info.tags,
        jobType: info.jobType,
        config: run.config,
      },
      { env, retryDelaysMs: options.retryDelaysMs },
    );
    uploader.start();
    for (const row of run.rows) uploader.log(row.step, row.values);
    const status = run.status === 'success' || run.status === 'interrupted' ? run.status : 'failed';
    const outcome = await uploader.finish(wandbExitCode(status, run.signal), summarizeHistory(run.rows, run.summary), options.timeoutMs ?? 120_000);
    const updated: WandbRunInfo = {
      ...info,
      baseUrl,
      entity: outcome.entity ?? info.entity,
      url: outcome.url ?? info.url,
      state: outcome.ok ? 'synced' : 'unsynced',
    };
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
