import 'reflect-metadata';
import { Command, CommanderError, Option } from 'commander';
import { container } from 'tsyringe';
import { invalidValue, TrainingFailure, unwrappedIoFailure, UserError } from '../core/errors.js';
import { packageVersion } from '../core/package-root.js';
import type { BackendChoice } from '../core/engine.js';
import type { ArgValue } from '../methods/args.js';
import { describeMethods } from '../methods/registry.js';
import { existsSync } from 'node:fs';
import {
  buildConfig,
  CONFIG_KEYS,
  parseMethodArg,
  readConfigFile,
  TrainConfig,
  trainFlags,
  type FlagKind,
  type TrainConfigInput,
} from '../experiment/config.js';
import { checkRendezvousFlag } from '../distributed/gloo.js';
import { launchWorkers, workerEnv } from '../distributed/launcher.js';
import { LOSS_CHECK_TOLERANCE } from '../verify/loss-check.js';
import { engineRequest, preflightDistributed, runTraining } from '../experiment/train.js';
import { finishInterruptedRun, requeueWarning } from '../experiment/interrupted.js';
import { StopSignal, TrainingInterrupted } from '../trainer/stop-signal.js';
import { checkStrategyName } from '../trainer/strategy.js';
import { checkRunDirFree } from '../trainer/run-lock.js';
import { runVerify, runVerifyCase } from '../verify/harness.js';
import { formatVerifyResult } from '../verify/report.js';
import { formatEngineResult, runEngineAgainst } from '../verify/engine-against.js';
import { DEFAULT_ROUNDOFF_FACTOR } from '../verify/roundoff.js';
import type { CompareCliOptions } from './compare.js';
import { evaluationCommands } from './evaluate.js';
import { booleanOrText, numberOrText } from './flag-values.js';
import { exportCommand } from './export.js';
import { serveCommand } from './serve.js';
import { formatSyncResult, wandbSync } from './wandb-sync.js';

/** Exit code for user mistakes (bad flags, config, data, environment). */
export const USER_ERROR_EXIT = 2;

function collectMethodArg(value: string, previous: unknown): Record<string, ArgValue> {
  const [name, v] = parseMethodArg(value);
  return { ...((previous as Record<string, ArgValue> | undefined) ?? {}), [name]: v };
}

const PARSERS: Record<FlagKind, ((value: string, previous: unknown) => unknown) | undefined> = {
  number: numberOrText,
  boolean: booleanOrText,
  string: undefined,
  pairs: collectMethodArg,
};

/**
 * Adds every training option to `command` (the train command and `verify` share them):
 * `--config`, then the flags `TrainConfig` declares (`@Flag`), each with the field's
 * default. `pairs` (--method-arg) has none: its values are added to the config file's.
 */
function addTrainOptions(command: Command): Command {
  command.option('--config <file>', 'YAML recipe (e.g. configs/simclr-fashion-mnist.yaml); flags override it');
  const defaults = new TrainConfig();
  for (const flag of trainFlags()) {
    const option = new Option(`--${flag.name} ${flag.placeholder}`, flag.description);
    const parse = PARSERS[flag.kind];
    if (parse) option.argParser(parse);
    const value = defaults[flag.key];
    if (value !== undefined && flag.kind !== 'pairs') option.default(value);
    command.addOption(option);
  }
  return command;
}

/** Launches `nprocs` workers running this same command line; resolves to the exit code. */
function launch(config: TrainConfig, nprocs: number, splitsBatch = true): Promise<number> {
  preflightDistributed(config, nprocs, splitsBatch);
  return launchWorkers({
    nprocs,
    numNodes: config.numNodes,
    nodeRank: config.nodeRank,
    rendezvous: config.rendezvous,
    script: process.argv[1],
    args: process.argv.slice(2),
    envFor: config.gpus && config.backend === 'tensorflow' ? (localRank) => ({ CUDA_VISIBLE_DEVICES: String(localRank) }) : undefined,
    stopTimeoutMs: config.timeout * 1000,
  });
}

/** The reference engine of `verify --engine-against`, refused with the options that ask for another check. */
function engineAgainstOption(opts: Record<string, unknown>, config: TrainConfig): BackendChoice {
  const against = opts.engineAgainst;
  if (against !== 'cpu' && against !== 'cpu-js') throw invalidValue('--engine-against', against, 'cpu | cpu-js');
  for (const flag of ['case', 'dump'] as const) {
    if (opts[flag] !== undefined) throw new UserError(`--${flag}: not used with --engine-against (it compares two engines in one process)`);
  }
  if (config.gpus !== undefined || config.devices * config.numNodes > 1) {
    throw new UserError('--engine-against: compares two engines in one process; use it without --gpus, --devices or --num-nodes');
  }
  return against;
}

