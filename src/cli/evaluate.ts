/**
 * The offline evaluation commands of `ssl-train`: `linear`, `knn` and `embed`, each on the
 * backbone of a run directory, a checkpoint or a `--pretrained` path.
 */
import { Command, Option } from 'commander';
import { invalidValue, UserError } from '../core/errors.js';
import { isGlooAvailable, loadGlooAddon } from '../distributed/gloo.js';
import { launchWorkers, workerEnv } from '../distributed/launcher.js';
import { KNN_DISTANCES, type KnnDistance } from '../eval/knn.js';
import { trainFlags } from '../experiment/config.js';
import type { EvalDataOptions } from '../experiment/eval-model.js';
import { LINEAR_AUGMENTATIONS, runLinearEval, type LinearAugmentation, type TrackingOptions } from '../experiment/linear-eval.js';
import { EMBED_SPLITS, runEmbed, runKnnEval } from '../experiment/offline-eval.js';
import { resolvePretrained, type PretrainedSource } from '../experiment/pretrained.js';
import { booleanOrText, numberOrText } from './flag-values.js';

/** The training flags the evaluation commands share (default: the pre-training run's value). */
const DATA_KEYS = ['dataset', 'dataDir', 'valDir', 'valFraction', 'unlabelled', 'imageSize', 'channels', 'syntheticSize', 'backend'] as const;
const TRACKING_KEYS = ['logger', 'wandbProject', 'wandbEntity', 'wandbName', 'wandbGroup', 'wandbTags', 'wandbMode'] as const;

/** A parser of `flag`'s value: an integer >= `min`. */
function integer(flag: string, min: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\s*-?\d+\s*$/.test(value) || n < min) throw invalidValue(flag, value, `an integer >= ${min}`);
    return n;
  };
}

/** A parser of `flag`'s value: a number in `[min, max)` (`> min` when `exclusiveMin`). */
function number(flag: string, min: number, options: { exclusiveMin?: boolean; max?: number } = {}): (value: string) => number {
  return (value) => {
    const n = Number(value);
    const ok = value.trim() !== '' && Number.isFinite(n) && (options.exclusiveMin ? n > min : n >= min) && (options.max === undefined || n < options.max);
    if (!ok) throw invalidValue(flag, value, `a number ${options.exclusiveMin ? '>' : '>='} ${min}${options.max === undefined ? '' : ` and < ${options.max}`}`);
    return n;
  };
}

/** A parser of a comma-separated list whose items `item` parses, reporting the whole list. */
function list<T>(flag: string, what: string, item: (text: string) => T | undefined): (value: string) => T[] {
  return (value) => {
    const items = value.split(',').map((s) => s.trim());
    const parsed = items.map(item);
    if (items.some((s) => s === '') || parsed.some((p) => p === undefined)) throw invalidValue(flag, value, `a comma-separated list of ${what}`);
    return parsed as T[];
  };
}

function choice<T extends string>(flag: string, allowed: readonly T[]): (value: string) => T {
  return (value) => {
    if (!(allowed as readonly string[]).includes(value)) throw invalidValue(flag, value, `one of ${allowed.join(', ')}`);
    return value as T;
  };
}

/** Adds the training flags of `keys` (same names and help), without defaults. */
function addConfigFlags(command: Command, keys: readonly string[]): Command {
  for (const flag of trainFlags().filter((f) => keys.includes(f.key))) {
    const option = new Option(`--${flag.name} ${flag.placeholder}`, `${flag.description} (default: the pre-training run's)`);
    if (flag.kind === 'number') option.argParser(numberOrText);
    if (flag.kind === 'boolean') option.argParser(booleanOrText);
    command.addOption(option);
  }
  return command;
}

/** `linear`, `knn` or `embed` with the backbone's source: `[run-dir]`, `--checkpoint`, `--pretrained`. */
function evaluationCommand(name: string, description: string): Command {
  const command = new Command(name)
    .description(description)
    .argument('[run-dir]', 'pre-training run directory (its newest valid checkpoint)')
    .option('--checkpoint <path>', 'a checkpoint file instead of RUN_DIR')
    .option('--pretrained <path>', 'a run directory or checkpoint (same as RUN_DIR / --checkpoint)')
    .option('--seed <n>', 'seed of the samples and of the classifier', integer('--seed', 0), 0);
  return addConfigFlags(command, DATA_KEYS);
}

