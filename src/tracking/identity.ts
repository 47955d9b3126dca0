/**
 * Who a run is in Weights & Biases, and where it goes: the mode (online, offline,
 * disabled), the server and whether an API key for it is at hand, the identity derived
 * from the run's config (project, entity, name, group, tags), and `<runDir>/wandb.json`,
 * which records that identity and whether W&B has all of the run's history, so that
 * `ssl-train wandb-sync` can upload it later (offline runs, failed uploads).
 */
import { randomInt } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import { writeFileAtomic } from '../trainer/files.js';

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

const PUBLIC_CLOUD = 'https://api.wandb.ai';

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

/** Writes `<runDir>/wandb.json` atomically (temporary file, then rename; an `IoFailure` naming it when that fails). */
export function writeWandbRunInfo(runDir: string, info: WandbRunInfo): void {
  writeFileAtomic(join(runDir, WANDB_INFO_FILE), [`${JSON.stringify({ ...info, updatedAt: new Date().toISOString() }, null, 2)}\n`]);
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
