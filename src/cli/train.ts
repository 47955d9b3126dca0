import 'reflect-metadata';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { container as rootContainer, type DependencyContainer } from 'tsyringe';
import { createBackbone } from '../backbones/index.js';
import { initEngine, type EngineInfo } from '../core/engine.js';
import { invalidValue, UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';
import { barlowViews, byolViews, evalTransform, simclrViews, type ViewAugmentation } from '../data/augment.js';
import { subset, type ImageDataset } from '../data/dataset.js';
import { loadDataset } from '../data/load.js';
import { MultiViewLoader, type MultiViewBatch } from '../data/loader.js';
import { RandomSampler } from '../data/sampler.js';
import { getMethodClass, resolveMethodArgs } from '../methods/registry.js';
import { SslTask } from '../methods/task.js';
import { ProgressBar } from '../trainer/callbacks.js';
import type { DataSource } from '../trainer/interfaces.js';
import { LOGGER, RunDirLogger } from '../trainer/loggers.js';
import { SingleDeviceStrategy, STRATEGY, type Strategy } from '../trainer/strategy.js';
import { Trainer, TRAINER_OPTIONS, type FitResult, type TrainerOptions } from '../trainer/trainer.js';
import type { TrainConfig } from './config.js';

/** A finished training run. */
export interface TrainingRun {
  runDir: string;
  fit: FitResult;
  engine: EngineInfo;
}

/** Extra wiring for library users and tests. */
export interface RunOptions {
  /** Where to resolve strategy/loggers from (a child is made; defaults to the global container). */
  container?: DependencyContainer;
  /** Replaces the progress display (e.g. none in tests). */
  callbacks?: TrainerOptions['callbacks'];
}

const packageRoot = new URL('../../../', import.meta.url);

function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('package.json', packageRoot), 'utf8')) as { version: string }).version;
}

function gitCommit(): string | undefined {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { cwd: packageRoot, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
  } catch {
    return undefined;
  }
}

/** The augmentation recipe a method asks for (`static viewRecipe`), per view. */
function viewsFor(recipe: string, dataset: ImageDataset): ViewAugmentation[] {
  switch (recipe) {
    case 'byol':
      return byolViews(dataset);
    case 'barlow':
      return barlowViews(dataset);
    default:
      return simclrViews(dataset);
  }
}

/** The first `n` images of `ds` after a seeded shuffle (all when n is 0 or >= length). */
function sample(ds: ImageDataset, n: number, seed: number): ImageDataset {
  if (n === 0 || n >= ds.length) return ds;
  return subset(ds, new Rng(seed).permutation(ds.length).slice(0, n));
}

/** The strategy for the config: one process here; `src/distributed` provides DDP. */
function createStrategy(config: TrainConfig): Strategy {
  if (config.devices > 1) {
    throw new UserError(`--devices: ${config.devices} is not available yet; multi-process training (DDP) is not built in this version, use --devices 1`);
  }
  return new SingleDeviceStrategy();
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

/**
 * Pre-trains `config.method` as configured: selects the engine, loads the data, builds
 * the method, and fits it with the trainer (strategy and loggers from the container).
 */
export async function runTraining(config: TrainConfig, options: RunOptions = {}): Promise<TrainingRun> {
  const engine = await initEngine(config.backend);
  const methodClass = getMethodClass(config.method);
  const methodArgs = resolveMethodArgs(config.method, config.methodArgs);
  const strategy = createStrategy(config);
  const worldSize = strategy.group.worldSize;
  if (config.batchSize % worldSize !== 0) {
    throw invalidValue('--batch-size', config.batchSize, `a multiple of the world size ${worldSize} (each rank gets batch-size / world size)`);
  }
  const localBatch = config.batchSize / worldSize;

  const dataOptions = { dataDir: config.dataDir, seed: config.seed, size: config.syntheticSize, imageSize: config.imageSize };
  const train = loadDataset(config.dataset, { ...dataOptions, split: 'train' });
  const test = loadDataset(config.dataset, { ...dataOptions, split: 'test', size: Math.max(16, Math.round(config.syntheticSize / 4)) });
  if (localBatch > train.length) {
    throw invalidValue('--batch-size', config.batchSize, `at most the training set size ${train.length} per rank`);
  }

  const defaults = methodClass.optimDefaults;
  const optimizer = config.optimizer ?? defaults.optimizer;
  const lr = config.lr ?? defaults.lr;
  const classifierLr = config.classifierLr ?? defaults.classifierLr;
  const weightDecay = config.weightDecay ?? defaults.weightDecay;
  const warmupEpochs = config.warmupEpochs ?? config.epochs / 10;
  const cifarStem = config.cifarStem ?? Math.min(train.height, train.width) <= 64;
  const runDir = config.runDir ?? join('runs', `${config.method}-${new Date().toISOString().replace(/[:.]/g, '-')}`);

  const rng = new Rng(config.seed);
  const method = new methodClass({
    createBackbone: (r) => createBackbone(config.backbone, { inChannels: train.channels, imageSize: train.height, cifarStem, rng: r }),
    numClasses: train.numClasses,
    rng,
    args: methodArgs,
  });
  method.group = strategy.group;
  const views = viewsFor(methodClass.viewRecipe, train);
  const loader = new MultiViewLoader({
    dataset: train,
    views,
    batchSize: localBatch,
    sampler: new RandomSampler(train.length, config.seed),
    seed: config.seed,
    dropLast: true,
    workers: config.workers,
  });
  const task = new SslTask(
    method,
    { optimizer, lr, classifierLr, weightDecay, momentum: config.momentum, larsEta: config.larsEta, larsClipLr: config.larsClipLr, warmupEpochs, warmupStartLr: config.warmupStartLr, minLr: config.minLr, globalBatch: config.batchSize },
    config.valEvery > 0
      ? {
          memory: sample(train, config.knnTrainSamples, config.seed + 1),
          val: sample(test, config.valSamples, config.seed + 2),
          transform: evalTransform(train),
          batchSize: Math.max(localBatch, 64),
          knnK: config.knnK,
          knnTemperature: config.knnTemperature,
        }
      : undefined,
  );

  const resolved: Record<string, unknown> = {
    ...config,
    optimizer,
    lr,
    classifierLr,
    weightDecay,
    warmupEpochs,
    cifarStem,
    runDir,
    methodArgs,
    worldSize,
    globalBatch: config.batchSize,
    localBatch,
    backendInUse: engine.backend,
    nativeKernels: engine.nativeKernels,
    trainSize: train.length,
    valSize: test.length,
    parameters: method.numParameters(true),
    packageVersion: packageVersion(),
    gitCommit: gitCommit(),
  };
  const scope = (options.container ?? rootContainer).createChildContainer();
  scope.registerInstance(STRATEGY, strategy);
  if (!scope.isRegistered(LOGGER, true)) scope.registerInstance(LOGGER, new RunDirLogger(runDir));
  const trainerOptions: TrainerOptions = {
    maxEpochs: config.epochs,
    maxSteps: config.maxSteps,
    logEvery: config.logEvery,
    valEvery: config.valEvery,
    checkpointEvery: config.checkpointEvery,
    runDir,
    resume: config.resume,
    config: resolved,
    callbacks: options.callbacks ?? [new ProgressBar(config.epochs)],
  };
  scope.registerInstance(TRAINER_OPTIONS, trainerOptions);
  try {
    const fit = await scope.resolve(Trainer).fit(task, dataSource(loader, localBatch));
    return { runDir, fit, engine };
  } finally {
    method.dispose();
    strategy.teardown();
  }
}
