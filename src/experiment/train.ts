import 'reflect-metadata';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { container as rootContainer, type DependencyContainer } from 'tsyringe';
import { initEngine, type BackendChoice, type EngineInfo } from '../core/engine.js';
import { checkGpuAdapters, type GpuSelection } from '../core/webgpu.js';
import { invalidValue, UserError } from '../core/errors.js';
import { packageRoot, packageVersion } from '../core/package-root.js';
import { transformerBlocks } from '../core/transformer.js';
import { formatCrops } from '../data/augment/crops.js';
import { evalTransform } from '../data/augment/recipes.js';
import { badSamplesAllowed, parseBadSamplesLimit } from '../data/bad-samples.js';
import { sampleDataset } from '../data/dataset.js';
import { MultiViewLoader, type MultiViewBatch } from '../data/loader.js';
import { hasBatchNorm, type BaseMethod } from '../methods/base.js';
import { getMethodClass } from '../methods/registry.js';
import { SslTask, type ValidationSettings } from '../methods/task.js';
import { CALLBACK, ProgressBar, type Callback } from '../trainer/callbacks.js';
import type { DataSource } from '../trainer/interfaces.js';
import { checkRunDirWritable } from '../trainer/run-dir.js';
import { parseTags } from '../tracking/index.js';
import { checkStrategyName } from '../trainer/strategy.js';
import { acquireRunLock, type RunLock } from '../trainer/run-lock.js';
import { isGlooAvailable, loadGlooAddon } from '../distributed/gloo.js';
import type { WorkerEnv } from '../distributed/launcher.js';
import { NonFiniteError, Trainer, TRAINER_OPTIONS, type FitResult, type TrainerOptions } from '../trainer/trainer.js';
import type { StopRequest } from '../trainer/stop-signal.js';
import type { TrainConfig } from './config.js';
import { preflightStrategy, registerAround, registerLoggers, registerRunStrategy } from './run-scope.js';
import { checkFolderFlags, prepareExperiment, prepareFolderExperiment, warnSkippedFile, type Experiment } from './experiment.js';
import { loadPretrainedBackbone, resolvePretrained } from './pretrained.js';

/** A finished training run. */
export interface TrainingRun {
  runDir: string;
  fit: FitResult;
  engine: EngineInfo;
  /** The registered name of the strategy it ran with (`auto` resolved). */
  strategy: string;
}

/** Extra wiring for library users and tests. */
export interface RunOptions {
  /**
   * The parent of the run's container (a child is made per run; default the global container,
   * which the CLI uses). Registrations there take part in the run (docs/extending.md):
   * strategies registered by name (`registerStrategy`; `config.strategy` selects one);
   * LOGGERs, which replace the default run-directory logger (register a `RunDirLogger` too to
   * keep it); CALLBACKs, which run after the built-in progress display; a PROCESS_GROUP, used
   * instead of the one the worker environment implies. Classes are constructed from the run's
   * container, where the run registers PROCESS_GROUP, DDP_OPTIONS, STRATEGY (the selected
   * strategy) and TRAINER_OPTIONS before it resolves the {@link Trainer}.
   */
  container?: DependencyContainer;
  /** Replaces the built-in progress display (e.g. none in tests). */
  callbacks?: Callback[];
  /** This process's place in a multi-process job (set by the launcher's environment). */
  worker?: WorkerEnv;
  /** Where a request to stop gracefully comes from (the CLI's signal handlers); default none. */
  stop?: StopRequest;
}

function gitCommit(): string | undefined {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { cwd: packageRoot(), stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    return undefined;
  }
}

/** The engine a run asks for, and for `--gpus`, how this process picks its adapter. */
export interface EngineRequest {
  backend: BackendChoice;
  gpu: GpuSelection;
}

/**
 * `--gpus N` (any N, 1 included) runs on a GPU engine: `webgpu` unless `--backend tensorflow`
 * (which needs @tensorflow/tfjs-node-gpu) was asked for; a CPU backend with `--gpus` is refused
 * rather than silently training on the CPU. Rank r takes the r-th adapter of its node.
 */
