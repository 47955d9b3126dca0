// Over 400 lines: the fit loop, validation, checkpoint and resume, and the non-finite stop are one state machine over the same progress counters.
import 'reflect-metadata';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { inject, injectable, injectAll } from 'tsyringe';
import { BadSamplesFailure, IoFailure, TrainingFailure, UserError } from '../core/errors.js';
import { tf } from '../core/tf.js';
import { CALLBACK, type Callback } from './callbacks.js';
import { describeProgress, encodeCheckpoint, findLatestCheckpoint, loadCheckpoint, savedProgress, withoutPrefix, withPrefix } from './checkpoint.js';
import { writeFileAtomic } from './files.js';
import type { DataSource, Progress, TrainerOptimizer, TrainingModule } from './interfaces.js';
import { LOGGER, type Logger, type RunStatus } from './loggers.js';
import { epochCheckpointName, LAST_CHECKPOINT, runDirPaths } from './run-dir.js';
import { firstNonFinite, readMetrics, StepSequence, type PendingMetrics, type StepMetrics } from './step.js';
import { handlePendingSignals, signalNumber, stopSignalNamed, TrainingInterrupted, type StopRequest } from './stop-signal.js';
import { STRATEGY, type Strategy } from './strategy.js';

/** Injection token of the {@link TrainerOptions}. */
export const TRAINER_OPTIONS = Symbol.for('ssl-zoo.TrainerOptions');

export interface TrainerOptions {
  maxEpochs: number;
  /** Stop after this many optimizer steps in total (smoke runs); the schedule still spans the epochs. */
  maxSteps?: number;
  /**
   * Batches whose gradients are averaged locally before one gradient sync and one optimizer
   * step (Lightning's accumulate_grad_batches; default 1).
   */
  accumulateGradBatches?: number;
  /** Log training metrics every this many steps. */
  logEvery: number;
  /** Validate every this many epochs (and always after the last). 0 disables validation. */
  valEvery: number;
  /**
   * Also validate before the first step of a fresh run (not of a resumed one), logged at
   * step 0: the baseline of the initial weights (random init, or the pretrained backbone).
   */
  validateAtStart?: boolean;
  /**
   * Save `checkpoints/epoch-<n>.ckpt` every this many epochs (0: never); `last.ckpt` is
   * written with it, and at the end.
   */
  checkpointEvery: number;
  /** Also write `last.ckpt` every this many optimizer steps, mid-epoch included (0 or unset: off). */
  checkpointEverySteps?: number;
  runDir: string;
  /**
   * A checkpoint path, or `auto`: the newest valid checkpoint in `<runDir>/checkpoints`
   * (by the step recorded inside; invalid newer ones are skipped with a warning), or a
   * fresh start when there is none.
   */
  resume?: string;
  /** The resolved run configuration: logged once and stored in every checkpoint. */
  config: Record<string, unknown>;
  /**
   * Where rank 0's notes and warnings go (which checkpoint a run resumes from, skipped
   * checkpoints); default stderr, one line each, prefixed `ssl-train: `.
   */
  print?: (line: string) => void;
  /**
   * Where a request to stop comes from (SIGTERM, SIGINT, SIGUSR1: the CLI's
   * {@link StopSignal}); default none. See {@link Trainer} for how a run stops.
   */
  stop?: StopRequest;
}

/** What {@link Trainer.fit} returns. */
export interface FitResult {
  progress: Progress;
  /** The training metrics of every step, in order (this rank's values). */
  losses: number[];
  /** The last validation metrics. */
  validation: Record<string, number>;
  /** Training time of the run, earlier attempts up to the checkpoint resumed from included. */
  wallTimeSec: number;
}

/**
 * Training produced a NaN or infinite value (a loss, a loss term or another training
 * metric, a gradient, or the parameters after an update). The trainer stops at that step
 * on every rank: the update with the bad values is not applied and no checkpoint is
 * written at or after it, so the last checkpoint is the last good state.
 */
export class NonFiniteError extends TrainingFailure {
  constructor(
    message: string,
    /** The optimizer step (1-based, as logged) that went wrong. */
    readonly step: number,
    /** What was not finite, e.g. `train/loss is NaN`. */
    readonly what: string,
  ) {
    super(message);
    this.name = 'NonFiniteError';
  }
}

