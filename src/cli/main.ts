import 'reflect-metadata';
import { Command, CommanderError, Option } from 'commander';
import { UserError } from '../core/errors.js';
import { methodNames } from '../methods/registry.js';
import { buildConfig, parseMethodArg, readConfigFile, toCamel, type TrainConfigInput } from './config.js';
import { launchWorkers, workerEnv } from '../distributed/launcher.js';
import { preflightDistributed, runTraining } from './train.js';

/** Exit code for user mistakes (bad flags, config, data, environment). */
export const USER_ERROR_EXIT = 2;

/** Turns a flag value into a number when it looks like one; validation reports the rest. */
function numeric(value: string): number | string {
  const n = Number(value);
  return value.trim() !== '' && Number.isFinite(n) ? n : value;
}

function boolean(value: string): boolean | string {
  if (/^(true|1|yes|on)$/i.test(value)) return true;
  if (/^(false|0|no|off)$/i.test(value)) return false;
  return value;
}

function collectMethodArg(value: string, previous: Record<string, number> = {}): Record<string, number> {
  const [name, n] = parseMethodArg(value);
  return { ...previous, [name]: n };
}

/** The `ssl-train` program (also used in-process by the CLI tests). */
export function buildProgram(): Command {
  const program = new Command('ssl-train')
    .description('Self-supervised visual representation learning: pre-train SimCLR, Barlow Twins, BYOL, ... on one or many processes')
    .showHelpAfterError(false)
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  program
    .option('--config <file>', 'YAML recipe (e.g. configs/simclr-fashion-mnist.yaml); flags override it')
    .option('--method <name>', `method: ${methodNames().join(', ')} or a registered subclass`, 'simclr')
    .option('--method-arg <name=value>', 'method hyperparameter, repeatable (e.g. temperature=0.2)', collectMethodArg)
    .option('--backbone <name>', 'backbone: resnet18, resnet50, tiny_resnet, mlp', 'tiny_resnet')
    .addOption(new Option('--cifar-stem <bool>', 'ResNet 3x3 stride-1 stem, no max-pool (default: on for images <= 64 px)').argParser(boolean))
    .option('--dataset <name>', 'dataset: synthetic, fashion-mnist, cifar10, cifar100', 'synthetic')
    .option('--data-dir <dir>', 'dataset directory (fashion-mnist default: /usr/share/datasets/fashion-mnist)')
    .option('--image-size <n>', 'synthetic images: side in pixels', numeric, 28)
    .option('--synthetic-size <n>', 'synthetic images: training set size', numeric, 4096)
    .option('--epochs <n>', 'training epochs', numeric, 10)
    .option('--max-steps <n>', 'stop after this many optimizer steps (smoke runs)', numeric)
    .option('--batch-size <n>', 'global batch size, split evenly over the ranks', numeric, 256)
    .option('--optimizer <name>', "sgd, lars or adamw (default: the method's recipe)")
    .option('--lr <x>', "base learning rate per 256 samples, scaled by batch/256 (default: the method's recipe)", numeric)
    .option('--classifier-lr <x>', 'online linear classifier lr per 256 samples (default: 0.1)', numeric)
    .option('--weight-decay <x>', "weight decay (default: the method's recipe)", numeric)
    .option('--momentum <x>', 'SGD/LARS momentum', numeric, 0.9)
    .option('--lars-eta <x>', 'LARS trust coefficient', numeric, 0.02)
    .addOption(new Option('--lars-clip-lr <bool>', 'LARS: clip the adaptive lr at the global lr').default(true).argParser(boolean))
    .option('--warmup-epochs <x>', 'linear warmup epochs before the cosine decay (default: 10% of --epochs)', numeric)
    .option('--warmup-start-lr <x>', 'lr at the first warmup step', numeric, 3e-5)
    .option('--min-lr <x>', 'lr at the end of the cosine decay', numeric, 0)
    .option('--seed <n>', 'seed of every random draw (init, sampling, augmentation)', numeric, 0)
    .option('--run-dir <dir>', 'run directory (default: runs/<method>-<timestamp>)')
    .option('--checkpoint-every <n>', 'save checkpoints/epoch-<n>.ckpt every n epochs (0: only last.ckpt at the end)', numeric, 1)
    .option('--resume <path|auto>', 'continue from a checkpoint; auto: <run-dir>/checkpoints/last.ckpt if present')
    .option('--backend <name>', 'tensor backend: auto, cpu, cpu-js, tensorflow', 'auto')
    .option('--devices <n>', 'processes (ranks) per node on CPU', numeric, 1)
    .option('--gpus <n>', 'processes per node, one GPU each (needs @tensorflow/tfjs-node-gpu)', numeric)
    .option('--num-nodes <n>', 'nodes (hosts) of the job', numeric, 1)
    .option('--node-rank <n>', 'index of this node', numeric, 0)
    .option('--rendezvous <url>', 'how ranks meet: file:///shared/dir, tcp://host:port, redis://host:port (default: a fresh file store)')
    .option('--strategy <name>', 'auto, single or ddp (auto: ddp with more than one rank)', 'auto')
    .addOption(new Option('--sync-batchnorm <bool>', 'batch norm with global-batch statistics across ranks').default(false).argParser(boolean))
    .option('--bucket-cap-mb <x>', 'DDP gradient bucket size in MiB', numeric, 25)
    .option('--accumulate-grad-batches <n>', 'batches per optimizer step (one gradient sync per step)', numeric, 1)
    .addOption(new Option('--drop-last <bool>', 'drop the incomplete last global batch of an epoch').default(true).argParser(boolean))
    .option('--timeout <seconds>', 'how long a collective waits for the other ranks before failing', numeric, 300)
    .option('--log-every <n>', 'log training metrics every n steps', numeric, 10)
    .option('--val-every <n>', 'validate (kNN, linear probe) every n epochs; 0 disables', numeric, 1)
    .option('--knn-k <n>', 'kNN neighbours', numeric, 20)
    .option('--knn-temperature <x>', 'kNN vote temperature', numeric, 0.07)
    .option('--knn-train-samples <n>', 'training images in the kNN memory (0: all)', numeric, 10000)
    .option('--val-samples <n>', 'validation images to evaluate (0: all)', numeric, 0)
    .option('--workers <n>', 'augmentation worker threads (0: none)', numeric, 1)
    .action(async (_opts: Record<string, unknown>, command: Command) => {
      const config = resolveTrainConfig(command);
      const worker = workerEnv();
      const nprocs = config.gpus ?? config.devices;
      if (!worker && nprocs * config.numNodes > 1) {
        preflightDistributed(config, nprocs);
        process.exitCode = await launchWorkers({
          nprocs,
          numNodes: config.numNodes,
          nodeRank: config.nodeRank,
          rendezvous: config.rendezvous,
          script: process.argv[1],
          args: process.argv.slice(2),
          envFor: config.gpus ? (localRank) => ({ CUDA_VISIBLE_DEVICES: String(localRank) }) : undefined,
        });
        return;
      }
      const result = await runTraining(config, { worker });
      if (!worker || worker.rank === 0) {
        process.stdout.write(`${JSON.stringify({ runDir: result.runDir, step: result.fit.progress.step, ...result.fit.validation })}\n`);
      }
    });
  program.exitOverride();
  return program;
}