/** The one backbone source given to `command`; none or several is a user error. */
function sourceOf(command: string, runDir: string | undefined, opts: Record<string, unknown>): PretrainedSource {
  const given = [
    ['RUN_DIR', runDir],
    ['--checkpoint', opts.checkpoint],
    ['--pretrained', opts.pretrained],
  ].filter(([, v]) => typeof v === 'string') as Array<[string, string]>;
  if (given.length !== 1) {
    const what = given.length === 0 ? 'none was given' : `got ${given.map(([f]) => f).join(' and ')}`;
    throw new UserError(`${command}: give the backbone as RUN_DIR, --checkpoint PATH or --pretrained PATH, exactly one (${what})`);
  }
  return resolvePretrained(given[0][1], given[0][0]);
}

function pick<K extends string>(opts: Record<string, unknown>, keys: readonly K[]): Partial<Record<K, unknown>> {
  return Object.fromEntries(keys.filter((k) => opts[k] !== undefined).map((k) => [k, opts[k]])) as Partial<Record<K, unknown>>;
}

function linearCommand(): Command {
  const command = evaluationCommand(
    'linear',
    "offline linear evaluation of a frozen (or, --finetune, trained) backbone, as solo-learn's main_linear.py: SGD, cosine lr, top-1/top-5 on the test split every epoch, in its own run directory",
  )
    .option('--epochs <n>', 'epochs', integer('--epochs', 1), 100)
    .option('--batch-size <n>', 'training batch (also the feature batch)', integer('--batch-size', 1), 512)
    .option('--lr <x>', 'SGD lr per 256 samples, scaled by batch/256, cosine-annealed to 0', number('--lr', 0, { exclusiveMin: true }), 0.1)
    .option('--momentum <x>', 'SGD momentum', number('--momentum', 0, { max: 1 }), 0.9)
    .option('--weight-decay <x>', 'weight decay', number('--weight-decay', 0), 0)
    .option(
      '--augmentation <kind>',
      'none (features computed once: the fast path) or crop-flip (random resized crop + flip)',
      choice('--augmentation', LINEAR_AUGMENTATIONS),
      'none',
    )
    .option('--finetune', 'train the backbone too (with the classifier, same optimizer)', false)
    .option('--train-samples <n>', 'training images used (0: all)', integer('--train-samples', 0), 0)
    .option('--val-samples <n>', 'test images evaluated (0: all)', integer('--val-samples', 0), 0)
    .option('--run-dir <dir>', "this evaluation's run directory (default: runs/linear-<source>-<timestamp>)")
    .option('--resume <path|auto>', 'continue the evaluation in --run-dir from a checkpoint (auto: its newest valid one, or a fresh start)')
    .option('--checkpoint-every-steps <n>', 'write checkpoints/last.ckpt every n steps (default: at every epoch end)', integer('--checkpoint-every-steps', 1))
    .option('--log-every <n>', 'log the training loss and accuracy every n steps', integer('--log-every', 1), 10)
    .option('--devices <n>', 'processes (ranks) on this machine, data-parallel: each trains on batch-size / n of every batch', integer('--devices', 1), 1)
    .option(
      '--timeout <seconds>',
      "how long a collective waits for the other ranks (default: the pre-training run's)",
      number('--timeout', 0, { exclusiveMin: true }),
    );
  addConfigFlags(command, TRACKING_KEYS).action(async (runDir: string | undefined, opts: Record<string, unknown>) => {
    const source = sourceOf('linear', runDir, opts);
    const devices = opts.devices as number;
    const worker = workerEnv();
    if (!worker && devices > 1) {
      process.exitCode = await launchLinear(devices, opts.batchSize as number);
      return;
    }
    const result = await runLinearEval(
      {
        features: { kind: 'pretrained', source },
        data: pick(opts, DATA_KEYS) as EvalDataOptions,
        runDir: opts.runDir as string | undefined,
        resume: opts.resume as string | undefined,
        checkpointEverySteps: opts.checkpointEverySteps as number | undefined,
        logEvery: opts.logEvery as number,
        timeout: opts.timeout as number | undefined,
        epochs: opts.epochs as number,
        batchSize: opts.batchSize as number,
        lr: opts.lr as number,
        momentum: opts.momentum as number,
        weightDecay: opts.weightDecay as number,
        augmentation: opts.augmentation as LinearAugmentation,
        finetune: opts.finetune as boolean,
        seed: opts.seed as number,
        trainSamples: opts.trainSamples as number,
        valSamples: opts.valSamples as number,
        tracking: pick(opts, TRACKING_KEYS) as TrackingOptions,
        print: (line) => process.stderr.write(`ssl-train: ${line}\n`),
      },
      { worker },
    );
    if (worker && worker.rank !== 0) return;
    const best = Math.max(...result.history.map((h) => h.val.top1));
    process.stdout.write(
      `${JSON.stringify({ runDir: result.runDir, epochs: result.history.length, 'val/acc1': result.final.val.top1, 'val/acc5': result.final.val.top5, 'val/best_acc1': best })}\n`,
    );
  });
  return command;
}