/** The `ssl-train` program (also used in-process by the CLI tests). */
export function buildProgram(): Command {
  const program = new Command('ssl-train')
    .description('Self-supervised visual representation learning: pre-train SimCLR, Barlow Twins, BYOL, ... on one or many processes')
    .version(packageVersion(), '-V, --version', 'print the ssl-zoo version')
    .showHelpAfterError(false)
    .enablePositionalOptions()
    .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: (message, write) => write(`ssl-train: ${message}`) })
    .option('--debug', 'also print the stack trace of an error (for bug reports; or set SSL_ZOO_DEBUG=1); give it before a command name');
  addTrainOptions(program).action(async (_opts: Record<string, unknown>, command: Command) => {
    const config = resolveTrainConfig(command);
    const worker = workerEnv();
    const nprocs = config.gpus ?? config.devices;
    const warning = worker ? undefined : requeueWarning(config.requeue);
    if (warning) process.stderr.write(`${warning}\n`);
    if (!worker && nprocs * config.numNodes > 1) {
      // Rank 0 takes the run directory's lock; a directory in use is refused before any worker starts.
      if (config.runDir !== undefined && config.nodeRank === 0) checkRunDirFree(config.runDir, { forceUnlock: config.forceUnlock });
      process.exitCode = await launch(config, nprocs);
      return;
    }
    const isGlobalZero = !worker || worker.rank === 0;
    const stop = new StopSignal().install();
    try {
      const result = await runTraining(config, { worker, stop });
      if (isGlobalZero) process.stdout.write(`${JSON.stringify({ runDir: result.runDir, step: result.fit.progress.step, ...result.fit.validation })}\n`);
    } catch (e) {
      if (!(e instanceof TrainingInterrupted)) throw e;
      process.exitCode = finishInterruptedRun(e, { requeue: config.requeue, isGlobalZero });
    } finally {
      stop.uninstall();
    }
  });

  const verify = new Command('verify')
    .description('check that distributed training is exact here: W ranks vs one process on the same global batch (or the losses against a reference case)')
    .option('--steps <k>', 'optimizer steps to compare', numberOrText, 3)
    .option('--tolerance <x>', 'relative difference always allowed (with --case: the bound, default 1e-4 of the largest gradient entry)', numberOrText, 1e-5)
    .option(
      '--roundoff-factor <k>',
      'allowed multiple of the measured float32 round-off (one-process twins with inputs moved by one ulp)',
      numberOrText,
      DEFAULT_ROUNDOFF_FACTOR,
    )
    .option('--dump <dir>', "write each step's inputs, the one-process state before it and both gradients as .npy files (DIR/step-<k>/)")
    .option(
      '--one-process-ranks <k>',
      'ranks that run the one-process reference and its 4 twins on the global batch (1: rank 0 alone, the least memory; more: faster, each such rank holding a one-process model and a global batch)',
      numberOrText,
      1,
    )
    .option(
      '--case <file>',
      'check the loss functions against reference cases instead: an ssl-loss-oracle/2 JSON file (or /1), or a directory of them (docs/loss-case.md)',
    )
    .option(
      '--engine-against <engine>',
      'check the engine --backend selects against a reference engine instead (cpu or cpu-js): the same steps in one process on both, within the measured round-off',
    );
  addTrainOptions(verify).action(async (opts: Record<string, unknown>, command: Command) => {
    const config = resolveTrainConfig(command);
    if (config.pretrained !== undefined) throw new UserError('--pretrained: verify starts from fresh weights; use it with training, linear, knn or embed');
    const steps = opts.steps as number;
    const tolerance = opts.tolerance as number;
    if (!Number.isInteger(steps) || steps < 1) throw new UserError(`--steps: ${JSON.stringify(steps)} is not allowed; expected an integer >= 1`);
    if (typeof tolerance !== 'number' || !(tolerance > 0))
      throw new UserError(`--tolerance: ${JSON.stringify(tolerance)} is not allowed; expected a number > 0`);
    const roundoffFactor = opts.roundoffFactor as number;
    if (typeof roundoffFactor !== 'number' || !(roundoffFactor >= 0))
      throw new UserError(`--roundoff-factor: ${JSON.stringify(roundoffFactor)} is not allowed; expected a number >= 0`);
    if (opts.engineAgainst !== undefined) {
      const result = await runEngineAgainst(config, { steps, tolerance, roundoffFactor, against: engineAgainstOption(opts, config) });
      process.stdout.write(`${formatEngineResult(result, config.method)}\n`);
      if (!result.passed) process.exitCode = 1;
      return;
    }
    const worker = workerEnv();
    const nprocs = config.gpus ?? config.devices;
    if (!worker && nprocs * config.numNodes > 1) {
      if (typeof opts.case === 'string' && !existsSync(opts.case)) throw new UserError(`--case: file ${opts.case} does not exist`);
      process.exitCode = await launch(config, nprocs, typeof opts.case !== 'string');
      return;
    }
    if (typeof opts.case === 'string') {
      const caseTolerance = command.getOptionValueSource('tolerance') === 'default' ? LOSS_CHECK_TOLERANCE : tolerance;
      const out = await runVerifyCase(config, opts.case, caseTolerance, worker);
      if (out) {
        process.stdout.write(`${out.text}\n`);
        if (!out.passed) process.exitCode = 1;
      }
      return;
    }
    const dump = typeof opts.dump === 'string' ? opts.dump : undefined;
    const oneProcessRanks = opts.oneProcessRanks as number;
    if (!Number.isInteger(oneProcessRanks) || oneProcessRanks < 1)
      throw new UserError(`--one-process-ranks: ${JSON.stringify(oneProcessRanks)} is not allowed; expected an integer >= 1`);
    const result = await runVerify(config, { steps, tolerance, roundoffFactor, dump, oneProcessRanks }, worker);
    if (result) {
      process.stdout.write(`${formatVerifyResult(result, config.method)}\n`);
      if (!result.passed) process.exitCode = 1;
    }
  });
  program.addCommand(verify);
  verify.exitOverride();

  const compare = new Command('compare')
    .description(
      'compare runs side by side: one self-contained HTML report (loss, kNN and linear accuracy, throughput, final table, UMAP maps of the final checkpoints) and the charts as PNG',
    )
    .argument('<run-dirs...>', 'run directories')
    .option('--out <dir>', 'output directory for report.html and the PNG charts')
    .option('--points <n>', 'validation images per embedding map', numberOrText, 1000)
    .option('--no-embeddings', 'leave out the embedding maps (no checkpoint is loaded)')
    .option('--title <text>', 'report title')
    .action(async (dirs: string[], opts: CompareCliOptions) => {
      // Loaded on demand: the report's chart library is a large heap that would make every
      // garbage collection of a training run slower.
      const { runCompare } = await import('./compare.js');
      await runCompare(dirs, opts);
    });
  const sync = new Command('wandb-sync')
    .description('upload runs to Weights & Biases from their run directories (offline runs, failed uploads): config, every history row, summary')
    .argument('<run-dirs...>', 'run directories')
    .action(async (dirs: string[]) => {
      for (const r of await wandbSync(dirs)) {
        if (r.ok) process.stdout.write(`${formatSyncResult(r)}\n`);
        else {
          process.stderr.write(`ssl-train: error: wandb-sync: ${formatSyncResult(r)}\n`);
          process.exitCode = 1;
        }
      }
    });
  const methods = new Command('methods')
    .description('list the registered methods (user subclasses included) with their hyperparameters: kind, default, allowed range, meaning')
    .argument('[names...]', 'only these methods')
    .action((names: string[]) => {
      const text = describeMethods(names.length > 0 ? names : undefined);
      process.stdout.write(`Set with --method-arg name=value (repeatable) or method_args in a --config file.\n\n${text}\n`);
    });
  for (const command of [compare, sync, methods, ...evaluationCommands(), exportCommand(), serveCommand()]) program.addCommand(command.exitOverride());
  program.exitOverride();
  // Commander's own errors (unknown option, missing value) in the one-line form of ssl-train's, in every command.
  for (const command of program.commands) command.configureOutput(program.configureOutput());
  return program;
}

