/**
 * The wiring of a run's container (a child of the caller's, one per run): what the run
 * registers there before it resolves the trainer, so that the trainer, the strategy and the
 * caller's classes get it by injection.
 */
import type { DependencyContainer, InjectionToken } from 'tsyringe';
import { invalidValue, UserError } from '../core/errors.js';
import { SingleProcessGroup, type ProcessGroup } from '../core/process-group.js';
import { DDP_OPTIONS, type DdpOptions } from '../distributed/ddp.js';
import { createProcessGroup } from '../distributed/gloo.js';
import type { WorkerEnv } from '../distributed/launcher.js';
import { WandbLogger, type WandbLoggerOptions } from '../tracking/index.js';
import { LOGGER, RunDirLogger, type Logger } from '../trainer/loggers.js';
import { PROCESS_GROUP, resolveStrategy, STRATEGY, type Strategy } from '../trainer/strategy.js';
import type { TrainConfig } from './config.js';

/** A run's strategy, registered in its container as STRATEGY, and the job's group (PROCESS_GROUP). */
export interface RunStrategy {
  /** The strategy's registered name (`auto` resolved). */
  name: string;
  strategy: Strategy;
  group: ProcessGroup;
  /** Tears the strategy down, then closes the group if the run created it. */
  close(): void;
}

/**
 * Registers the job's process group and the strategy `config.strategy` names in `scope`
 * (see {@link registerProcessGroup} and {@link registerSelectedStrategy}).
 */
export async function registerRunStrategy(scope: DependencyContainer, config: TrainConfig, worker: WorkerEnv | undefined): Promise<RunStrategy> {
  const { group, owned } = await registerProcessGroup(scope, config, worker);
  const closeGroup = () => {
    if (owned) group.close();
  };
  try {
    const { name, strategy } = registerSelectedStrategy(scope, config, group);
    const close = () => {
      strategy.teardown();
      closeGroup();
    };
    return { name, strategy, group, close };
  } catch (e) {
    closeGroup();
    throw e;
  }
}

/**
 * The job's process group, registered in `scope` as PROCESS_GROUP: the caller's registration
 * if there is one; else the group this worker joins (Gloo; `owned`: the run closes it), else
 * one rank on its own. Without a worker environment, more than one rank is a user error.
 */
async function registerProcessGroup(
  scope: DependencyContainer,
  config: TrainConfig,
  worker: WorkerEnv | undefined,
): Promise<{ group: ProcessGroup; owned: boolean }> {
  if (scope.isRegistered(PROCESS_GROUP, true)) return { group: scope.resolve<ProcessGroup>(PROCESS_GROUP), owned: false };
  const asked = (config.gpus ?? config.devices) * config.numNodes;
  if (!worker && asked > 1) {
    throw new UserError(`--devices: ${asked} ranks need the launcher: run through ssl-train, or set RANK, WORLD_SIZE and a rendezvous like torchrun`);
  }
  const group = worker
    ? await createProcessGroup({ rank: worker.rank, worldSize: worker.worldSize, rendezvous: worker.rendezvous, timeoutMs: config.timeout * 1000 })
    : new SingleProcessGroup();
  scope.registerInstance(PROCESS_GROUP, group);
  return { group, owned: true };
}

/**
 * Resolves the strategy `config.strategy` names (`auto`: `ddp` over a group of several ranks,
 * else `single`) from `scope`, with the config's DDP_OPTIONS registered there, and registers
 * it as STRATEGY. A user error unless it runs over every rank of `group`.
 */
function registerSelectedStrategy(scope: DependencyContainer, config: TrainConfig, group: ProcessGroup): { name: string; strategy: Strategy } {
  const ddpOptions: DdpOptions = { bucketCapMb: config.bucketCapMb, syncBatchNorm: config.syncBatchnorm };
  scope.registerInstance(DDP_OPTIONS, ddpOptions);
  const name = config.strategy === 'auto' ? (group.worldSize > 1 ? 'ddp' : 'single') : config.strategy;
  const strategy = resolveStrategy(scope, name);
  const ranks = strategy.group.worldSize;
  if (ranks !== group.worldSize) {
    throw invalidValue('--strategy', name, `a strategy over all ${group.worldSize} ranks, e.g. ddp or auto (${name} runs on ${ranks})`);
  }
  scope.registerInstance(STRATEGY, strategy);
  return { name, strategy };
}

/**
 * The check {@link registerSelectedStrategy} makes on every rank, made once by the process
 * that is about to launch `worldSize` ranks: the strategy is resolved from a child of
 * `parent` over a stand-in group of that size (which refuses collectives), then dropped.
 */
export function preflightStrategy(parent: DependencyContainer, config: TrainConfig, worldSize: number): void {
  const refuse = (): never => {
    throw new Error('the strategy preflight makes no collective');
  };
  const standIn: ProcessGroup = {
    rank: 0,
    worldSize,
    allReduce: refuse,
    allGather: refuse,
    reduceScatter: refuse,
    broadcast: refuse,
    barrier: refuse,
    close: () => {},
  };
  const scope = parent.createChildContainer();
  scope.registerInstance(PROCESS_GROUP, standIn);
  registerSelectedStrategy(scope, config, standIn);
}

/**
 * Registers `before`, then what `scope`'s ancestors registered under `token`, then `after`,
 * in `scope` (a registration there would otherwise hide the ancestors' ones). The ancestors'
 * classes and factories are constructed now, from `scope`.
 */
export function registerAround<T>(scope: DependencyContainer, token: InjectionToken<T>, before: T[], after: T[] = []): void {
  const inherited = scope.isRegistered(token, true) ? scope.resolveAll<T>(token) : [];
  for (const item of [...before, ...inherited, ...after]) scope.registerInstance(token, item);
}

/**
 * Registers a run's loggers in `scope`: the caller's LOGGERs, or the run-directory logger
 * when the caller registered none; then W&B when `wandb` is given.
 */
export function registerLoggers(scope: DependencyContainer, runDir: string, wandb?: WandbLoggerOptions): void {
  const defaults = scope.isRegistered(LOGGER, true) ? [] : [new RunDirLogger(runDir)];
  registerAround<Logger>(scope, LOGGER, defaults, wandb ? [new WandbLogger(wandb)] : []);
}