/**
 * A Lightning-style fit loop: epochs of batches, one optimizer step per
 * `accumulateGradBatches` of them through the {@link StepSequence} (hooks, gradients from
 * `tf.variableGrads`, the scheduler's lr, one sync by the strategy, the update), validation,
 * logging and checkpoints. It knows nothing about what it trains (pre-training's `SslTask`,
 * linear evaluation's `LinearEvalTask`, ...); the {@link Strategy}, {@link Logger}s and
 * {@link Callback}s are injected (tokens STRATEGY, LOGGER, CALLBACK; loggers and callbacks
 * optional, in registration order), with its {@link TrainerOptions} (TRAINER_OPTIONS).
 *
 * Every step is checked for non-finite values before its update is applied (Lightning's
 * terminate-on-NaN): the step's metrics (loss, loss terms, ...) and gradients, flagged on the
 * device, read asynchronously and agreed over ranks by one small all-reduce (see
 * `applyStep`), so every rank stops at the same step.
 *
 * No step reads the device synchronously. The metrics of the steps stay on the device
 * until a logging step (`logEvery`, the last step, and the end of each epoch's batches,
 * before validation), where those of all the steps since the previous one are read at once
 * and averaged over ranks (one all-reduce): the logging step's row goes to the loggers, and
 * each step's metrics to the callbacks' `onTrainBatchEnd`, in order (so a callback sees a
 * step up to `logEvery` steps after it ran). A non-finite stop first delivers the steps before it.
 *
 * A stop request ({@link TrainerOptions.stop}: a signal) is agreed over the ranks in the same
 * all-reduce as the finiteness check, so every rank stops after the same optimizer step: that
 * step's update is applied, the metrics are flushed, `last.ckpt` is written at it, the loggers
 * finalize with status `interrupted`, and `fit` throws {@link TrainingInterrupted}. At an
 * epoch's last step the epoch end runs first (validation, epoch checkpoint), as without a
 * stop. A request that comes during validation, a checkpoint write or between epochs is
 * agreed at the epoch end (one more small all-reduce per epoch) or else at the end of the
 * next step. A request at the run's last step, or after it, lets the run finish normally.
 */
@injectable()
export class Trainer {
  constructor(
    @inject(STRATEGY) readonly strategy: Strategy,
    @injectAll(LOGGER, { isOptional: true }) private readonly loggers: Logger[],
    @inject(TRAINER_OPTIONS) private readonly options: TrainerOptions,
    @injectAll(CALLBACK, { isOptional: true }) private readonly callbacks: Callback[] = [],
  ) {}

  private get checkpointDir(): string {
    return runDirPaths(this.options.runDir).checkpoints;
  }

  private print(line: string): void {
    if (!this.strategy.isGlobalZero) return;
    if (this.options.print) this.options.print(line);
    else process.stderr.write(`ssl-train: ${line}\n`);
  }

  /** Trains `module` on `data` until `maxEpochs` (or `maxSteps`), resuming if asked. */
  async fit<B>(module: TrainingModule<B>, data: DataSource<B>): Promise<FitResult> {
    const started = Date.now();
    const stopRequest = this.options.stop;
    stopRequest?.arm?.();
    const localStop = () => (stopRequest?.requested ? signalNumber(stopRequest.requested) : 0);
    const { maxEpochs, maxSteps } = this.options;
    const batchesPerEpoch = data.numBatches();
    const accumulate = this.options.accumulateGradBatches ?? 1;
    const everySteps = this.options.checkpointEverySteps ?? 0;
    const stepsPerEpoch = Math.ceil(batchesPerEpoch / accumulate);
    // The schedule (lr, EMA tau) always spans the configured epochs; maxSteps only stops
    // early, so an interrupted run and its resumption follow the same schedule.
    const totalSteps = maxEpochs * stepsPerEpoch;
    const stopAt = Math.min(totalSteps, maxSteps ?? Infinity);
    const progress: Progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps };
    const callbacks = this.strategy.isGlobalZero ? this.callbacks : [];
    const loggers = this.strategy.isGlobalZero ? this.loggers : [];

