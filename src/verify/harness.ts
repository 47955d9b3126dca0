import { initEngine } from '../core/engine.js';
import type { MultiViewBatch } from '../data/loader.js';
import { DdpStrategy } from '../distributed/ddp.js';
import { createProcessGroup } from '../distributed/gloo.js';
import type { WorkerEnv } from '../distributed/launcher.js';
import { formatLossCaseReport, runLossCaseOnRank } from './loss-check.js';
import { SingleProcessGroup, type ProcessGroup } from '../core/process-group.js';
import type { BaseMethod } from '../methods/base.js';
import { SslTask } from '../methods/task.js';
import { setGradCheckpointing } from '../core/transformer.js';
import { SingleDeviceStrategy } from '../trainer/strategy.js';
import { atPath, invalidValue } from '../core/errors.js';
import type { TrainConfig } from '../experiment/config.js';
import { inProcessLoader, prepareExperiment } from '../experiment/experiment.js';
import { checkGradCache, engineRequest, localBatchSize } from '../experiment/train.js';
import { boundRatio, gradientDifference, largestPairDifference, roundoffBound, ROUNDOFF_TWINS, scalarDifference, stateDifference } from './roundoff.js';
import {
  loadRunState,
  perturbState,
  runState,
  splitQueues,
  stateArrays,
  step,
  stepBatches,
  stepStart,
  taskRun,
  twinKey,
  twinStep,
  type StateArrays,
  type StepResult,
  type TaskRun,
} from './steps.js';
import { writeNpy } from '../core/npy.js';
import type { DecisionCall } from '../methods/decisions.js';
import { collectOnRankZero, runsOfRank, shareRunState, type OneProcessOut } from './one-process.js';
import { attachRecorder, compareDecisions, gatherDecisions, replayOf, type StepDecisions } from './decisions.js';
import {
  BranchRecorder,
  BranchReplayer,
  compareBranches,
  gatherBranches,
  installBranchWatch,
  uninstallBranchWatch,
  watchBranches,
  type StepBranches,
} from './relu-branches.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * One step of the comparison, W ranks against one process on the global batch: the relative
 * difference of the loss (mean of the ranks' losses), of the applied gradients (in norm over
 * all parameters) and of the parameters and buffers (in norm, relative to how far the steps
 * moved them), each with the bound it must stay within (see src/verify/roundoff.ts:
 * `factor` × the measured round-off, at least `tolerance`), and the tensors that contribute
 * most to the gradient and parameter differences (diagnostics).
 */
export interface VerifyStep {
  step: number;
  loss: number;
  gradients: number;
  parameters: number;
  gradientsTensor: string;
  parametersTensor: string;
  lossBound: number;
  gradientsBound: number;
  parametersBound: number;
  /** The queues' and memory banks' state (rows, labels, pointer, assignments, prototypes; relative to how far the steps moved it), for methods with such state. */
  queues?: { value: number; bound: number; tensor: string };
  /** The step's discrete decisions (nearest neighbours), for methods that make them: see src/verify/decisions.ts. */
  decisions?: StepDecisions;
  /** The step's ReLU branches near zero, on several ranks: see src/verify/relu-branches.ts. */
  branches?: StepBranches;
}

export interface VerifyResult {
  worldSize: number;
  steps: VerifyStep[];
  /** Largest difference-to-bound ratio over all steps and kinds, a differing decision's margin to its bound included (passes at <= 1). */
  worst: number;
  tolerance: number;
  roundoffFactor: number;
  passed: boolean;
}

/** Options of {@link runVerify}. */
export interface VerifyOptions {
  steps: number;
  /** The floor of every bound (a relative difference always allowed). */
  tolerance: number;
  /** Multiple of the measured round-off allowed. */
  roundoffFactor: number;
  /** Directory for the first step's inputs, initial state and gradients as `.npy` files. */
  dump?: string;
  /**
   * How many ranks (the first ones, at most the world size) run the one-process reference and
   * its twins (src/verify/one-process.ts); default 1: rank 0 alone. Each such rank holds a
   * one-process model and steps the global batch, so memory grows with it.
   */
  oneProcessRanks?: number;
}