/**
 * Runs this `linear` command line in `devices` worker processes (the launcher of pre-training:
 * a fresh file rendezvous, rank 0's output here); resolves to the exit code. Refuses first what
 * would fail on every rank: a batch that does not split evenly, a missing Gloo addon.
 */
function launchLinear(devices: number, batchSize: number): Promise<number> {
  if (batchSize % devices !== 0) throw invalidValue('--batch-size', batchSize, `a multiple of --devices ${devices} (each rank gets batch-size / devices)`);
  if (!isGlooAvailable()) loadGlooAddon(); // throws the user error that says how to install it
  return launchWorkers({ nprocs: devices, numNodes: 1, nodeRank: 0, script: process.argv[1], args: process.argv.slice(2) });
}

function knnCommand(): Command {
  const positiveInteger = (s: string) => (/^\d+$/.test(s) && Number(s) >= 1 ? Number(s) : undefined);
  const positiveNumber = (s: string) => (Number.isFinite(Number(s)) && Number(s) > 0 ? Number(s) : undefined);
  const distance = (s: string) => ((KNN_DISTANCES as readonly string[]).includes(s) ? (s as KnnDistance) : undefined);
  return evaluationCommand(
    'knn',
    'offline weighted kNN of the test split against the training split, every combination of --k, --temperature and --distance in one pass (one JSON line each)',
  )
    .option('--k <list>', 'neighbour counts, comma-separated (e.g. 10,20,200)', list('--k', 'integers >= 1, e.g. 10,20,200', positiveInteger), [20])
    .option(
      '--temperature <list>',
      'vote temperatures of cosine kNN, comma-separated (e.g. 0.07,0.1)',
      list('--temperature', 'numbers > 0, e.g. 0.07,0.1', positiveNumber),
      [0.07],
    )
    .option(
      '--distance <list>',
      `distances, comma-separated: ${KNN_DISTANCES.join(', ')} (euclidean weighs votes by 1/distance, no temperature)`,
      list('--distance', KNN_DISTANCES.join(' or '), distance),
      ['cosine'],
    )
    .option('--train-samples <n>', 'training images in the kNN memory (0: all)', integer('--train-samples', 0), 0)
    .option('--val-samples <n>', 'test images classified (0: all)', integer('--val-samples', 0), 0)
    .option('--batch-size <n>', 'images per forward pass', integer('--batch-size', 1), 256)
    .action(async (runDir: string | undefined, opts: Record<string, unknown>) => {
      const source = sourceOf('knn', runDir, opts);
      const results = await runKnnEval({
        init: { kind: 'pretrained', source },
        data: pick(opts, DATA_KEYS) as EvalDataOptions,
        ks: opts.k as number[],
        temperatures: opts.temperature as number[],
        distances: opts.distance as KnnDistance[],
        trainSamples: opts.trainSamples as number,
        valSamples: opts.valSamples as number,
        batchSize: opts.batchSize as number,
        seed: opts.seed as number,
      });
      for (const r of results) process.stdout.write(`${JSON.stringify(r)}\n`);
    });
}

function embedCommand(): Command {
  return evaluationCommand(
    'embed',
    'write the backbone features of a split as NumPy .npy (float32 [N, F]) and its labels beside them (<out>.labels.npy, int32 [N])',
  )
    .requiredOption('--out <file.npy>', 'the features file (written atomically)')
    .option('--split <name>', 'train or test (default: test; train for an --unlabelled folder, all its images)', choice('--split', EMBED_SPLITS))
    .option('--batch-size <n>', 'images per forward pass', integer('--batch-size', 1), 256)
    .action(async (runDir: string | undefined, opts: Record<string, unknown>) => {
      const source = sourceOf('embed', runDir, opts);
      const result = await runEmbed({
        init: { kind: 'pretrained', source },
        data: pick(opts, DATA_KEYS) as EvalDataOptions,
        split: opts.split as (typeof EMBED_SPLITS)[number] | undefined,
        out: opts.out as string,
        batchSize: opts.batchSize as number,
      });
      process.stdout.write(`${JSON.stringify(result)}\n`);
    });
}

/** The `linear`, `knn` and `embed` commands. */
export function evaluationCommands(): Command[] {
  return [linearCommand(), knnCommand(), embedCommand()];
}
