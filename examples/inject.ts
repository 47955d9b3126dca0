/**
 * Your own strategy, logger and callback, registered in the container the CLI runs from
 * (docs/extending.md): `--strategy counting` selects the strategy by its registered name; the
 * logger and the callback are classes the run constructs from its container, so they get
 * what the run registered there (here the logger is injected the strategy the trainer uses).
 *
 * Run: npm run build && node dist/examples/inject.js --strategy counting --max-steps 20 --val-every 0
 */
import 'reflect-metadata';
import { container, inject, injectable } from 'tsyringe';
import { main } from '../src/cli/main.js';
import type { Tensor } from '../src/core/tf.js';
import { CALLBACK, type Callback } from '../src/trainer/callbacks.js';
import type { Progress } from '../src/trainer/interfaces.js';
import { LOGGER, RunDirLogger, type Logger } from '../src/trainer/loggers.js';
import { registerStrategy, SingleDeviceStrategy, STRATEGY, type Strategy } from '../src/trainer/strategy.js';
import { TRAINER_OPTIONS, type TrainerOptions } from '../src/trainer/trainer.js';

/** One process, like `single`, that counts the gradient reductions (one per optimizer step). */
export class CountingStrategy extends SingleDeviceStrategy {
  reductions = 0;

  override reduceGradients(grads: Record<string, Tensor>): Record<string, Tensor> {
    this.reductions++;
    return super.reduceGradients(grads);
  }

  override teardown(): void {
    console.log(`counting: ${this.reductions} gradient reductions`);
  }
}

/** Counts the logged losses (a stand-in for your own tracking service) and names the trainer's strategy at the end. */
@injectable()
export class PrintingLogger implements Logger {
  private losses = 0;

  constructor(@inject(STRATEGY) private readonly strategy: Strategy) {}

  logHyperparams(): void {}

  logMetrics(metrics: Record<string, number>): void {
    if (metrics['train/loss'] !== undefined) this.losses++;
  }

  finalize(status: 'success' | 'failed'): void {
    console.log(`PrintingLogger: ${status}, ${this.losses} losses logged, strategy ${this.strategy.constructor.name}`);
  }
}

/** One line per epoch. */
export class EpochLine implements Callback {
  onEpochEnd(progress: Progress): void {
    console.log(`EpochLine: epoch ${progress.epoch + 1} ended at step ${progress.step}`);
  }
}

registerStrategy('counting', CountingStrategy);
container.register(LOGGER, PrintingLogger);
// A registered logger replaces the default run-directory one: register it too to keep metrics.jsonl.
container.register(LOGGER, { useFactory: (c) => new RunDirLogger(c.resolve<TrainerOptions>(TRAINER_OPTIONS).runDir) });
container.register(CALLBACK, EpochLine);

if (process.argv[1]?.endsWith('inject.js')) {
  process.exitCode = await main(process.argv.slice(2));
}