/**
 * The collective timeout of `verify`'s W-rank run for `--timeout` seconds: after each step
 * rank 0 runs the one-process reference and its {@link ROUNDOFF_TWINS} twins on the whole
 * global batch (or the first `--one-process-ranks` ranks share them: src/verify/one-process.ts),
 * and a rank with fewer runs waits in the next collective for the others, so ranks may wait
 * that many full-batch steps more than in training (MAE with all defaults: minutes on 2 cores,
 * beyond the 300 s default).
 */
export function verifyTimeoutMs(timeoutSec: number): number {
  return timeoutSec * 1000 * (2 + ROUNDOFF_TWINS);
}

async function processGroup(worker: WorkerEnv | undefined, timeoutMs: number): Promise<ProcessGroup> {
  if (!worker) return new SingleProcessGroup();
  return createProcessGroup({ rank: worker.rank, worldSize: worker.worldSize, rendezvous: worker.rendezvous, timeoutMs });
}

/** A one-process run on the global batch: the reference, or a round-off twin. */
interface OneProcessRun extends TaskRun {
  method: BaseMethod;
}

/**
 * `ssl-train verify`: trains `steps` optimizer steps with W ranks (this process is one of
 * them; the strategy `--strategy auto` selects: DDP over several ranks, the single-device
 * strategy over one) and with one process on the same global batches, and compares the loss,
 * the gradients the optimizer applies, and the parameters and buffers after each step. Beside
 * the one-process reference, {@link ROUNDOFF_TWINS} one-process twins take each step on the
 * same batches in another sample order, to measure how far two correct float32 runs of this
 * model drift apart; each W-rank difference must stay within `roundoffFactor` times the
 * largest difference of its kind and step between any two of the reference and its twins, or
 * within `tolerance` (src/verify/roundoff.ts explains why); all of them replay the W-rank run's
 * discrete decisions (src/verify/decisions.ts) and, on several ranks, its ReLU branches near zero
 * (src/verify/relu-branches.ts), and compare them as decisions. The reference and the twins run on
 * rank 0, or spread over the first `oneProcessRanks` ranks, each from rank 0's state, and rank
 * 0 compares (src/verify/one-process.ts). Every run steps through the trainer's step sequence
 * (src/trainer/step.ts: hooks, scheduler, sync, adjustment, update) with the method's schedule
 * spanning the `steps` compared and no warmup: the full learning rate at the first step, so
 * parameter differences show, then its cosine decay (and a `weightDecayEnd` schedule) as the
 * trainer applies it. Every result is read back asynchronously, so it runs on every engine
 * (`--backend webgpu` with one rank). Rank 0 returns the result; other ranks return undefined.
 */
