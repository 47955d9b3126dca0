/** Learning-rate schedules and the linear scaling rule. */
import { invalidValue } from '../core/errors.js';
import type { Optimizer } from './optimizer.js';

/** Options of {@link WarmupCosineSchedule}; all counts are optimizer steps. */
export interface WarmupCosineOptions {
  /** Length of the linear warmup (>= 0; may be fractional, e.g. epochs × steps per epoch). */
  warmupSteps: number;
  /** Step at which the cosine reaches `minLr` (> warmupSteps): the run's total optimizer steps. */
  totalSteps: number;
  /** Lr of step 0 when warming up (default 3e-5, solo-learn's `warmup_start_lr`); shared by all groups. */
  warmupStartLr?: number;
  /** Final lr (default 0, solo-learn's `min_lr`); shared by all groups. */
  minLr?: number;
}

/**
 * Linear warmup then cosine annealing, the closed form of solo-learn's
 * `LinearWarmupCosineAnnealingLR` (from Lightning Bolts), per optimizer step `step`
 * (0 = the first optimizer step):
 *
 * ```
 * step < W:       warmupStartLr + step * (baseLr - warmupStartLr) / max(1, W - 1)
 * W <= step < T:  minLr + (baseLr - minLr) * (1 + cos(pi * (step - W) / (T - W))) / 2
 * step >= T:      minLr
 * ```
 * with W = warmupSteps, T = totalSteps. As in Bolts, warmup reaches baseLr at step W - 1
 * and step W is baseLr again (cosine at 0). Bolts keeps following the cosine (rising
 * again) past T; this holds minLr there.
 */
export function warmupCosineLr(step: number, baseLr: number, options: WarmupCosineOptions): number {
  const { warmupSteps: w, totalSteps: t, warmupStartLr = 3e-5, minLr = 0 } = options;
  if (!(step >= 0) || !Number.isFinite(step)) throw new RangeError(`step must be a finite number >= 0, got ${step}`);
  if (step < w) return warmupStartLr + (step * (baseLr - warmupStartLr)) / Math.max(1, w - 1);
  if (step >= t) return minLr;
  return minLr + 0.5 * (baseLr - minLr) * (1 + Math.cos((Math.PI * (step - w)) / (t - w)));
}

/**
 * DINO's cosine weight-decay schedule (its `cosine_scheduler(weight_decay, weight_decay_end)`,
 * without warmup): `end + (base − end) · (1 + cos(π · step / totalSteps)) / 2` before optimizer
 * step `step` (0-based), `end` from `totalSteps` on.
 */
export function cosineWeightDecay(step: number, base: number, end: number, totalSteps: number): number {
  if (step >= totalSteps) return end;
  return end + 0.5 * (base - end) * (1 + Math.cos((Math.PI * step) / totalSteps));
}

/**
 * A warmup-cosine schedule (see {@link warmupCosineLr}) for an optimizer's groups. Each
 * group anneals from its own base lr (its `initialLr`, the lr it was constructed with), so
 * restoring an optimizer checkpoint (which restores the current lrs) does not shift the
 * schedule; groups with `scheduled: false` keep their lr.
 *
 * Use: before optimizer step k (k = number of steps already done), call `apply(opt, k)`.
 */
export class WarmupCosineSchedule {
  /** Validated options with defaults filled in. */
  readonly options: Required<WarmupCosineOptions>;

  constructor(options: WarmupCosineOptions) {
    const { warmupSteps, totalSteps, warmupStartLr = 3e-5, minLr = 0 } = options;
    if (!(warmupSteps >= 0) || !Number.isFinite(warmupSteps)) {
      throw invalidValue('warmupSteps', warmupSteps, 'a finite number >= 0');
    }
    if (!(totalSteps > warmupSteps) || !Number.isFinite(totalSteps)) {
      throw invalidValue('totalSteps', totalSteps, `a finite number > warmupSteps (${warmupSteps})`);
    }
    if (!(warmupStartLr >= 0) || !Number.isFinite(warmupStartLr)) {
      throw invalidValue('warmupStartLr', warmupStartLr, 'a finite number >= 0');
    }
    if (!(minLr >= 0) || !Number.isFinite(minLr)) throw invalidValue('minLr', minLr, 'a finite number >= 0');
    this.options = { warmupSteps, totalSteps, warmupStartLr, minLr };
  }

  /**
   * Converts solo-learn's epoch-based settings with `scheduler_interval: step`: warmup =
   * warmupEpochs × stepsPerEpoch, total = maxEpochs × stepsPerEpoch.
   */
  static fromEpochs(options: { warmupEpochs: number; maxEpochs: number; stepsPerEpoch: number; warmupStartLr?: number; minLr?: number }): WarmupCosineSchedule {
    const { warmupEpochs, maxEpochs, stepsPerEpoch, ...rest } = options;
    return new WarmupCosineSchedule({
      warmupSteps: warmupEpochs * stepsPerEpoch,
      totalSteps: maxEpochs * stepsPerEpoch,
      ...rest,
    });
  }

  /** The lr at optimizer step `step` for a group whose base lr is `baseLr` (pure). */
  lrAt(step: number, baseLr: number): number {
    return warmupCosineLr(step, baseLr, this.options);
  }

  /** Sets the lr of every scheduled group of `optimizer` for step `step`. */
  apply(optimizer: Optimizer, step: number): void {
    optimizer.groups.forEach((g, i) => {
      if (g.scheduled !== false) optimizer.setLr(i, this.lrAt(step, g.initialLr));
    });
  }
}

/**
 * The linear scaling rule of SimCLR and solo-learn: `baseLr × globalBatch / reference`,
 * where globalBatch is the batch summed over all ranks (N = W·B).
 */
export function scaleLearningRate(baseLr: number, globalBatch: number, reference = 256): number {
  if (!(globalBatch > 0)) throw invalidValue('globalBatch', globalBatch, 'a number > 0');
  if (!(reference > 0)) throw invalidValue('reference', reference, 'a number > 0');
  return (baseLr * globalBatch) / reference;
}