export function engineRequest(config: TrainConfig, localRank = 0): EngineRequest {
  const gpu: GpuSelection = { allowSoftware: config.gpus === undefined || config.allowSoftwareAdapter };
  if (config.gpus === undefined) return { backend: config.backend, gpu };
  if (config.backend === 'tensorflow') {
    if (!tensorflowGpuInstalled()) {
      throw new UserError(`--gpus: ${config.gpus} with --backend tensorflow needs @tensorflow/tfjs-node-gpu, which is not installed; use --backend webgpu`);
    }
    return { backend: 'tensorflow', gpu };
  }
  if (config.backend !== 'auto' && config.backend !== 'webgpu') {
    throw invalidValue('--backend', config.backend, `webgpu or tensorflow with --gpus (for --backend ${config.backend} use --devices ${config.gpus})`);
  }
  return { backend: 'webgpu', gpu: { ...gpu, index: localRank, shareAdapters: config.allowSoftwareAdapter, flag: `--gpus ${config.gpus}` } };
}

/**
 * Before workers are spawned: the engine `--gpus` asks for exists, with an adapter for each
 * rank of this node (one line naming the adapters found when not).
 */
export function checkGpuEngine(config: TrainConfig): void {
  const { backend, gpu } = engineRequest(config);
  if (backend !== 'webgpu' || config.gpus === undefined) return;
  checkGpuAdapters(config.gpus, gpu);
}

/**
 * `--drop-last false` with more than one rank is refused: one process yields a short last
 * batch, which W ranks cannot split evenly (and padding it by wrapping around, as the
 * distributed sampler could, trains on other samples than one process does).
 */
export function checkDropLast(config: TrainConfig, worldSize: number): void {
  if (worldSize > 1 && !config.dropLast) {
    throw invalidValue('--drop-last', false, `true with ${worldSize} ranks (a short last batch cannot be split evenly over the ranks)`);
  }
}

/**
 * Checks, before any worker is spawned, what would otherwise fail on every rank: a GPU
 * request without a GPU engine or adapters, a strategy that does not span the ranks, a batch that does
 * not split evenly or `--drop-last false` (when the command splits one), a missing Gloo addon.
 */
export function preflightDistributed(config: TrainConfig, nprocs: number, splitsBatch = true): void {
  const worldSize = nprocs * config.numNodes;
  checkGpuEngine(config);
  preflightStrategy(rootContainer, config, worldSize);
  if (splitsBatch && config.batchSize % worldSize !== 0) {
    throw invalidValue('--batch-size', config.batchSize, `a multiple of the world size ${worldSize} (each rank gets batch-size / world size)`);
  }
  if (splitsBatch) checkDropLast(config, worldSize);
  if (!isGlooAvailable()) loadGlooAddon(); // throws the user error that says how to install it
}

function tensorflowGpuInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve('@tensorflow/tfjs-node-gpu');
    return true;
  } catch {
    return false;
  }
}

/** Adapts the multi-view loader to the trainer's {@link DataSource}. */
function dataSource(loader: MultiViewLoader, batchSize: number): DataSource<MultiViewBatch> {
  return {
    batchSize,
    numBatches: () => loader.numBatches(),
    batches: (epoch, startBatch) => loader.batches(epoch, startBatch),
    close: () => loader.close(),
  };
}

/** A method whose objective needs labels is refused on an unlabelled folder. */
function checkMethodLabels(config: TrainConfig): void {
  if (config.unlabelled && getMethodClass(config.method).needsLabels) {
    throw new UserError(`--method ${config.method} needs labels; --dataset folder --unlabelled has none`);
  }
}

/**
 * The gradient cache needs a method whose loss is split into `embed` and `embeddingLoss`,
 * and per-sample normalisation: batch norm in training mode couples the batch, so a
 * chunked backward cannot reproduce it. Refused unless the user accepts per-chunk
 * statistics, which prints a warning.
 */