export async function runVerify(config: TrainConfig, options: VerifyOptions, worker?: WorkerEnv): Promise<VerifyResult | undefined> {
  const { steps, tolerance, roundoffFactor } = options;
  if (options.dump && config.accumulateGradBatches > 1) {
    throw invalidValue('--dump', options.dump, 'used with --accumulate-grad-batches 1 (a dump holds one batch per step)');
  }
  await initEngineFor(config, worker);
  const experiment = prepareExperiment(config);
  const group = await processGroup(worker, verifyTimeoutMs(config.timeout));
  const worldSize = group.worldSize;
  const single = new SingleDeviceStrategy();
  const strategy = worldSize > 1 ? new DdpStrategy(group, { bucketCapMb: config.bucketCapMb, syncBatchNorm: config.syncBatchnorm }) : single;
  const localBatch = localBatchSize(config, worldSize, experiment.train.length);
  const optim = { ...experiment.optim, warmupEpochs: 0, globalBatch: config.batchSize };
  const schedule = { totalSteps: steps, stepsPerEpoch: steps };
  // The one-process runs take the whole global batch, W times a rank's: their transformer blocks
  // recompute activations in the backward pass (same gradients, bit for bit: core/checkpoint.ts),
  // so that a rank does not hold a global batch's activations beside its local batch's.
  const oneProcessRun = (): OneProcessRun => {
    const method = experiment.createMethod();
    setGradCheckpointing(method, true);
    const task = new SslTask(method, optim, undefined, config.gradCacheChunk);
    task.setup({ group: single.group });
    return { method, ...taskRun(task, single, schedule) };
  };

  const distributed = experiment.createMethod();
  checkGradCache(config, distributed, group.rank === 0);
  strategy.setup(distributed);
  const ddpTask = new SslTask(distributed, optim, undefined, config.gradCacheChunk);
  ddpTask.setup({ group });
  const ddpRun = taskRun(ddpTask, strategy, schedule);
  const ddpLoader = inProcessLoader(experiment, config, {
    batchSize: localBatch,
    sampler: strategy.sampler({ length: experiment.train.length, seed: config.seed, localBatch, dropLast: true }),
  });

  // This rank's one-process runs (src/verify/one-process.ts): one model, stepped once per run.
  const spread = Math.min(options.oneProcessRanks ?? 1, worldSize);
  const myRuns = runsOfRank(group.rank, spread);
  const one = myRuns.length > 0 ? oneProcessRun() : undefined;
  // Every run records its decisions; the one-process runs replay the W-rank run's (src/verify/decisions.ts).
  const ddpDecisions = attachRecorder(distributed);
  const oneDecisions = one && attachRecorder(one.method);
  // On several ranks, ReLU branches near zero are decisions too: the W-rank run records them, the
  // one-process runs replay them (src/verify/relu-branches.ts). One rank computes the reference's
  // arithmetic; a gradient cache runs other chunks of the batch in the W-rank and one-process runs.
  const ddpBranches = worldSize > 1 && config.gradCacheChunk === undefined ? new BranchRecorder() : undefined;
  if (ddpBranches) installBranchWatch();
  const referenceLoader = one ? inProcessLoader(experiment, config) : undefined;
  const perEpoch = ddpLoader.numBatches();
  const accumulate = config.accumulateGradBatches;
  const results: VerifyStep[] = [];
  try {
    const initialState = group.rank === 0 ? await stateArrays(one!.method) : {};
    // For --dump: the one-process runs' and the W-rank run's state before the current step.
    let before = { one: initialState, ranks: group.rank === 0 && options.dump ? await stateArrays(distributed) : {} };
    for (let s = 0; s < steps; s++) {
      const atStart = stepStart(s, accumulate, perEpoch, steps);
      // Every step is compared from the same start: the reference and its twins start from rank 0's
      // W-rank state (model and optimizer), each twin's then moved by one ulp. So a step's
      // differences are that step's own, not earlier steps' round-off carried along and grown
      // at the learning rate (src/verify/roundoff.ts).
      const start = shareRunState(group.rank === 0 ? await runState(ddpRun) : undefined, group, spread);
      const ddpBatches = await stepBatches(ddpLoader, s, accumulate, perEpoch);
      const ddpStep = () => step(ddpRun, ddpBatches, atStart);
      const ddpOut = await (ddpBranches ? watchBranches(ddpBranches, ddpStep) : ddpStep());
      const ranksCalls = gatherDecisions(await ddpDecisions.takeStep(), group);
      const ranksBranches = ddpBranches && gatherBranches(await ddpBranches.takeStep(), localBatch, group);
      const mine = new Map<number, OneProcessOut>();
      let refCalls: DecisionCall[] = [];
      let batches: MultiViewBatch[] = [];
      if (one && referenceLoader && oneDecisions && start) {
        batches = await stepBatches(referenceLoader, s, accumulate, perEpoch);
        for (const j of myRuns) {
          loadRunState(start, one);
          let orders: Int32Array[] = [];
          const replayer = ranksBranches && new BranchReplayer(ranksBranches);
          let runStep: () => Promise<StepResult>;
          if (j === 0) {
            oneDecisions.replayNext(replayOf(ranksCalls));
            runStep = () => step(one, batches, atStart);
          } else {
            const t = j - 1;
            await perturbState(one.method, s * ROUNDOFF_TWINS + t + 1);
            const replay = (o: Int32Array[]) => {
              oneDecisions.replayNext(replayOf(ranksCalls, (orders = o)));
              replayer?.inOrders(o);
            };
            runStep = () => twinStep(one, one.method, batches, atStart, (m) => twinKey(s, t, m, ROUNDOFF_TWINS, accumulate), replay);
          }
          const out = await (replayer ? watchBranches(replayer, runStep) : runStep());
          const unmatched = oneDecisions.unmatched;
          const calls = await oneDecisions.takeStep();
          const branches = await replayer?.takeStep();
          if (j === 0) refCalls = calls;
          mine.set(j, { ...out, state: await stateArrays(one.method), calls, orders, unmatched, ...(branches && { branches }) });
        }
      }
      const outs = collectOnRankZero(mine, group, spread);
      if (!outs) continue;
      const [refOut, ...twinOuts] = outs as [OneProcessOut, ...OneProcessOut[]];
      const matched = outs.every((o) => !o.unmatched);
      const decisions = compareDecisions(ranksCalls, refCalls, twinOuts, roundoffFactor, tolerance, matched);
      const branches =
        ranksBranches &&
        compareBranches(
          ranksBranches,
          refOut.branches!,
          twinOuts.map((o) => o.branches!),
          roundoffFactor,
          tolerance,
        );
      const ranksAfter = await stateArrays(distributed);
      if (options.dump) dumpStep(join(options.dump, `step-${s + 1}`), before, batches[0]!, refOut, ddpOut, one!.method, { decisions, branches });
      // The round-off: the largest difference between any two of the reference and its twins.
      const split = (state: StateArrays) => splitQueues(one!.method, state);
      const [refState, startState, ranksState] = [split(refOut.state), split(initialState), split(ranksAfter)];
      const states = outs.map((o) => split(o.state));
      const lossRoundoff = largestPairDifference(outs, (a, b) => scalarDifference(a.loss, b.loss));
      const gradientsRoundoff = largestPairDifference(outs, (a, b) => gradientDifference(a.grads, b.grads).value);
      const parametersRoundoff = largestPairDifference(states, (a, b) => stateDifference(a.rest, b.rest, startState.rest).value);
      const gradients = gradientDifference(ddpOut.grads, refOut.grads);
      const parameters = stateDifference(ranksState.rest, refState.rest, startState.rest);
      const hasQueues = Object.keys(refState.queues).length > 0;
      const queues = hasQueues ? stateDifference(ranksState.queues, refState.queues, startState.queues) : undefined;
      const queuesRoundoff = hasQueues ? largestPairDifference(states, (a, b) => stateDifference(a.queues, b.queues, startState.queues).value) : 0;
      results.push({
        step: s + 1,
        loss: scalarDifference(ddpOut.loss, refOut.loss),
        gradients: gradients.value,
        parameters: parameters.value,
        gradientsTensor: gradients.tensor,
        parametersTensor: parameters.tensor,
        lossBound: roundoffBound(lossRoundoff, roundoffFactor, tolerance),
        gradientsBound: roundoffBound(gradientsRoundoff, roundoffFactor, tolerance),
        parametersBound: roundoffBound(parametersRoundoff, roundoffFactor, tolerance),
        queues: queues && { value: queues.value, bound: roundoffBound(queuesRoundoff, roundoffFactor, tolerance), tensor: queues.tensor },
        decisions,
        branches,
      });
      if (options.dump) before = { one: ranksAfter, ranks: ranksAfter };
    }
  } finally {
    await ddpLoader.close();
    await referenceLoader?.close();
    ddpDecisions.dispose();
    oneDecisions?.dispose();
    ddpBranches?.dispose();
    if (ddpBranches) uninstallBranchWatch();
    one?.optimizer.dispose();
    one?.method.dispose();
    ddpRun.optimizer.dispose();
    distributed.dispose();
    group.close();
  }
  if (group.rank !== 0) return undefined;
  const worst = Math.max(
    ...results.map((r) =>
      Math.max(
        boundRatio(r.loss, r.lossBound),
        boundRatio(r.gradients, r.gradientsBound),
        boundRatio(r.parameters, r.parametersBound),
        r.queues ? boundRatio(r.queues.value, r.queues.bound) : 0,
        r.decisions?.differ ? boundRatio(r.decisions.largestMargin, r.decisions.bound) : 0,
        r.branches?.differ ? boundRatio(r.branches.largestMargin, r.branches.bound) : 0,
      ),
    ),
  );
  return { worldSize, steps: results, worst, tolerance, roundoffFactor, passed: worst <= 1 };
}