/** Merges defaults < --config file < explicit flags into a validated config. */
export function resolveTrainConfig(command: Command): ReturnType<typeof buildConfig> {
  const opts = command.opts<Record<string, unknown>>();
  const fromFile: TrainConfigInput = typeof opts.config === 'string' ? readConfigFile(opts.config) : {};
  const merged: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(opts)) {
    if (key === 'config' || key === 'methodArg' || value === undefined) continue;
    if (command.getOptionValueSource(key) === 'default' && toCamel(key) in fromFile) continue;
    merged[key] = value;
  }
  const methodArgs = { ...((fromFile.methodArgs as Record<string, number>) ?? {}), ...((opts.methodArg as Record<string, number>) ?? {}) };
  return buildConfig({ ...fromFile, ...merged, methodArgs });
}

/** Runs the CLI; returns the exit code (0 ok, 1 internal failure, 2 user error). */
export async function main(argv: string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv, { from: 'user' });
    return Number(process.exitCode ?? 0);
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.exitCode === 0) return 0;
      return USER_ERROR_EXIT; // commander already printed its one-line message
    }
    if (error instanceof UserError) {
      process.stderr.write(`ssl-train: error: ${error.message}\n`);
      return USER_ERROR_EXIT;
    }
    process.stderr.write(`ssl-train: internal error: ${(error as Error).stack ?? String(error)}\n`);
    return 1;
  }
}
