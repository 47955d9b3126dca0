import cliProgress from 'cli-progress';
import type { Progress } from './interfaces.js';

/**
 * Injection token of the {@link Callback}s (the trainer injects them all, in registration
 * order). Register instances or classes, as for LOGGER; a run registers its built-in ones (the
 * progress display) ahead of the caller's.
 */
export const CALLBACK = Symbol.for('ssl-zoo.Callback');

/** Hooks into the fit loop (Lightning's callbacks), all optional; only rank 0 runs them. */
export interface Callback {
  /** The validation metrics of the initial weights, before the first step (`--val-at-start`). */
  onBaseline?(metrics: Record<string, number>): void;
  onFitStart?(progress: Progress): void;
  /**
   * A step's metrics (`train/...`, averaged over ranks) with the progress after it. The fit
   * loop reads metrics from the device once per logging step, so it calls this for every step
   * in order, but batched at the next logging step (at the latest at the epoch's end).
   */
  onTrainBatchEnd?(progress: Progress, metrics: Record<string, number>): void;
  onEpochEnd?(progress: Progress, metrics: Record<string, number>): void;
  onFitEnd?(progress: Progress): void;
}

function formatMetrics(metrics: Record<string, number>, keys: string[]): string {
  return keys
    .filter((k) => metrics[k] !== undefined)
    .map((k) => `${k.replace(/^(train|val)\//, '')}=${formatNumber(metrics[k])}`)
    .join(' ');
}

function formatNumber(x: number): string {
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 1000 || a < 1e-3 ? x.toExponential(2) : x.toPrecision(4);
}

const STEP_KEYS = ['train/loss', 'train/lr', 'train/images_per_sec'];

/**
 * Progress display on rank 0: a live bar (cli-progress) with loss, lr and throughput
 * when stdout is a terminal; otherwise (CI logs, files) one plain line every
 * `lineEvery` steps and at each epoch end, with no carriage returns.
 */
export class ProgressBar implements Callback {
  private bar: cliProgress.SingleBar | undefined;
  private totalEpochs = 0;

  constructor(
    private readonly maxEpochs: number,
    private readonly lineEvery = 50,
    private readonly stream: NodeJS.WriteStream = process.stdout,
  ) {}

  private get interactive(): boolean {
    return Boolean(this.stream.isTTY);
  }

  onFitStart(progress: Progress): void {
    this.totalEpochs = this.maxEpochs;
    if (!this.interactive) return;
    this.bar = new cliProgress.SingleBar(
      {
        format: 'epoch {epoch} |{bar}| {value}/{total} steps | {metrics} | {eta_formatted}',
        stream: this.stream,
        hideCursor: true,
        clearOnComplete: false,
      },
      cliProgress.Presets.shades_classic,
    );
    this.bar.start(progress.totalSteps, progress.step, { epoch: this.epochLabel(progress), metrics: '' });
  }

  private epochLabel(progress: Progress): string {
    return `${progress.epoch + 1}/${this.totalEpochs}`;
  }

  onTrainBatchEnd(progress: Progress, metrics: Record<string, number>): void {
    if (this.bar) {
      this.bar.update(progress.step, { epoch: this.epochLabel(progress), metrics: formatMetrics(metrics, STEP_KEYS) });
    } else if (progress.step % this.lineEvery === 0 || progress.step === 1) {
      this.stream.write(`epoch ${this.epochLabel(progress)} step ${progress.step}/${progress.totalSteps} ${formatMetrics(metrics, STEP_KEYS)}\n`);
    }
  }

  /**
   * One line per epoch with the validation metrics computed after it (none when this epoch
   * was not validated: `metrics` are then an earlier epoch's). On a terminal the bar is
   * stopped for the line and restarted for the next epoch, if there is one.
   */
  onEpochEnd(progress: Progress, metrics: Record<string, number>): void {
    const fresh = metrics.epoch === undefined || metrics.epoch === progress.epoch;
    const keys = fresh
      ? Object.keys(metrics)
          .filter((k) => k !== 'epoch')
          .sort()
      : [];
    const line = `epoch ${this.epochLabel(progress)} done${keys.length > 0 ? `: ${formatMetrics(metrics, keys)}` : ''}`;
    if (this.bar) {
      this.bar.stop();
      this.stream.write(`${line}\n`);
      if (progress.epoch + 1 < this.totalEpochs) {
        this.bar.start(progress.totalSteps, progress.step, { epoch: this.epochLabel({ ...progress, epoch: progress.epoch + 1 }), metrics: '' });
      } else {
        this.bar = undefined;
      }
    } else {
      this.stream.write(`${line}\n`);
    }
  }

  /** One line with the metrics of the initial weights, before the bar starts. */
  onBaseline(metrics: Record<string, number>): void {
    this.stream.write(`before training (step 0): ${formatMetrics(metrics, Object.keys(metrics).sort())}\n`);
  }

  onFitEnd(): void {
    this.bar?.stop();
  }
}
