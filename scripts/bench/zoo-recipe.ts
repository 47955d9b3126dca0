/**
 * What defines a `bench:zoo` row (the recipe fingerprint), and where a row's interrupted
 * training continues from (`--resume`): its run directory's `checkpoints/last.ckpt`, only when
 * that directory's recipe record (`bench-recipe.json`) has the same fingerprint. A resumed run
 * gives the losses and weights of one never interrupted, bit for bit (docs/training.md), so its
 * row is the same row; its wall time is the sum of its parts.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { TrainConfig } from '../../src/experiment/config.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';

/**
 * Options that do not change what is trained or measured: where and how often things are
 * written (checkpoints included), where training resumes, and validation (kNN and the probe's
 * accuracy in eval mode, which draws no random numbers and changes no weights) before the
 * first step and after every epoch, which gives the comparison picture its curves; the row
 * keeps the last validation.
 */
const NOT_RECIPE = new Set(['runDir', 'dataDir', 'workers', 'logEvery', 'valEvery', 'valAtStart', 'checkpointEverySteps', 'resume']);

/**
 * What defines a row: the options that differ from their defaults (so that a new option added
 * with a default that keeps the old behaviour leaves every row current) and the method's
 * resolved recipe (hyperparameters, optimizer, augmentations).
 */
export function fingerprint(config: TrainConfig): string {
  const cls = getMethodClass(config.method);
  const defaults = new TrainConfig() as unknown as Record<string, unknown>;
  const set = Object.entries(config).filter(([k, v]) => !NOT_RECIPE.has(k) && JSON.stringify(v) !== JSON.stringify(defaults[k]));
  const what = {
    config: Object.fromEntries(set.sort(([a], [b]) => a.localeCompare(b))),
    args: resolveMethodArgs(config.method, config.methodArgs),
    optim: cls.optimDefaults,
    views: cls.viewRecipe,
  };
  return createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 16);
}

/** The file in a row's run directory naming the recipe its checkpoints train. */
const RECIPE_FILE = 'bench-recipe.json';

/**
 * Readies the run directory of `config` for its training and says how it starts: with
 * `resume`, from its `checkpoints/last.ckpt` when the directory's recipe record has the same
 * fingerprint and the checkpoint reads (sets `config.resume`); otherwise fresh, after removing
 * a `last.ckpt` of another recipe (so that a fresh run stopped before its first checkpoint
 * leaves none to resume). Records the recipe in the directory either way.
 */
export function prepareRun(config: TrainConfig, resume: boolean): string {
  const runDir = config.runDir!;
  const last = join(runDir, 'checkpoints', 'last.ckpt');
  const from = resume ? resumePoint(config, last) : { reason: 'without --resume' };
  if (from.path) config.resume = from.path;
  else rmSync(last, { force: true });
  mkdirSync(runDir, { recursive: true });
  writeFileSync(join(runDir, RECIPE_FILE), `${JSON.stringify({ method: config.method, epochs: config.epochs, fingerprint: fingerprint(config) })}\n`);
  return from.path ? `resuming from ${from.reason}` : `starting fresh (${from.reason})`;
}

/** `last` and its step when the run directory's recipe is that of `config` and `last` reads; else why not. */
function resumePoint(config: TrainConfig, last: string): { path?: string; reason: string } {
  if (!existsSync(last)) return { reason: `no ${last}` };
  let recorded: { fingerprint?: unknown; method?: unknown; epochs?: unknown };
  try {
    recorded = JSON.parse(readFileSync(join(config.runDir!, RECIPE_FILE), 'utf8')) as typeof recorded;
  } catch {
    return { reason: `no readable ${join(config.runDir!, RECIPE_FILE)} naming the recipe of ${last}` };
  }
  if (recorded.fingerprint !== fingerprint(config))
    return { reason: `${last} trained another recipe (${String(recorded.method)}, ${String(recorded.epochs)} epochs)` };
  try {
    const checkpoint = loadCheckpoint(last);
    tf.dispose(Object.values(checkpoint.tensors));
    return { path: last, reason: `${last}, step ${String((checkpoint.meta.progress as { step?: unknown } | undefined)?.step)}` };
  } catch (error) {
    return { reason: `${last} cannot be read (${error instanceof Error ? error.message : String(error)})` };
  }
}