    this.strategy.setup(module.model);
    module.setup?.({ group: this.strategy.group });
    const { optimizer, scheduler } = module.configureOptimizers({ totalSteps, stepsPerEpoch });
    const restored = this.restore(module, optimizer, progress);
    const elapsed = (): number => (restored?.wallTimeSec ?? 0) + (Date.now() - started) / 1000;
    const variables = module.model.trainableParameters();
    const parameterNames = new Map(module.model.namedParameters().map(([name, v]) => [v.name, name]));
    if (this.strategy.isGlobalZero) {
      mkdirSync(this.checkpointDir, { recursive: true });
      removeTemporaries(this.checkpointDir);
      for (const l of loggers) l.beginAt?.(progress.step);
      for (const l of loggers) l.logHyperparams(this.options.config);
    }
    const saved: SaveState = { lastGood: restored && { path: restored.path, step: progress.step } };
    const save = (names: string[], lrs: Record<string, number>) => this.writeCheckpoints(names, module, optimizer, progress, saved, lrs, elapsed());
    const losses: number[] = [];
    let validation: Record<string, number> = {};
    let status: RunStatus = 'failed';
    let failure: unknown;
    let lrs: Record<string, number> = {};
    // The steps whose metrics are still on the device, read at the next logging step (see `flush`).
    const unread: UnreadStep[] = [];
    // The stop signal the ranks agreed on (a signal's number), 0 while none.
    let agreedStop = 0;
    try {
      if (this.options.validateAtStart && module.validate && this.options.valEvery > 0 && !restored) {
        const baseline = this.prefixed('val', await module.validate(progress));
        for (const l of loggers) l.logMetrics(baseline, 0); // no epoch: plotted at x = 0, before epoch 1
        for (const c of callbacks) c.onBaseline?.(baseline);
      }
      for (const c of callbacks) c.onFitStart?.(progress);
      const steps = new StepSequence({ module, strategy: this.strategy, optimizer, scheduler, variables });
      const isLogStep = (step: number) => step % this.options.logEvery === 0 || step === stopAt;
      const flush = async () => {
        if (unread.length === 0) return;
        const done = unread.splice(0);
        let read: StepMetrics[];
        try {
          read = await readMetrics(
            done.map((s) => s.metrics),
            this.strategy,
          );
        } finally {
          tf.dispose(done.flatMap((s) => Object.values(s.metrics.tensors)));
        }
        done.forEach(({ at, logs, lrs: stepLrs }, i) => {
          losses.push(read[i].local.loss);
          const logged = this.prefixed('train', { ...read[i].reduced, ...logs, ...lrsToMetrics(stepLrs) });
          logged.epoch = at.epoch;
          if (isLogStep(at.step)) for (const l of loggers) l.logMetrics(logged, at.step);
          for (const c of callbacks) c.onTrainBatchEnd?.(at, logged);
        });
      };
      const check = async (reduced: Record<string, number>, gradient: { flag: number; name?: string }, stepLrs: Record<string, number>) => {
        const what = nonFiniteProblem(reduced, { ...gradient, name: gradient.name && (parameterNames.get(gradient.name) ?? gradient.name) });
        if (!what) return;
        await flush();
        throw this.stopped(progress.step + 1, progress.epoch, what, stepLrs, saved);
      };
      while (progress.epoch < maxEpochs && progress.step < stopAt) {
        let last = Date.now();
        const throughput = () => {
          const now = Date.now();
          const value = (data.batchSize * accumulate * this.strategy.group.worldSize) / Math.max((now - last) / 1000, 1e-9);
          last = now;
          return value;
        };
        // A step checkpoint due at the epoch's last batch waits for the epoch end (after
        // validation), so that what is logged at a checkpoint's step precedes it.
        let stepCheckpointDue = false;
        for await (const batch of data.batches(progress.epoch, progress.batchInEpoch)) {
          steps.addBatch(batch, progress);
          if (steps.pendingBatches < accumulate && progress.batchInEpoch < batchesPerEpoch) continue;
          if (stopRequest) await handlePendingSignals();
          const outcome = await steps.finishStep(progress, { check, throughput, stopRequest: localStop });
          lrs = outcome.lrs;
          unread.push({ at: { ...progress }, metrics: outcome.metrics, logs: { ...module.stepLogs?.() }, lrs });
          if (outcome.stop > 0 && progress.step < stopAt) agreedStop = outcome.stop;
          if (isLogStep(progress.step) || agreedStop > 0) await flush();
          if (agreedStop > 0) break;
          if (everySteps > 0 && progress.step % everySteps === 0 && progress.step < stopAt) {
            if (progress.batchInEpoch < batchesPerEpoch) await save([LAST_CHECKPOINT], lrs);
            else stepCheckpointDue = true;
          }
          if (progress.step >= stopAt) break;
        }
        // The epoch's last steps (after its last logging step) reach the callbacks before validation and the epoch's end.
        await flush();
        const epochDone = progress.batchInEpoch >= batchesPerEpoch;
        const finished = progress.step >= stopAt;
        const isLastEpoch = progress.epoch + 1 >= maxEpochs;
        const validateNow =
          module.validate !== undefined &&
          this.options.valEvery > 0 &&
          (finished || isLastEpoch || (epochDone && (progress.epoch + 1) % this.options.valEvery === 0));
        if (validateNow && module.validate) {
          validation = this.prefixed('val', await module.validate(progress));
          validation.epoch = progress.epoch;
          for (const l of loggers) l.logMetrics(validation, progress.step);
        }
        if (epochDone) {
          for (const c of callbacks) c.onEpochEnd?.(progress, validation);
          progress.epoch++;
          progress.batchInEpoch = 0;
          const names = this.options.checkpointEvery > 0 && progress.epoch % this.options.checkpointEvery === 0 ? [epochCheckpointName(progress.epoch)] : [];
          if (names.length > 0 || stepCheckpointDue) await save([...names, LAST_CHECKPOINT], lrs);
          // A request that came during validation or the checkpoint write stops here, not a step later.
          if (!finished && agreedStop === 0) {
            if (stopRequest) await handlePendingSignals();
            agreedStop = this.strategy.allReduceMax([localStop()])[0];
          }
        }
        if (finished || agreedStop > 0) break;
      }
      if (saved.lastWritten !== progressKey(progress)) await save([LAST_CHECKPOINT], lrs);
      const signal = stopSignalNamed(agreedStop);
      if (signal) {
        const epoch = progress.batchInEpoch === 0 ? progress.epoch : progress.epoch + 1;
        status = 'interrupted';
        throw new TrainingInterrupted(signal, progress.step, epoch, runDirPaths(this.options.runDir).lastCheckpoint);
      }
      status = 'success';
    } catch (e) {
      failure = withLastGoodCheckpoint(e, saved);
      throw failure;
    } finally {
      tf.dispose(unread.flatMap((s) => Object.values(s.metrics.tensors)));
      for (const c of callbacks) c.onFitEnd?.(progress);
      await data.close();
      const reason = failure === undefined ? undefined : failure instanceof Error ? failure.message : String(failure);
      const signal = failure instanceof TrainingInterrupted ? failure.signal : undefined;
      for (const l of loggers) {
        const finalizing = (async () => l.finalize(status, { ...validation, step: progress.step, wall_time_sec: elapsed() }, reason, signal))();
        // A failed run's summary is written if it can be (a full disk may still take a small
        // file); if not, the failure that stopped the run is the one reported.
        if (failure === undefined) await finalizing;
        else await finalizing.catch(() => undefined);
      }
      // Every rank stops at the same step; the others wait until rank 0 has written the
      // run directory's final state, so that no launcher stops it half-way.
      if ((failure instanceof NonFiniteError || failure instanceof TrainingInterrupted) && this.strategy.group.worldSize > 1) {
        try {
          this.strategy.barrier();
        } catch {
          // The stop is reported either way.
        }
      }
      optimizer.dispose();
    }
    return { progress, losses, validation, wallTimeSec: elapsed() };
  }

  private prefixed(prefix: string, values: Record<string, number>): Record<string, number> {
    return Object.fromEntries(Object.entries(values).map(([k, v]) => [k.startsWith(`${prefix}/`) ? k : `${prefix}/${k}`, v]));
  }

  /** The error that stops training at `step` (1-based) of `epoch` (0-based) because `what`. */
  private stopped(step: number, epoch: number, what: string, lrs: Record<string, number>, saved: SaveState): NonFiniteError {
    const lr = Object.values(lrs)[0];
    const good = saved.lastGood;
    const message =
      `training stopped at step ${step} (epoch ${epoch + 1}): ${what}${lr === undefined ? '' : ` at lr ${formatValue(lr)}`}; ` +
      (good ? `the last good checkpoint is ${good.path} (step ${good.step})` : 'no checkpoint was written before it');
    return new NonFiniteError(message, step, what);
  }

  /**
   * Writes model, optimizer, progress and config to `names` in the checkpoint directory
   * (rank 0; encoded once, each file atomically). Every rank first checks that the state
   * is finite and all agree through one small all-reduce: non-finite parameters (an update
   * that overflowed) stop training instead of replacing the last good checkpoint.
   */
  private async writeCheckpoints<B>(
    names: string[],
    module: TrainingModule<B>,
    optimizer: TrainerOptimizer,
    progress: Progress,
    saved: SaveState,
    lrs: Record<string, number>,
    wallTimeSec: number,
  ): Promise<void> {
    const optim = optimizer.stateDict();
    const tensors = { ...withPrefix(module.model.stateDict(), 'model/'), ...withPrefix(optim.tensors, 'optimizer/') };
    const bad = await firstNonFinite(tensors);
    if (this.strategy.allReduceMax([bad === undefined ? 0 : 1])[0] > 0) {
      const what = `${bad === undefined ? 'the model state of another rank' : bad} became non-finite after the update`;
      throw this.stopped(progress.step, progress.batchInEpoch === 0 ? progress.epoch - 1 : progress.epoch, what, lrs, saved);
    }
    // Rank 0 writes the files; every rank keeps the same account of them (the ranks must
    // make the same collective calls, and agree on what the last good checkpoint is).
    if (names.includes(LAST_CHECKPOINT)) saved.lastWritten = progressKey(progress);
    if (!this.strategy.isGlobalZero) {
      saved.lastGood = { path: join(this.checkpointDir, names[names.length - 1]), step: progress.step };
      return;
    }
    const bytes = await encodeCheckpoint({
      tensors,
      meta: {
        format: 'ssl-zoo-checkpoint/1',
        progress: { epoch: progress.epoch, step: progress.step, batchInEpoch: progress.batchInEpoch },
        optimizer: optim.meta,
        // Every random draw of training is keyed by (seed, epoch, sample index, view), so
        // the seed and the progress above are the complete random state of the run.
        rng: { seed: this.options.config.seed, keyed: '(seed, epoch, index, view)' },
        wallTimeSec,
        config: this.options.config,
      },
    });
    for (const name of names) {
      const path = join(this.checkpointDir, name);
      writeFileAtomic(path, bytes);
      saved.lastGood = { path, step: progress.step };
    }
  }

  /**
   * Loads the checkpoint to resume from into the module and optimizer and sets `progress`.
   * `auto` picks the newest valid checkpoint of the run directory, warning about every
   * invalid one it passes over; with none at all it says that training starts fresh.
   */
  private restore<B>(module: TrainingModule<B>, optimizer: TrainerOptimizer, progress: Progress): { path: string; wallTimeSec: number } | undefined {
    const { resume } = this.options;
    if (!resume) return undefined;
    let path = resume;
    if (resume === 'auto') {
      const search = findLatestCheckpoint(this.checkpointDir);
      for (const s of search.skipped) this.print(`warning: --resume auto: skipping ${s.path}: it ${s.reason}`);
      if (!search.latest) {
        if (search.found > 0) {
          throw new UserError(
            `resume: no valid checkpoint in ${this.checkpointDir} (${search.found} found, none usable); move them away to start over, or pass --resume PATH`,
          );
        }
        this.print(`--resume auto: no checkpoint in ${this.checkpointDir}; starting fresh`);
        this.checkRanksAgree(progress);
        return undefined;
      }
      path = search.latest.path;
    }
    const checkpoint = loadCheckpoint(path);
    try {
      const saved = savedProgress(checkpoint.meta);
      if (!saved) throw new UserError(`resume: ${path} records no training progress (not a trainer checkpoint)`);
      module.model.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/'));
      optimizer.loadStateDict({ tensors: withoutPrefix(checkpoint.tensors, 'optimizer/'), meta: checkpoint.meta.optimizer });
      progress.epoch = saved.epoch;
      progress.step = saved.step;
      progress.batchInEpoch = saved.batchInEpoch;
      this.checkRanksAgree(progress);
      this.print(`resuming from ${path} (${describeProgress(saved)})`);
      const wallTimeSec = typeof checkpoint.meta.wallTimeSec === 'number' && Number.isFinite(checkpoint.meta.wallTimeSec) ? checkpoint.meta.wallTimeSec : 0;
      return { path, wallTimeSec };
    } finally {
      tf.dispose(Object.values(checkpoint.tensors));
    }
  }

  /** With several ranks: a user error on every rank unless all resume from the same step. */
  private checkRanksAgree(progress: Progress): void {
    if (this.strategy.group.worldSize === 1) return;
    const [max, negatedMin] = this.strategy.allReduceMax([progress.step, -progress.step]);
    if (max !== -negatedMin) {
      throw new UserError(`resume: the ranks found different checkpoints (steps ${-negatedMin} to ${max}); every rank must see the same run directory`);
    }
  }
}

