/**
 * Your own logger and callback, injected into a run from code (Lightning's `logger=` and
 * `callbacks=`): every run resolves its trainer from a child of the container you pass, so
 * what you register there takes part. A registered LOGGER replaces the default run-directory
 * logger (register a `RunDirLogger` too to keep the run directory); CALLBACKs run after the
 * progress display; a STRATEGY would replace the one the config implies.
 *
 * Run: npm run build && node dist/examples/inject.js [run-dir]
 */
import 'reflect-metadata';
import { container } from 'tsyringe';
import { buildConfig } from '../src/experiment/config.js';
import { runTraining } from '../src/experiment/train.js';
import { CALLBACK, type Callback } from '../src/trainer/callbacks.js';
import { LOGGER, RunDirLogger, type Logger } from '../src/trainer/loggers.js';

/** Keeps every logged loss in memory (a stand-in for your own tracking service). */
export class MemoryLogger implements Logger {
  readonly losses: Array<[number, number]> = [];
  status = '';
  logHyperparams(): void {}
  logMetrics(metrics: Record<string, number>, step: number): void {
    if (metrics['train/loss'] !== undefined) this.losses.push([step, metrics['train/loss']]);
  }
  async finalize(status: 'success' | 'failed'): Promise<void> {
    this.status = status;
  }
}

/** Prints one line per epoch. */
export const epochLine: Callback = {
  onEpochEnd: (progress, metrics) => console.log(`epoch ${progress.epoch + 1}: kNN top-1 ${metrics['val/knn_acc1']?.toFixed(3)}`),
};

export async function trainWithInjected(runDir: string): Promise<MemoryLogger> {
  const memory = new MemoryLogger();
  const scope = container.createChildContainer();
  scope.registerInstance(LOGGER, new RunDirLogger(runDir)); // keep the run directory too
  scope.registerInstance(LOGGER, memory);
  scope.registerInstance(CALLBACK, epochLine);
  const config = buildConfig({
    method: 'simclr',
    backbone: 'mlp',
    imageSize: 16,
    syntheticSize: 256,
    batchSize: 64,
    epochs: 2,
    workers: 0,
    logEvery: 1,
    runDir,
    methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
  });
  await runTraining(config, { container: scope, callbacks: [] });
  return memory;
}

if (process.argv[1]?.endsWith('inject.js')) {
  const memory = await trainWithInjected(process.argv[2] ?? 'runs/inject-example');
  console.log(`${memory.status}: ${memory.losses.length} losses logged, last ${memory.losses.at(-1)?.[1].toFixed(4)}`);
}
