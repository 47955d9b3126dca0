import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { container, inject, injectable } from 'tsyringe';
import { UserError } from '../../src/core/errors.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { DDP_OPTIONS, DdpStrategy } from '../../src/distributed/ddp.js';
import { buildConfig } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { CALLBACK, type Callback } from '../../src/trainer/callbacks.js';
import type { Progress } from '../../src/trainer/interfaces.js';
import { LOGGER, type Logger } from '../../src/trainer/loggers.js';
import {
  checkStrategyName,
  PROCESS_GROUP,
  registerStrategy,
  resolveStrategy,
  SingleDeviceStrategy,
  STRATEGY,
  strategyNames,
  type Strategy,
} from '../../src/trainer/strategy.js';
import { tempDir } from '../helpers/run.js';

/** What the user classes below saw; registered as a value, injected into each of them. */
interface Seen {
  reductions: number;
  loggedSteps: number[];
  loggerStrategy?: Strategy;
  config?: Record<string, unknown>;
  callbackSteps: number[];
  status?: string;
}
const SEEN = Symbol('test.Seen');

@injectable()
class CountingStrategy extends SingleDeviceStrategy {
  constructor(@inject(SEEN) private readonly seen: Seen) {
    super();
  }
  override reduceGradients(grads: Record<string, Tensor>): Record<string, Tensor> {
    this.seen.reductions++;
    return grads;
  }
}

@injectable()
class RecordingLogger implements Logger {
  constructor(
    @inject(SEEN) private readonly seen: Seen,
    @inject(STRATEGY) strategy: Strategy,
  ) {
    seen.loggerStrategy = strategy;
  }
  logHyperparams(config: Record<string, unknown>): void {
    this.seen.config = config;
  }
  logMetrics(metrics: Record<string, number>, step: number): void {
    if (metrics['train/loss'] !== undefined) this.seen.loggedSteps.push(step);
  }
  finalize(status: 'success' | 'failed'): void {
    this.seen.status = status;
  }
}

@injectable()
class RecordingCallback implements Callback {
  constructor(@inject(SEEN) private readonly seen: Seen) {}
  onTrainBatchEnd(progress: Progress): void {
    this.seen.callbackSteps.push(progress.step);
  }
}

/** A one-rank group that counts its all-reduces. */
class CountingGroup extends SingleProcessGroup {
  allReduces = 0;
  override allReduce(): void {
    this.allReduces++;
  }
}

describe('strategies, loggers and callbacks come from the container', function () {
  this.timeout(120_000);

  it('single and ddp are registered by name; a child container adds its own, which its parent does not see', () => {
    const scope = container.createChildContainer();
    registerStrategy('counting', CountingStrategy, scope);
    scope.registerInstance(SEEN, { reductions: 0 });
    assert.deepEqual(strategyNames(scope).slice(0, 2), ['single', 'ddp']);
    assert.ok(strategyNames(scope).includes('counting'));
    assert.ok(!strategyNames(container).includes('counting'));
    assert.ok(resolveStrategy(scope, 'counting') instanceof CountingStrategy);
    assert.ok(resolveStrategy(scope, 'single') instanceof SingleDeviceStrategy);
    const userError = (pattern: RegExp) => (e: Error) => e instanceof UserError && pattern.test(e.message);
    assert.throws(
      () => resolveStrategy(container, 'counting'),
      userError(/^--strategy: "counting" is not allowed; expected one of single, ddp\b.* \(the registered strategies\)$/),
    );
    assert.throws(() => resolveStrategy(scope, 'auto'), userError(/^--strategy: "auto" is not allowed/), "auto is the run's to resolve");
    assert.throws(
      () => checkStrategyName('fsdp', scope),
      userError(/^--strategy: "fsdp" is not allowed; expected one of auto, single, ddp, .*counting.* \(the registered strategies\)$/),
    );
    checkStrategyName('auto', scope);
    checkStrategyName('counting', scope);
  });

  it('ddp is injected the PROCESS_GROUP and DDP_OPTIONS registered in the container it is resolved from', async () => {
    const group = new CountingGroup();
    const scope = container.createChildContainer();
    scope.registerInstance(PROCESS_GROUP, group);
    // A bucket of one float32: each of the two gradients gets its own all-reduce.
    scope.registerInstance(DDP_OPTIONS, { bucketCapMb: 4 / (1024 * 1024) });
    const ddp = resolveStrategy(scope, 'ddp');
    assert.ok(ddp instanceof DdpStrategy);
    assert.equal(ddp.group, group);
    const variables = [tf.variable(tf.ones([1]), true, 'container-test-a'), tf.variable(tf.ones([1]), true, 'container-test-b')];
    const grads = { 'container-test-a': tf.ones([1]), 'container-test-b': tf.ones([1]) };
    const reduced = await ddp.reduceGradients(grads, variables);
    assert.equal(group.allReduces, 2);
    assert.equal(ddp.stats.gradientAllReduces, 2);
    tf.dispose([...variables, ...Object.values(grads), ...Object.values(reduced)]);
  });

  it('a run selects a registered strategy class by name (config strategy) and constructs the logger and callback classes registered beside it', async () => {
    const seen: Seen = { reductions: 0, loggedSteps: [], callbackSteps: [] };
    const scope = container.createChildContainer();
    scope.registerInstance(SEEN, seen);
    registerStrategy('counting', CountingStrategy, scope);
    scope.register(LOGGER, RecordingLogger);
    scope.register(CALLBACK, RecordingCallback);
    const runDir = join(tempDir(), 'run');
    const config = buildConfig({
      dataset: 'synthetic',
      imageSize: 16,
      syntheticSize: 64,
      backbone: 'mlp',
      batchSize: 16,
      maxSteps: 3,
      workers: 0,
      valEvery: 0,
      logEvery: 1,
      backend: 'cpu',
      strategy: 'counting',
      runDir,
      methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
    });
    const run = await runTraining(config, { container: scope, callbacks: [] });
    assert.equal(run.strategy, 'counting');
    assert.equal(seen.reductions, 3, 'the trainer reduced its gradients through the selected strategy');
    assert.ok(seen.loggerStrategy instanceof CountingStrategy, 'the logger was injected the run strategy');
    assert.deepEqual(seen.loggedSteps, [1, 2, 3]);
    assert.equal(seen.status, 'success');
    assert.deepEqual(seen.callbackSteps, [1, 2, 3]);
    assert.equal(seen.config?.strategyInUse, 'counting');
    assert.equal(seen.config?.strategy, 'counting');
  });
});