export function checkGradCache(config: TrainConfig, method: BaseMethod, printWarning: boolean): void {
  if (config.gradCacheChunk === undefined) return;
  if (!method.splitsLoss) {
    throw new UserError(
      `--grad-cache-chunk: method '${config.method}' overrides sslLoss(); split it into embed() and embeddingLoss() to use the gradient cache`,
    );
  }
  if (!hasBatchNorm(method)) return;
  if (!config.gradCacheApproximateBn) {
    throw new UserError(
      '--grad-cache-chunk: batch norm (or IterNorm) in training mode couples the samples of a batch, so the gradient cache cannot be exact with it; ' +
        'use --norm group or --norm layer (exact; with VIbCReg also --method-arg iternorm=false), or --grad-cache-approximate-bn true for per-chunk statistics (approximate)',
    );
  }
  if (printWarning) {
    process.stderr.write(
      'ssl-train: warning: gradient cache with batch norm uses per-chunk statistics: gradients are approximate, not those of the full batch\n',
    );
  }
}

/**
 * What validation runs on: a seeded sample of the training set as kNN memory, the test split
 * (a folder's are read batch by batch). Undefined when validation is off or there are no labels.
 */
export function validationSettings(config: TrainConfig, experiment: Experiment, localBatch: number): ValidationSettings | undefined {
  if (config.valEvery === 0 || !experiment.test) return undefined;
  return {
    memory: sampleDataset(experiment.train, config.knnTrainSamples, config.seed + 1),
    val: sampleDataset(experiment.test, config.valSamples, config.seed + 2),
    transform: evalTransform(experiment.train),
    batchSize: Math.max(localBatch, 64),
    knnK: config.knnK,
    knnTemperature: config.knnTemperature,
  };
}

/** Batch per rank; a user error unless the global batch splits evenly and fits the data. */
export function localBatchSize(config: TrainConfig, worldSize: number, trainSize: number): number {
  if (config.batchSize % worldSize !== 0) {
    throw invalidValue('--batch-size', config.batchSize, `a multiple of the world size ${worldSize} (each rank gets batch-size / world size)`);
  }
  if (config.batchSize > trainSize) {
    throw invalidValue('--batch-size', config.batchSize, `at most the training set size ${trainSize}`);
  }
  return config.batchSize / worldSize;
}

/**
 * Pre-trains `config.method` as configured: selects the engine, loads the data, builds
 * the method, and fits it with the trainer resolved from the run's container (strategy,
 * loggers and callbacks injected; see {@link RunOptions.container}).
 */