/** Merges defaults < --config file < explicit flags into a validated config. */
export function resolveTrainConfig(command: Command): ReturnType<typeof buildConfig> {
  const opts = command.opts<Record<string, unknown>>();
  const fromFile: TrainConfigInput = typeof opts.config === 'string' ? readConfigFile(opts.config) : {};
  const merged: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(opts)) {
    if (key === 'config' || key === 'methodArg' || value === undefined || !CONFIG_KEYS.includes(key)) continue;
    // A default is left to buildConfig, which gives the same values except where the method
    // has its own (mae's backbone).
    if (command.getOptionValueSource(key) === 'default') continue;
    merged[key] = value;
  }
  const methodArgs = { ...((fromFile.methodArgs as Record<string, ArgValue>) ?? {}), ...((opts.methodArg as Record<string, ArgValue>) ?? {}) };
  const config = buildConfig({ ...fromFile, ...merged, methodArgs });
  roundDefaultBatchSize(config, command.getOptionValueSource('batchSize') !== 'default' || 'batchSize' in fromFile);
  // Whatever the number of devices: a flag that cannot work is an error, not ignored.
  if (config.rendezvous !== undefined) checkRendezvousFlag(config.rendezvous);
  checkStrategyName(config.strategy, container);
  engineRequest(config); // --gpus with an engine that cannot run on a GPU: refused here
  return config;
}

