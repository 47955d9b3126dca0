import 'reflect-metadata';
import { container as globalContainer, type DependencyContainer, type FactoryProvider, type InjectionToken } from 'tsyringe';
import { invalidValue } from '../core/errors.js';
import type { Module } from '../core/module.js';
import type { Tensor } from '../core/tf.js';
import { RandomSampler, type Sampler } from '../data/sampler.js';
import { SingleProcessGroup, type ProcessGroup } from '../core/process-group.js';

/** What a strategy needs to make the training sampler. */
export interface SamplerOptions {
  /** Dataset size. */
  length: number;
  seed: number;
  /** Samples per batch on this process. */
  localBatch: number;
  dropLast: boolean;
}

/** Injection token of the run's {@link Strategy}: the one selected by name (see {@link registerStrategy}), which the trainer gets. */
export const STRATEGY = Symbol.for('ssl-zoo.Strategy');

/**
 * Injection token of the {@link ProcessGroup} of the job (all its ranks; one rank on its own):
 * what a multi-process strategy runs over, e.g. DDP's constructor injects it.
 */
export const PROCESS_GROUP = Symbol.for('ssl-zoo.ProcessGroup');

/** Injection token of every registered strategy name (one registration per name; read by {@link strategyNames}). */
const STRATEGY_NAME = Symbol.for('ssl-zoo.StrategyName');

/**
 * How training is spread over processes (Lightning's strategy). The trainer calls these
 * hooks; only implementations in `src/distributed` talk to other processes.
 */
export interface Strategy {
  /** The group losses gather over and gradients are reduced over. */
  readonly group: ProcessGroup;
  /** Whether this is the process that prints, logs and writes checkpoints. */
  readonly isGlobalZero: boolean;
  /** Makes the model identical on every rank (broadcast from rank 0). */
  setup(model: Module): void;
  /**
   * Turns each rank's gradients (keyed by variable name, for `variables`) into the
   * gradients every rank applies; returns new tensors and disposes the inputs it replaces.
   * May be asynchronous (DDP reads gradient buckets back from a GPU without blocking).
   */
  reduceGradients(grads: Record<string, Tensor>, variables: readonly Tensor[]): Record<string, Tensor> | Promise<Record<string, Tensor>>;
  /**
   * Averages scalar metrics over ranks (for logging). Every rank must get the same result:
   * the trainer's non-finite check reads it, so that all ranks stop at the same step.
   */
  reduceMetrics(values: Record<string, number>): Record<string, number>;
  /**
   * The elementwise maximum of `values` over ranks, the same on every rank (one small
   * all-reduce): for decisions all ranks must share, e.g. "did any rank see a problem".
   */
  allReduceMax(values: number[]): number[];
  /** The training sampler of this process (a shard of the epoch's permutation under DDP). */
  sampler(options: SamplerOptions): Sampler;
  barrier(): void;
  teardown(): void;
}

/**
 * One process (`--strategy single`): every hook is the identity. Subclass it for a
 * one-process strategy of your own (no decorator needed while the constructor takes no
 * parameters) and register it with {@link registerStrategy}.
 */
export class SingleDeviceStrategy implements Strategy {
  readonly group: ProcessGroup = new SingleProcessGroup();
  readonly isGlobalZero = true;
  setup(): void {}
  reduceGradients(grads: Record<string, Tensor>): Record<string, Tensor> {
    return grads;
  }
  reduceMetrics(values: Record<string, number>): Record<string, number> {
    return values;
  }
  allReduceMax(values: number[]): number[] {
    return values;
  }
  sampler(options: SamplerOptions): Sampler {
    return new RandomSampler(options.length, options.seed);
  }
  barrier(): void {}
  teardown(): void {}
}

/**
 * A strategy class the container can construct: no constructor parameters, or `@injectable()`
 * with injected ones (tsyringe's `constructor<Strategy>`, which its index does not export).
 */
export type StrategyClass = Extract<InjectionToken<Strategy>, new (...args: never) => unknown>;

/** The injection token of the strategy registered as `name`. */
export function strategyToken(name: string): InjectionToken<Strategy> {
  return `ssl-zoo.Strategy:${name}`;
}

/**
 * Registers a strategy under `name` (Lightning's strategy registry), so that `--strategy name`
 * (config `strategy: name`) selects it. A class is constructed from the run's container when
 * selected, so an `@injectable()` class may `@inject(PROCESS_GROUP)` (or any other token); a
 * factory provider (`{ useFactory: (scope) => ... }`) builds it by hand. Registered in
 * `target` (default the global container, which the CLI runs from) and visible to its child
 * containers; registering a name again replaces it there. Built in: `single`
 * ({@link SingleDeviceStrategy}) and `ddp` (`DdpStrategy`, src/distributed/ddp.ts).
 */
export function registerStrategy(name: string, strategy: StrategyClass | FactoryProvider<Strategy>, target: DependencyContainer = globalContainer): void {
  if (!strategyNames(target).includes(name)) {
    // A local registration hides the names registered in the ancestors: keep them.
    const inherited = target.isRegistered(STRATEGY_NAME) ? [] : strategyNames(target);
    for (const n of [...inherited, name]) target.register(STRATEGY_NAME, { useValue: n });
  }
  if (typeof strategy === 'function') target.register(strategyToken(name), strategy);
  else target.register(strategyToken(name), strategy);
}

/**
 * The strategy names registered in `scope` and its ancestors, in registration order (a name
 * an ancestor registers after `scope` registered its own is selectable but not listed).
 */
export function strategyNames(scope: DependencyContainer): string[] {
  return scope.isRegistered(STRATEGY_NAME, true) ? [...new Set(scope.resolveAll<string>(STRATEGY_NAME))] : [];
}

/** The one-line user error for a name that no strategy is registered under: it lists the registered names (and `auto` where it is allowed). */
function unknownStrategy(name: string, scope: DependencyContainer, auto: boolean): Error {
  return invalidValue('--strategy', name, `one of ${[...(auto ? ['auto'] : []), ...strategyNames(scope)].join(', ')} (the registered strategies)`);
}

/** A user error unless `name` (a `--strategy` value) is `auto` or a strategy registered in `scope`. */
export function checkStrategyName(name: string, scope: DependencyContainer): void {
  if (name !== 'auto' && !scope.isRegistered(strategyToken(name), true)) throw unknownStrategy(name, scope, true);
}

/**
 * The strategy registered as `name`, constructed from `scope`; a user error for an unknown
 * name (`auto` included: the run picks what it stands for).
 */
export function resolveStrategy(scope: DependencyContainer, name: string): Strategy {
  if (!scope.isRegistered(strategyToken(name), true)) throw unknownStrategy(name, scope, false);
  return scope.resolve(strategyToken(name));
}

registerStrategy('single', SingleDeviceStrategy);