/** A finished step whose metrics are not read yet. */
interface UnreadStep {
  /** The progress after the step. */
  at: Progress;
  metrics: PendingMetrics;
  /** The module's step logs and the step's learning rates, by group name. */
  logs: Record<string, number>;
  lrs: Record<string, number>;
}

/** What the fit loop knows about the checkpoints it wrote. */
interface SaveState {
  /** The newest checkpoint on disk that training can go back to (written or resumed from). */
  lastGood?: { path: string; step: number };
  /** The progress at which `last.ckpt` was last written by this run. */
  lastWritten?: string;
}

/**
 * A run stopped by its environment (a failed write, too many unreadable samples) says which
 * checkpoint is still good, as a non-finite stop does.
 */
function withLastGoodCheckpoint(error: unknown, saved: SaveState): unknown {
  if (!(error instanceof IoFailure || error instanceof BadSamplesFailure)) return error;
  const good = saved.lastGood;
  return error.withNote(good ? `the last good checkpoint is ${good.path} (step ${good.step})` : 'no checkpoint was written before it');
}

function progressKey(p: Progress): string {
  return `${p.epoch}/${p.step}/${p.batchInEpoch}`;
}

/** Removes temporary files of checkpoint writes cut short by a crash. */
function removeTemporaries(dir: string): void {
  for (const name of readdirSync(dir)) if (/\.tmp-\d+$/.test(name)) rmSync(join(dir, name), { force: true });
}