/**
 * The default global batch (256) split over 3, 5, ... ranks: rounded down to a multiple of
 * the world size (said once, by the launching process), so `--devices 3` works with the
 * defaults. A batch size the user gave is never changed (a non-multiple is an error later).
 */
function roundDefaultBatchSize(config: TrainConfig, explicit: boolean): void {
  const ranks = (config.gpus ?? config.devices) * config.numNodes;
  const rounded = Math.floor(config.batchSize / ranks) * ranks;
  if (explicit || config.batchSize % ranks === 0 || rounded < ranks) return;
  if (!workerEnv()) {
    process.stderr.write(
      `ssl-train: note: the default batch size ${config.batchSize} is not a multiple of ${ranks} ranks; using ${rounded} (the lr scales with it)\n`,
    );
  }
  config.batchSize = rounded;
}

/** Runs the CLI; returns the exit code (0 ok, 1 failed run or internal failure, 2 user error). */
export async function main(args: string[]): Promise<number> {
  const program = buildProgram();
  const commands = program.commands.map((c) => c.name());
  // `ssl-train help [command]` is `--help` (the program's own action would take `help` for a stray argument).
  const argv = args[0] === 'help' ? [...args.slice(1, 2), '--help'] : args;
  if (argv[0] !== undefined && !argv[0].startsWith('-') && !commands.includes(argv[0])) {
    process.stderr.write(`ssl-train: error: unknown command '${argv[0]}'; expected one of ${commands.join(', ')}, or options only (training)\n`);
    return USER_ERROR_EXIT;
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
    return Number(process.exitCode ?? 0);
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.exitCode === 0) return 0;
      return USER_ERROR_EXIT; // commander already printed its one-line message
    }
    if (isPeerFailure(error)) await new Promise((resolve) => setTimeout(resolve, PEER_FAILURE_DELAY_MS));
    return reportError(error, program.opts().debug === true || process.env.SSL_ZOO_DEBUG === '1');
  }
}

/**
 * In a launched worker: a collective failed because another rank went away. That rank's own
 * line says why; this one waits {@link PEER_FAILURE_DELAY_MS} before reporting, so that the
 * launcher hears of the rank that failed first (and stops this one), then prints one line:
 * not a bug of this process.
 */
function isPeerFailure(error: unknown): error is Error {
  return workerEnv() !== undefined && error instanceof Error && /^ssl-zoo gloo: .*a peer process died/.test(error.message);
}

const PEER_FAILURE_DELAY_MS = 3000;

/**
 * Prints what stopped the command and returns the exit code. A user error, a failed run and
 * an environment error (disk full, permissions, a vanished file) are one line; `debug` adds
 * their stack trace. Anything else is a bug and always prints its stack.
 */
export function reportError(error: unknown, debug: boolean): number {
  const stack = debug && error instanceof Error && error.stack ? `${error.stack}\n` : '';
  if (error instanceof UserError || error instanceof TrainingFailure) {
    process.stderr.write(`ssl-train: error: ${error.message}\n${stack}`);
    return error instanceof UserError ? USER_ERROR_EXIT : 1;
  }
  const io = unwrappedIoFailure(error);
  if (io) {
    process.stderr.write(`ssl-train: error: ${io.message}\n${stack}`);
    return io.exitCode;
  }
  if (isPeerFailure(error)) {
    process.stderr.write(`ssl-train: error: ${error.message.split('\n')[0]}\n${stack}`);
    return 1;
  }
  process.stderr.write(`ssl-train: internal error: ${(error as Error).stack ?? String(error)}\n`);
  return 1;
}
