import { basename, dirname, resolve } from 'node:path';
import { UserError } from '../core/errors.js';
import { historyRows, readRunDir, readRunSummary, runDirPaths, runStatus, type HistoryRow, type MetricsRecord } from '../trainer/run-dir.js';

/** One run directory, read for the comparison report. */
export interface ReportRun {
  dir: string;
  /** Unique short name in the report (the directory's name, with its parent's when names collide). */
  label: string;
  /** `config.json`: the resolved configuration. */
  config: Record<string, unknown>;
  method: string;
  backbone: string;
  dataset: string;
  /** Configured epochs. */
  epochs: number;
  globalBatch: number;
  worldSize: number;
  /** Every line of `metrics.jsonl`, in order. */
  records: MetricsRecord[];
  /** One row per logged step (training and validation merged). */
  rows: HistoryRow[];
  /** `summary.json` (undefined when the run did not finish). */
  summary?: Record<string, unknown>;
  /** Optimizer steps per epoch, when it can be told (for epoch x-axes). */
  stepsPerEpoch?: number;
}

/** The aggregate numbers of the final table. */
export interface RunStats {
  /** Optimizer steps done. */
  steps: number;
  /** Epochs done (fractional when stopped mid-epoch). */
  epochsDone?: number;
  bestKnnAcc1?: { value: number; epoch: number };
  bestLinearAcc1?: { value: number; epoch: number };
  finalKnnAcc1?: number;
  finalLinearAcc1?: number;
  /** Mean training loss over the last logged tenth of the run. */
  finalLoss?: number;
  /** Median training throughput (images per second over all ranks). */
  imagesPerSec?: number;
  wallTimeSec?: number;
  status: string;
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

function str(value: unknown, fallback: string): string {
  return typeof value === 'string' && value.length > 0 ? value : fallback;
}

/**
 * Steps per epoch from the config (`trainSize`, the global batch, `dropLast`,
 * `accumulateGradBatches`), else from a validation row logged at an epoch end.
 */
function stepsPerEpochOf(config: Record<string, unknown>, rows: HistoryRow[]): number | undefined {
  const trainSize = num(config.trainSize);
  const batch = num(config.globalBatch) ?? num(config.batchSize);
  const accumulate = num(config.accumulateGradBatches) ?? 1;
  if (trainSize && batch) {
    const batches = config.dropLast === false ? Math.ceil(trainSize / batch) : Math.floor(trainSize / batch);
    if (batches > 0) return Math.ceil(batches / accumulate);
  }
  const val = rows.find((r) => num(r.values['val/knn_acc1']) !== undefined && num(r.values.epoch) !== undefined);
  return val ? val.step / ((val.values.epoch as number) + 1) : undefined;
}

/**
 * Reads a run directory (`config.json`, `metrics.jsonl`, and `summary.json` if the run
 * finished). A missing directory or file, or a malformed one, is a user error naming it.
 */
export function loadReportRun(dir: string): ReportRun {
  const { config, records } = readRunDir(dir, 'compare');
  if (records.length === 0) throw new UserError(`compare: ${runDirPaths(dir).metrics} is empty (the run logged nothing)`);
  const summary = readRunSummary(dir, 'compare');
  const rows = historyRows(records);
  return {
    dir,
    label: basename(resolve(dir)),
    config,
    method: str(config.method, '?'),
    backbone: str(config.backbone, '?'),
    dataset: str(config.dataset, '?'),
    epochs: num(config.epochs) ?? 0,
    globalBatch: num(config.globalBatch) ?? num(config.batchSize) ?? 0,
    worldSize: num(config.worldSize) ?? 1,
    records,
    rows,
    summary,
    stepsPerEpoch: stepsPerEpochOf(config, rows),
  };
}

/** Reads every run directory and gives each a unique label. */
export function loadReportRuns(dirs: string[]): ReportRun[] {
  if (dirs.length === 0) throw new UserError('compare: no RUN_DIR given');
  const runs = dirs.map(loadReportRun);
  const count = (label: string) => runs.filter((r) => r.label === label).length;
  for (const run of runs) if (count(run.label) > 1) run.label = `${basename(dirname(resolve(run.dir)))}/${run.label}`;
  runs.forEach((run, i) => {
    if (count(run.label) > 1) run.label = `${run.label} (${i + 1})`;
  });
  return runs;
}

function median(xs: number[]): number | undefined {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** A metric's values over the run: `[step, value]` for every record that has it (finite values only). */
export function metricSeries(run: ReportRun, key: string): Array<[number, number]> {
  return run.rows.flatMap((r) => (num(r.values[key]) === undefined ? [] : [[r.step, r.values[key]] as [number, number]]));
}

/** A validation metric per epoch: `[epoch (1-based), value]`. */
export function epochSeries(run: ReportRun, key: string): Array<[number, number]> {
  return run.rows.flatMap((r) => {
    const value = num(r.values[key]);
    const epoch = num(r.values.epoch);
    if (value === undefined) return [];
    const x = epoch !== undefined ? epoch + 1 : run.stepsPerEpoch ? r.step / run.stepsPerEpoch : r.step;
    return [[x, value] as [number, number]];
  });
}

function best(series: Array<[number, number]>): { value: number; epoch: number } | undefined {
  let out: { value: number; epoch: number } | undefined;
  for (const [epoch, value] of series) if (!out || value > out.value) out = { value, epoch };
  return out;
}

/** The numbers of the final table for one run. */
export function runStats(run: ReportRun): RunStats {
  const last = run.rows[run.rows.length - 1];
  const steps = num(run.summary?.step) ?? last?.step ?? 0;
  const knn = epochSeries(run, 'val/knn_acc1');
  const linear = epochSeries(run, 'val/acc1');
  const loss = metricSeries(run, 'train/loss').map(([, v]) => v);
  const tail = loss.slice(-Math.max(1, Math.ceil(loss.length / 10)));
  // The first step includes warm-up (kernel compilation, worker start); leave it out of the median.
  const throughput = metricSeries(run, 'train/images_per_sec')
    .filter(([step]) => step > 1)
    .map(([, v]) => v);
  return {
    steps,
    epochsDone: run.stepsPerEpoch ? steps / run.stepsPerEpoch : undefined,
    bestKnnAcc1: best(knn),
    bestLinearAcc1: best(linear),
    finalKnnAcc1: knn[knn.length - 1]?.[1],
    finalLinearAcc1: linear[linear.length - 1]?.[1],
    finalLoss: tail.length > 0 ? tail.reduce((a, b) => a + b, 0) / tail.length : undefined,
    imagesPerSec: median(throughput.length > 0 ? throughput : metricSeries(run, 'train/images_per_sec').map(([, v]) => v)),
    wallTimeSec: num(run.summary?.wall_time_sec),
    status: runStatus(run.summary),
  };
}