function formatValue(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Inf' : '-Inf';
  return Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(2) : String(Number(x.toPrecision(4)));
}

/**
 * What is wrong with a step, from its metrics reduced over ranks and the gradient flag
 * (averaged over ranks: > 0 when a rank's gradient was not finite), or undefined when
 * everything is finite. The loss is named first.
 */
function nonFiniteProblem(metrics: Record<string, number>, gradient: { flag: number; name?: string }): string | undefined {
  const name = (k: string) => (k.startsWith('train/') ? k : `train/${k}`);
  const bad = Object.keys(metrics)
    .filter((k) => !Number.isFinite(metrics[k]))
    .sort((a, b) => Number(b === 'loss') - Number(a === 'loss') || a.localeCompare(b));
  if (bad.length > 0) {
    const also =
      bad.length > 1
        ? ` (and ${bad
            .slice(1)
            .map((k) => `${name(k)} ${formatValue(metrics[k])}`)
            .join(', ')})`
        : '';
    return `${name(bad[0])} is ${formatValue(metrics[bad[0]])}${also}`;
  }
  if (!(gradient.flag === 0)) return gradient.name ? `the gradient of ${gradient.name} is not finite` : 'a gradient is not finite on another rank';
  return undefined;
}

function lrsToMetrics(lrs: Record<string, number>): Record<string, number> {
  const entries = Object.entries(lrs);
  const out: Record<string, number> = Object.fromEntries(entries.map(([name, lr]) => [`lr/${name}`, lr]));
  if (entries.length > 0) out.lr = entries[0][1];
  return out;
}
