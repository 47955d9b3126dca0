/**
 * `npm run bench:zoo`: the zoo's learning benchmark. Trains every method (or `--methods a,b`)
 * on all 60k Fashion-MNIST training images with its recipe `configs/<method>-fashion-mnist.yaml`
 * (tiny_resnet; vit_tiny for the ViT methods), the same number of epochs for all (`--epochs`, default 3), and measures on
 * the 10k test images the weighted kNN top-1 (k 20, τ 0.07, memory = the whole training set)
 * and the online linear top-1, with the wall time and training images/s. Beside them, the
 * same kNN on the random-init backbone of each benchmarked backbone and on raw pixels (measured when
 * missing; `--baselines` measures them again for the given methods' backbones and trains nothing);
 * each method is checked against the random-init kNN of its own backbone.
 *
 * Results accumulate in scripts/bench/zoo-results.json (committed; one row per method: its
 * figures, the recipe fingerprint, commit, CPU and date, and a note on what qualifies the
 * figures), from which the README's short table (between `<!-- zoo-table:start -->` and
 * `<!-- zoo-table:end -->`) and the long form in docs/results.md (between
 * `<!-- zoo-details:start -->` and `<!-- zoo-details:end -->`: provenance and the notes) are
 * regenerated. A row whose fingerprint differs from the method's current recipe is stale: the
 * tables list the method as not measured. `--table` only regenerates the tables (no training);
 * `--from-runs` records the finished runs in bench-runs/zoo/ instead of training again;
 * `--restamp` re-fingerprints the rows whose recipe file did not change since they were
 * measured. `--curves` also validates before the first step and after every epoch (outside the
 * fingerprint: validation changes no weights). Training saves `last.ckpt` every 25 steps, and
 * `--resume` continues each method's interrupted run from it if it trained the same recipe
 * (scripts/bench/zoo-recipe.ts), else starts that method fresh.
 */
import { execSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { initEngine } from '../../src/core/engine.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { evalTransform } from '../../src/data/augment/recipes.js';
import type { ImageDataset } from '../../src/data/dataset.js';
import { extractFeatures, type FeatureModel } from '../../src/eval/features.js';
import { weightedKnn } from '../../src/eval/knn.js';
import { buildConfig, readConfigFile, TrainConfig } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { runTraining } from '../../src/experiment/train.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { BUILT_IN_METHODS, getMethodClass } from '../../src/methods/registry.js';
import { flag } from './common.js';
import { fingerprint, prepareRun } from './zoo-recipe.js';

const RESULTS = 'scripts/bench/zoo-results.json';
const README = 'README.md';
/** The long form of the results (provenance and notes per row). */
const RESULTS_PAGE = 'docs/results.md';
const KNN = { k: 20, temperature: 0.07 };
/** A method must beat the random-init backbone's kNN top-1 by this many points. */
const MARGIN = 5;

interface MethodRow {
  method: string;
  knnTop1: number;
  linearTop1: number;
  wallTimeSec: number;
  imagesPerSec: number;
  /** Mean over the embedding dimensions of the batch std of the normalised embeddings (last logged): ~1/sqrt(D) healthy, 0 collapsed. */
  embeddingStd: number | null;
  epochs: number;
  fingerprint: string;
  /** Anything that qualifies the figures (e.g. other jobs on the machine). */
  note?: string;
  commit: string;
  cpu: string;
  date: string;
}

interface BaselineRow {
  knnTop1: number;
  commit: string;
  cpu: string;
  date: string;
}

interface Results {
  description: string;
  /** `randomInit` is keyed by backbone (tiny_resnet, vit_tiny). */
  baselines: { randomInit?: Record<string, BaselineRow>; rawPixels?: BaselineRow };
  methods: Record<string, MethodRow>;
}

function load(): Results {
  if (existsSync(RESULTS)) {
    const results = JSON.parse(readFileSync(RESULTS, 'utf8')) as Results;
    // Files written before the baselines were kept per backbone hold tiny_resnet's alone.
    const randomInit = results.baselines.randomInit as Record<string, BaselineRow> | BaselineRow | undefined;
    if (randomInit && typeof randomInit.knnTop1 === 'number') results.baselines.randomInit = { tiny_resnet: randomInit as BaselineRow };
    return results;
  }
  return {
    description: 'npm run bench:zoo: Fashion-MNIST (60k train / 10k test), tiny_resnet, kNN k 20 tau 0.07 on the whole training set',
    baselines: {},
    methods: {},
  };
}

function save(results: Results): void {
  writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
}

function provenance(): { commit: string; cpu: string; date: string } {
  let commit = 'unknown';
  try {
    commit = execSync('git rev-parse --short HEAD', { encoding: 'utf8' }).trim();
    if (execSync('git status --porcelain --untracked-files=no', { encoding: 'utf8' }).trim()) commit += '+dirty';
  } catch {
    // not a git checkout
  }
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  const isa = /\bamx_tile\b/.test(flags) ? 'AMX' : /\bavx512f\b/.test(flags) ? 'AVX-512' : /\bavx2\b/.test(flags) ? 'AVX2' : 'no AVX2';
  return { commit, cpu: `${cpus()[0]?.model.trim() ?? 'unknown'} (${isa}, ${cpus().length} cores)`, date: new Date().toISOString().slice(0, 10) };
}

/** The benchmark's config of `method`: its Fashion-MNIST recipe with the benchmark's epochs and full validation at the end (`--curves`: also at the start and after every epoch). */
function benchConfig(method: string, epochs: number): TrainConfig {
  const path = join('configs', `${method}-fashion-mnist.yaml`);
  if (!existsSync(path)) throw new Error(`bench:zoo: method '${method}' has no recipe ${path}`);
  const recipe = readConfigFile(path);
  if (recipe.method !== method) throw new Error(`bench:zoo: ${path} trains '${String(recipe.method)}', not '${method}'`);
  return buildConfig({
    ...recipe,
    dataset: 'fashion-mnist',
    epochs,
    warmupEpochs: epochs / 10,
    // Validation at the end only, unless --curves (before the first step and after every epoch:
    // the comparison picture's curves, at about 2 minutes per validation).
    ...(process.argv.includes('--curves') ? { valEvery: 1, valAtStart: true } : { valEvery: epochs }),
    knnK: KNN.k,
    knnTemperature: KNN.temperature,
    knnTrainSamples: 0,
    valSamples: 0,
    checkpointEvery: 0,
    // A long row (a ViT method: hours on 2 cores) loses at most 25 steps to an interruption (--resume).
    checkpointEverySteps: 25,
    runDir: join('bench-runs', 'zoo', method),
  });
}

/** kNN top-1 of `model`'s features (eval mode), memory = the training set, queries = the test set. */
function knnTop1(model: FeatureModel, train: ImageDataset, test: ImageDataset): number {
  const transform = evalTransform(train);
  const memory = extractFeatures(model, train, transform, 512);
  const queries = extractFeatures(model, test, transform, 512);
  const { top1 } = weightedKnn(memory.features, memory.labels, queries.features, queries.labels, { ...KNN, numClasses: train.numClasses });
  tf.dispose([memory.features, memory.logits, queries.features, queries.logits]);
  return top1;
}

/** The backbone `method` is benchmarked on (its recipe's). */
function backboneOf(method: string): string {
  return benchConfig(method, 3).backbone;
}

/**
 * Measures the random-init kNN of the backbones of `methods` (built by the first such method's
 * recipe, untrained) whose baseline is missing, or all of them with `all`; and raw pixels' kNN
 * when missing or with `all`. Returns whether anything was measured.
 */
async function baselines(results: Results, methods: string[], all: boolean): Promise<boolean> {
  const randomInit = results.baselines.randomInit ?? {};
  const todo = new Map<string, string>();
  for (const m of methods) {
    const backbone = backboneOf(m);
    if ((all || !randomInit[backbone]) && !todo.has(backbone)) todo.set(backbone, m);
  }
  if (todo.size === 0 && results.baselines.rawPixels && !all) return false;
  // Every recipe trains on the same Fashion-MNIST split: load it once.
  const experiments = new Map([...todo].map(([backbone, m]) => [backbone, prepareExperiment(benchConfig(m, 1))]));
  const { train, test } = experiments.values().next().value ?? prepareExperiment(benchConfig(methods[0] ?? 'simclr', 1));
  for (const [backbone, experiment] of experiments) {
    const method = experiment.createMethod();
    method.eval();
    randomInit[backbone] = { knnTop1: knnTop1(method, train, test), ...provenance() };
    method.dispose();
    process.stdout.write(`baselines: random-init ${backbone} kNN top-1 ${(100 * randomInit[backbone]!.knnTop1).toFixed(2)}%\n`);
  }
  results.baselines.randomInit = randomInit;
  if (all || !results.baselines.rawPixels) {
    const pixels: FeatureModel = {
      features: (images: Tensor) => tf.reshape(images, [images.shape[0], -1]),
      classifier: { forward: (f: Tensor) => tf.zeros([f.shape[0], 1]) },
    };
    results.baselines.rawPixels = { knnTop1: knnTop1(pixels, train, test), ...provenance() };
    process.stdout.write(`baselines: raw pixels kNN top-1 ${(100 * results.baselines.rawPixels.knnTop1).toFixed(2)}%\n`);
  }
  return true;
}

/** The mean of a training metric over the run's metrics.jsonl, or its last value. */
function metricOf(runDir: string, name: string, how: 'mean' | 'last'): number | null {
  const path = join(runDir, 'metrics.jsonl');
  if (!existsSync(path)) return null;
  const values = readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .map((row) => row[name])
    .filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  if (values.length === 0) return null;
  return how === 'last' ? values[values.length - 1]! : values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * The row of `method` from its finished run directory (bench-runs/zoo/<method>): the last
 * validation in metrics.jsonl, the training wall time saved in the final checkpoint.
 */
function rowFromRun(method: string, config: TrainConfig): MethodRow {
  const runDir = config.runDir!;
  const knn = metricOf(runDir, 'val/knn_acc1', 'last');
  const linear = metricOf(runDir, 'val/acc1', 'last');
  if (knn === null || linear === null) throw new Error(`bench:zoo: ${method} ended without validation metrics in ${runDir}/metrics.jsonl`);
  const checkpoint = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
  tf.dispose(Object.values(checkpoint.tensors));
  const wallTimeSec = Number(checkpoint.meta.wallTimeSec);
  const steps = Number((checkpoint.meta.progress as { step?: number } | undefined)?.step);
  if (!(steps * config.batchSize >= config.epochs * 0.9 * 60000))
    throw new Error(`bench:zoo: ${runDir} did not finish its ${config.epochs} epochs (step ${steps})`);
  return {
    method,
    knnTop1: knn,
    linearTop1: linear,
    wallTimeSec,
    imagesPerSec: metricOf(runDir, 'train/images_per_sec', 'mean') ?? (steps * config.batchSize) / wallTimeSec,
    embeddingStd: metricOf(runDir, 'train/embedding_std', 'last'),
    epochs: config.epochs,
    fingerprint: fingerprint(config),
    ...provenance(),
  };
}

async function trainMethod(method: string, epochs: number): Promise<MethodRow> {
  const config = benchConfig(method, epochs);
  if (process.argv.includes('--from-runs')) return rowFromRun(method, config);
  process.stdout.write(`bench:zoo: ${method}, ${epochs} epochs (${join('configs', `${method}-fashion-mnist.yaml`)})\n`);
  process.stdout.write(`bench:zoo: ${method}: ${prepareRun(config, process.argv.includes('--resume'))}\n`);
  await runTraining(config);
  return rowFromRun(method, config);
}

/** A row of the results table: a method's measured row if it is current (same epochs, same recipe fingerprint), else undefined. */
function currentRow(results: Results, name: string, epochs: number): MethodRow | undefined {
  const row = results.methods[name];
  if (
    !row ||
    row.epochs !== epochs ||
    !existsSync(join('configs', `${name}-fashion-mnist.yaml`)) ||
    row.fingerprint !== fingerprint(benchConfig(name, row.epochs))
  )
    return undefined;
  return row;
}

const pct = (x: number) => (100 * x).toFixed(1);

/** The kNN gain over the random-init kNN of the row's backbone, in points ("+8.0"), and whether it reaches MARGIN. */
function gain(results: Results, name: string, row: MethodRow): { delta: string; passes: string } {
  const backbone = backboneOf(name);
  const random = results.baselines.randomInit?.[backbone]?.knnTop1;
  if (random === undefined) return { delta: '', passes: `no ${backbone} baseline` };
  const points = 100 * (row.knnTop1 - random);
  return { delta: `${points >= 0 ? '+' : '−'}${Math.abs(points).toFixed(1)}`, passes: row.knnTop1 - random >= MARGIN / 100 ? 'yes' : '**no**' };
}

function notMeasured(missing: string[]): string[] {
  return missing.length
    ? ['', `Not yet measured with the current recipe: ${missing.join(', ')} (\`npm run bench:zoo -- --methods ${missing.join(',')}\`).`]
    : [];
}

/**
 * The README's table (short cells): current rows only, each checked against the random-init
 * baseline of its backbone; the measurement notes are in docs/results.md (see {@link details}).
 */
function table(results: Results, epochs: number): string {
  const lines = [
    `| method | backbone | kNN top-1 (%) | vs random init (points) | online linear top-1 (%) | beats random init by ≥ ${MARGIN} |`,
    '|---|---|---|---|---|---|',
  ];
  const missing: string[] = [];
  for (const name of BUILT_IN_METHODS) {
    const row = currentRow(results, name, epochs);
    if (!row) {
      missing.push(name);
      continue;
    }
    const { delta, passes } = gain(results, name, row);
    lines.push(`| ${name} | ${backboneOf(name)} | ${pct(row.knnTop1)} | ${delta} | ${pct(row.linearTop1)} | ${passes} |`);
  }
  for (const [backbone, baseline] of Object.entries(results.baselines.randomInit ?? {}))
    lines.push(`| *random-init ${backbone}* | ${backbone} | ${pct(baseline.knnTop1)} | | | |`);
  if (results.baselines.rawPixels) lines.push(`| *raw pixels* | — | ${pct(results.baselines.rawPixels.knnTop1)} | | | |`);
  return [...lines, ...notMeasured(missing)].join('\n');
}

/**
 * docs/results.md's long form: every current row with its wall time, throughput and
 * provenance (CPU, commit, date), then each row's note (what qualifies its figures: other jobs
 * on the machine, earlier recipes tried) as a list, so that no table cell holds prose.
 */
function details(results: Results, epochs: number): string {
  const lines = [
    '| method | kNN top-1 (%) | vs random init (points) | online linear top-1 (%) | wall time | images/s | CPU | commit | date |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  const notes: string[] = [];
  const missing: string[] = [];
  for (const name of BUILT_IN_METHODS) {
    const row = currentRow(results, name, epochs);
    if (!row) {
      missing.push(name);
      continue;
    }
    const { delta } = gain(results, name, row);
    const time = `${Math.floor(row.wallTimeSec / 60)} min ${Math.round(row.wallTimeSec % 60)} s`;
    lines.push(
      `| ${name} | ${pct(row.knnTop1)} | ${delta} | ${pct(row.linearTop1)} | ${time} | ${Math.round(row.imagesPerSec)} | ${row.cpu} | ${row.commit} | ${row.date} |`,
    );
    if (row.note) notes.push(`- **${name}**: ${row.note}`);
  }
  for (const [backbone, b] of Object.entries(results.baselines.randomInit ?? {}))
    lines.push(`| *random-init ${backbone}* | ${pct(b.knnTop1)} | | | | | ${b.cpu} | ${b.commit} | ${b.date} |`);
  const raw = results.baselines.rawPixels;
  if (raw) lines.push(`| *raw pixels* | ${pct(raw.knnTop1)} | | | | | ${raw.cpu} | ${raw.commit} | ${raw.date} |`);
  const out = [...lines, ...notMeasured(missing)];
  if (notes.length) out.push('', 'Notes on the rows (the `note` of each row in `scripts/bench/zoo-results.json`):', '', ...notes);
  return out.join('\n');
}

/** Replaces the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in `file`. */
function writeBetween(file: string, name: string, content: string): void {
  const text = readFileSync(file, 'utf8');
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`bench:zoo: ${file} has no ${start} ... ${end} section`);
  writeFileSync(file, `${text.slice(0, i + start.length)}\n${content}\n${text.slice(j)}`);
  process.stdout.write(`bench:zoo: wrote the ${name} section of ${file}\n`);
}

function writeTable(results: Results, epochs: number): void {
  writeBetween(README, 'zoo-table', table(results, epochs));
  writeBetween(RESULTS_PAGE, 'zoo-details', details(results, epochs));
}

/**
 * `--restamp`: after a change of what the fingerprint covers, gives the current fingerprint to
 * the rows whose recipe file is unchanged since the commit they were measured at (said per
 * row); the others stay stale.
 */
function restamp(results: Results): void {
  for (const row of Object.values(results.methods)) {
    const recipe = join('configs', `${row.method}-fashion-mnist.yaml`);
    const commit = row.commit.replace(/\+dirty$/, '');
    let unchanged = false;
    try {
      execSync(`git diff --quiet ${commit} HEAD -- ${recipe}`, { stdio: 'ignore' });
      unchanged = true;
    } catch {
      // changed, or the commit is unknown
    }
    if (unchanged) row.fingerprint = fingerprint(benchConfig(row.method, row.epochs));
    process.stdout.write(`bench:zoo --restamp: ${row.method}: ${unchanged ? 'restamped' : `left stale (${recipe} changed since ${commit})`}\n`);
  }
  save(results);
}

async function main(): Promise<void> {
  await initEngine('auto');
  const epochs = Number(flag('epochs', '3'));
  if (!Number.isInteger(epochs) || epochs < 3)
    throw new Error(`--epochs: ${epochs} is not allowed; expected an integer >= 3 (the issue's minimum, the same for every method)`);
  const results = load();
  if (process.argv.includes('--restamp')) restamp(results);
  else if (!process.argv.includes('--table')) {
    const requested = flag('methods', BUILT_IN_METHODS.join(','))
      .split(',')
      .map((m) => m.trim())
      .filter(Boolean);
    for (const m of requested) getMethodClass(m); // unknown names fail before any training
    const baselinesOnly = process.argv.includes('--baselines');
    // Saved only when measured, so a run that finds its baselines leaves the file (and its own commit stamp) clean.
    if (!process.argv.includes('--from-runs') && (await baselines(results, requested, baselinesOnly))) save(results);
    for (const m of baselinesOnly ? [] : requested) {
      results.methods[m] = await trainMethod(m, epochs);
      save(results);
      const r = results.methods[m];
      process.stdout.write(`${JSON.stringify(r)}\n`);
    }
  }
  writeTable(results, epochs);
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