export async function runTraining(config: TrainConfig, options: RunOptions = {}): Promise<TrainingRun> {
  const request = engineRequest(config, options.worker?.localRank);
  const scope = (options.container ?? rootContainer).createChildContainer();
  checkStrategyName(config.strategy, scope); // before the data is loaded
  const engine = await initEngine(request.backend, request.gpu);
  checkFolderFlags(config);
  checkMethodLabels(config);
  const badSamplesLimit = parseBadSamplesLimit(config.maxBadSamples);
  const experiment: Experiment = config.dataset === 'folder' ? await prepareFolderExperiment(config, warnSkippedFile) : prepareExperiment(config);
  const { train, optim } = experiment;
  const selected = await registerRunStrategy(scope, config, options.worker);
  const strategy = selected.strategy;
  const worldSize = selected.group.worldSize;
  if (!experiment.test && config.valEvery > 0 && strategy.isGlobalZero) {
    process.stderr.write('ssl-train: note: --dataset folder --unlabelled has no labels: kNN and linear validation are off\n');
  }
  checkDropLast(config, worldSize);
  const pretrainSet = sampleDataset(train, config.trainSamples, config.seed + 3);
  const localBatch = localBatchSize(config, worldSize, pretrainSet.length);
  const runDir = config.runDir ?? join('runs', `${config.method}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  if (strategy.isGlobalZero) checkRunDirWritable(runDir);
  const method = experiment.createMethod();
  if (config.pretrained !== undefined) loadPretrainedBackbone(method, resolvePretrained(config.pretrained, '--pretrained'), '--pretrained');
  checkGradCache(config, method, strategy.isGlobalZero);
  if (config.gradCheckpointing && strategy.isGlobalZero) {
    const blocks = transformerBlocks(method).length;
    process.stderr.write(`ssl-train: note: --grad-checkpointing: ${blocks} transformer blocks recompute their activations in the backward pass\n`);
  }
  const loader = new MultiViewLoader({
    dataset: pretrainSet,
    views: experiment.views,
    batchSize: localBatch,
    sampler: strategy.sampler({ length: pretrainSet.length, seed: config.seed, localBatch, dropLast: config.dropLast }),
    seed: config.seed,
    dropLast: config.dropLast,
    workers: config.workers,
    onSkip: (file) => warnSkippedFile(file.path, `${file.reason} (unreadable files so far: ${loader.skippedFiles})`),
    maxSkippedFiles: badSamplesAllowed(badSamplesLimit, pretrainSet.length),
  });
  const task = new SslTask(method, { ...optim, globalBatch: config.batchSize }, validationSettings(config, experiment, localBatch), config.gradCacheChunk);

  const resolved: Record<string, unknown> = {
    ...config,
    ...optim,
    cifarStem: experiment.cifarStem,
    runDir,
    methodArgs: experiment.methodArgs,
    crops: formatCrops(experiment.crops),
    worldSize,
    strategyInUse: selected.name,
    globalBatch: config.batchSize,
    localBatch,
    backendInUse: engine.backend,
    nativeKernels: engine.nativeKernels,
    imageSize: train.height,
    channels: train.channels,
    trainSize: pretrainSet.length,
    valSize: experiment.test?.length ?? 0,
    parameters: method.numParameters(true),
    packageVersion: packageVersion(),
    gitCommit: gitCommit(),
  };
  const trainerOptions: TrainerOptions = {
    maxEpochs: config.epochs,
    maxSteps: config.maxSteps,
    accumulateGradBatches: config.accumulateGradBatches,
    logEvery: config.logEvery,
    valEvery: config.valEvery,
    validateAtStart: config.valAtStart,
    checkpointEvery: config.checkpointEvery,
    checkpointEverySteps: config.checkpointEverySteps,
    runDir,
    resume: config.resume,
    config: resolved,
    stop: options.stop,
  };
  scope.registerInstance(TRAINER_OPTIONS, trainerOptions);
  // Whether the W&B run is continued is decided when the trainer knows where training
  // starts (WandbLogger.beginAt: a checkpoint's step, or 0 for a fresh start).
  const { wandbProject: project, wandbEntity: entity, wandbName: name, wandbGroup, wandbMode: mode } = config;
  const wandb = config.logger === 'wandb' || project !== undefined;
  registerLoggers(scope, runDir, wandb ? { runDir, project, entity, name, group: wandbGroup, tags: parseTags(config.wandbTags), mode } : undefined);
  registerAround<Callback>(scope, CALLBACK, options.callbacks ?? [new ProgressBar(config.epochs)]);
  let lock: RunLock | undefined;
  let stoppedTogether = false;
  try {
    // Before anything is written to the run directory: a run into a directory another run is
    // writing stops here (the lock is released in the finally below, or at process exit).
    if (strategy.isGlobalZero) lock = acquireRunLock(runDir, { forceUnlock: config.forceUnlock });
    const fit = await scope.resolve(Trainer).fit(task, dataSource(loader, localBatch));
    return { runDir, fit, engine, strategy: selected.name };
  } catch (e) {
    stoppedTogether = e instanceof NonFiniteError;
    throw e;
  } finally {
    method.dispose();
    selected.close();
    lock?.release();
    // Every rank stops at a non-finite step with the same message. The other ranks let
    // rank 0 exit first, so that a launcher reports rank 0's line (ours then stops them)
    // rather than the same line once more from another rank.
    if (stoppedTogether && !strategy.isGlobalZero) await new Promise((resolve) => setTimeout(resolve, NON_ZERO_RANK_EXIT_DELAY_MS));
  }
}

/** How long a rank other than 0 waits before exiting after the ranks stopped together. */
const NON_ZERO_RANK_EXIT_DELAY_MS = 3000;