/**
 * Writes a step's inputs and results as `.npy` files under `dir` (for an independent float64
 * recomputation, e.g. scripts/verify_roundoff_torch.py): `init/<name>.npy` and
 * `init-W/<name>.npy` (the one-process and the W-rank state before the step), `view<v>.npy` `[N, H, W, C]`, `labels.npy` `[N]`, `grads-1/<name>.npy`
 * (one process) and `grads-W/<name>.npy` (W ranks), `losses.json`, `decisions.json` (the step's {@link StepDecisions}) for methods that make decisions,
 * and `branches.json` (its {@link StepBranches}) on several ranks.
 */
function dumpStep(
  dir: string,
  initial: { one: Record<string, Float32Array | Int32Array>; ranks: Record<string, Float32Array | Int32Array> },
  batch: MultiViewBatch,
  reference: StepResult,
  distributed: StepResult,
  method: BaseMethod,
  compared: { decisions?: StepDecisions; branches?: StepBranches },
): void {
  const shapes = Object.fromEntries(Object.entries(method.stateDict()).map(([name, t]) => [name, t.shape]));
  for (const sub of ['init', 'init-W', 'grads-1', 'grads-W']) mkdirSync(join(dir, sub), { recursive: true });
  for (const [name, values] of Object.entries(initial.one)) writeNpy(join(dir, 'init', `${name}.npy`), values, shapes[name]!);
  for (const [name, values] of Object.entries(initial.ranks)) writeNpy(join(dir, 'init-W', `${name}.npy`), values, shapes[name]!);
  batch.views.forEach((v, i) => writeNpy(join(dir, `view${i}.npy`), v, batch.shapes[i] ?? batch.shape));
  writeNpy(join(dir, 'labels.npy'), Int32Array.from(batch.labels), [batch.labels.length]);
  for (const [name, g] of Object.entries(reference.grads)) writeNpy(join(dir, 'grads-1', `${name}.npy`), g, shapes[name]!);
  for (const [name, g] of Object.entries(distributed.grads)) writeNpy(join(dir, 'grads-W', `${name}.npy`), g, shapes[name]!);
  const losses = join(dir, 'losses.json');
  atPath(losses, 'writing', () => writeFileSync(losses, `${JSON.stringify({ oneProcess: reference.loss, ranks: distributed.loss })}\n`));
  for (const [name, value] of Object.entries(compared)) {
    if (!value) continue;
    const file = join(dir, `${name}.json`);
    atPath(file, 'writing', () => writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`));
  }
}

/** `ssl-train verify --case FILE`: the loss functions against reference values, on this rank. */
export async function runVerifyCase(
  config: TrainConfig,
  casePath: string,
  tolerance: number,
  worker?: WorkerEnv,
): Promise<{ text: string; passed: boolean } | undefined> {
  await initEngineFor(config, worker);
  const group = await processGroup(worker, config.timeout * 1000);
  try {
    const report = runLossCaseOnRank(casePath, group, tolerance);
    return group.rank === 0 ? { text: formatLossCaseReport(report), passed: report.passed } : undefined;
  } finally {
    group.close();
  }
}

/** The engine `config` asks for (`--gpus`: the WebGPU adapter of this rank). */
async function initEngineFor(config: TrainConfig, worker?: WorkerEnv): Promise<void> {
  const request = engineRequest(config, worker?.localRank);
  await initEngine(request.backend, request.gpu);
}
