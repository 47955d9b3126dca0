import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { container as rootContainer } from 'tsyringe';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { runTraining, type TrainingRun } from '../../src/experiment/train.js';
import { LOGGER, RunDirLogger } from '../../src/trainer/loggers.js';
import { WandbLogger, type WandbLoggerOptions } from '../../src/tracking/logger.js';
import { historyRows, parseMetricsJsonl, type HistoryRow } from '../../src/trainer/run-dir.js';
import { SMALL_PROJECTOR, tempDir } from '../helpers/run.js';
import { FakeWandbServer } from './fake-wandb.js';

/** A tiny run: 256 synthetic 16x16 images, mlp backbone, batch 32 (8 steps per epoch), 2 epochs, metrics every 2 steps. */
export const TINY: TrainConfigInput = {
  method: 'simclr',
  backbone: 'mlp',
  dataset: 'synthetic',
  imageSize: 16,
  syntheticSize: 256,
  batchSize: 32,
  epochs: 2,
  workers: 0,
  knnTrainSamples: 256,
  logEvery: 2,
  methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
};

/** The flags of {@link TINY} for the CLI. */
export const TINY_FLAGS = [
  '--method',
  'simclr',
  '--backbone',
  'mlp',
  '--dataset',
  'synthetic',
  '--image-size',
  '16',
  '--synthetic-size',
  '256',
  '--batch-size',
  '32',
  '--epochs',
  '2',
  '--workers',
  '0',
  '--knn-train-samples',
  '256',
  '--log-every',
  '2',
  ...SMALL_PROJECTOR,
];

/** An environment holding only what the W&B SDK should see (none of the developer's WANDB_* variables). */
export function wandbEnv(vars: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: tempDir('ssl-zoo-home-') };
  for (const [k, v] of Object.entries(vars)) if (v !== undefined) env[k] = v;
  return env;
}

/** What {@link trainWithWandb} returns. */
export interface TrackedRun {
  run: TrainingRun;
  runDir: string;
  logger: WandbLogger;
  /** Lines the W&B logger printed (warnings, notes). */
  printed: string[];
}

/**
 * Trains `config` in this process with the run-directory logger and a {@link WandbLogger}
 * (fast retries; `finishTimeoutMs` 15 s unless given).
 */
export async function trainWithWandb(
  config: TrainConfigInput,
  wandb: Partial<WandbLoggerOptions> & { env: NodeJS.ProcessEnv },
  runDir = join(tempDir(), 'run'),
): Promise<TrackedRun> {
  const printed: string[] = [];
  const resolved = buildConfig({ ...TINY, ...config, runDir });
  const logger = new WandbLogger({
    runDir,
    retryDelaysMs: [50, 100],
    finishTimeoutMs: 15_000,
    resume: resolved.resume !== undefined,
    print: (line) => printed.push(line),
    ...wandb,
  });
  const container = rootContainer.createChildContainer();
  container.registerInstance(LOGGER, new RunDirLogger(runDir));
  container.registerInstance(LOGGER, logger);
  const run = await runTraining(resolved, { container, callbacks: [] });
  return { run, runDir, logger, printed };
}

/** The run directory's history rows (metrics.jsonl merged per step). */
export function localHistory(runDir: string): HistoryRow[] {
  const path = join(runDir, 'metrics.jsonl');
  return historyRows(parseMetricsJsonl(readFileSync(path, 'utf8'), path));
}

/** The raw records of metrics.jsonl. */
export function metricsLines(runDir: string): Array<Record<string, unknown>> {
  return readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A TCP port on 127.0.0.1 where nothing listens (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A fake W&B server started before the enclosing `describe`'s tests and closed after them, with the child-process environment that points at it. */
export interface FakeWandb {
  server: FakeWandbServer;
  /** Set once the server listens (use it inside tests and hooks). */
  env: NodeJS.ProcessEnv;
}

/** Registers the hooks of a {@link FakeWandb} in the current `describe`. */
export function useFakeWandb(): FakeWandb {
  const fake: FakeWandb = { server: new FakeWandbServer(), env: {} };
  before(async () => {
    await fake.server.start();
    fake.env = wandbEnv({ WANDB_API_KEY: fake.server.apiKey, WANDB_BASE_URL: fake.server.url });
  });
  after(() => fake.server.close());
  return fake;
}
