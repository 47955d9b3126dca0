/**
 * `ssl-train verify --engine-against ENGINE`: the engine `--backend` selects (e.g. `webgpu`)
 * against a reference engine (`cpu`: native oneDNN kernels, or `cpu-js`: tfjs's pure-JS
 * kernels), on the same optimizer steps.
 *
 * Both engines run in this process, one after the other: the reference engine first (its
 * run, then {@link ROUNDOFF_TWINS} round-off twins, all on the reference engine), then the
 * engine under test. Every result is copied to this process's memory (`await data()`) and
 * every tensor disposed before the switch, so nothing crosses engines but plain arrays:
 * the batches (loaded once, with their augmentations, before either run) and the results.
 * The initial weights come from the seeded JS generator (src/core/random.ts), never from an
 * engine's random ops, so both engines must start from the same state, up to the rounding of
 * what the engine computes from the draws at construction (a queue's normalised rows): each
 * tensor within `tolerance` of the reference's, checked first. One process rather than two
 * keeps kernels registered in-process (the negative control of
 * tests/verify/engine-against.test.ts) in the run they are meant for.
 *
 * Per step the engine under test must match the reference run within the bound `verify`
 * uses for W ranks against one process (src/verify/roundoff.ts): `roundoffFactor` × the
 * largest difference of a twin (same step, samples reordered, every input, parameter and
 * buffer moved by one ulp) to the reference run, at least `tolerance`; for the loss, all
 * gradients in norm, the parameters and buffers in norm, and the queues (and other memory
 * modules) in norm. The twins are measured on the reference engine: they estimate the
 * round-off of the problem, which a correct engine's difference is a draw of. Each tensor's
 * own difference against its own twins' bound is reported too, largest ratio first: the
 * tensors a wrong kernel touches (diagnostics; a single tensor's twin spread is ruled by
 * rare ReLU switches, so the decision is the norms').
 *
 * On a GPU engine (one with an adapter: `webgpu`), each step of the engine under test runs with
 * synchronous reads of the device refused (src/core/sync-reads.ts): a step that reads one
 * fails the check, naming its caller, as it would stall a GPU's queue (DESIGN.md).
 */
import { initEngine, type BackendChoice, type EngineInfo } from '../core/engine.js';
import { forbidSyncReads } from '../core/sync-reads.js';
import type { TrainConfig } from '../experiment/config.js';
import { inProcessLoader, prepareExperiment } from '../experiment/experiment.js';
import { engineRequest } from '../experiment/train.js';
import type { MultiViewBatch } from '../data/loader.js';
import type { BaseMethod } from '../methods/base.js';
import { SslTask } from '../methods/task.js';
import { SingleDeviceStrategy } from '../trainer/strategy.js';
import { boundRatio, gradientDifference, roundoffBound, ROUNDOFF_TWINS, scalarDifference, stateDifference } from './roundoff.js';
import { perturbState, splitQueues, stateArrays, step, stepBatches, stepStart, taskRun, twinKey, twinStep, type StateArrays } from './steps.js';

/** Options of {@link runEngineAgainst}. */
export interface EngineCheckOptions {
  steps: number;
  /** The floor of every bound (a relative difference always allowed). */
  tolerance: number;
  /** Multiple of the measured round-off allowed. */
  roundoffFactor: number;
  /** The reference engine: `cpu` or `cpu-js`. */
  against: BackendChoice;
}

/** A relative difference, its bound, and the tensor with the largest share of it ('' for the loss). */
export interface BoundedDifference {
  value: number;
  bound: number;
  tensor: string;
}

/** One step of the comparison (see src/verify/roundoff.ts for each measure). */
export interface EngineCheckStep {
  step: number;
  loss: BoundedDifference;
  /** All gradients the optimizer applied, in norm: ‖a − ref‖ / ‖ref‖. */
  gradients: BoundedDifference;
  /** Parameters and buffers after the step, in norm, relative to how far the steps moved them. */
  parameters: BoundedDifference;
  /** Queues, banks, prototypes and assignments after the step, for methods with such state. */
  queues?: BoundedDifference;
}

/** One tensor's own relative difference at one step, against the bound from its own twin differences. */
export interface TensorDifference {
  step: number;
  kind: 'gradient' | 'state' | 'queue';
  name: string;
  value: number;
  bound: number;
}

export interface EngineCheckResult {
  /** The engine under test and the reference engine (tfjs backends, e.g. `webgpu` and `cpu`). */
  engine: string;
  against: string;
  /** Initial state tensors that differ between the engines beyond `tolerance`, with their relative difference (same seed: must be none). */
  initialMismatch: string[];
  steps: EngineCheckStep[];
  /** Every tensor at every step, largest value / bound first. */
  tensors: TensorDifference[];
  /** The engine under test's error, when it could not run (`step k of n: message (ssl-zoo's frame)`); no step is compared then. */
  error?: string;
  /** Whether the engine under test ran its steps with synchronous reads of the device refused (a GPU engine). */
  syncReadsRefused: boolean;
  /** Largest difference-to-bound ratio over all steps and kinds (passes at <= 1). */
  worst: number;
  tolerance: number;
  roundoffFactor: number;
  passed: boolean;
}

/** One step of a run, read back: the loss, the applied gradients and the state split into queues and the rest. */
interface RecordedStep {
  loss: number;
  grads: Record<string, Float32Array>;
  rest: StateArrays;
  queues: StateArrays;
}

/** A whole run, read back: its state before the first step, and each step. */
interface RecordedRun {
  start: { rest: StateArrays; queues: StateArrays };
  steps: RecordedStep[];
}

/** What every run of the comparison shares: the method factory, the task's options, the batches of every step. */
interface RunPlan {
  createMethod: () => BaseMethod;
  optim: ConstructorParameters<typeof SslTask>[1];
  gradCacheChunk: number | undefined;
  /** Each step's micro-batches. */
  batches: MultiViewBatch[][];
  accumulate: number;
  perEpoch: number;
}

/** A step of a run that threw: its message says which one, and why. */
class StepFailure extends Error {
  constructor(step: number, of: number, error: unknown) {
    super(`step ${step} of ${of}: ${describeError(error)}`);
  }
}

/**
 * Runs `plan`'s steps on the current engine with a fresh method (twin `twin` of
 * {@link ROUNDOFF_TWINS} when given: its state moved by one ulp, its batches reordered and
 * moved by one ulp), reads every result back, and disposes the run. With `refuseSyncReads`,
 * each step runs with synchronous reads of the device refused (a step that reads one throws).
 */
async function recordRun(plan: RunPlan, twin?: number, refuseSyncReads = false): Promise<RecordedRun> {
  const method = plan.createMethod();
  const strategy = new SingleDeviceStrategy();
  const task = new SslTask(method, plan.optim, undefined, plan.gradCacheChunk);
  task.setup({ group: strategy.group });
  const totalSteps = plan.batches.length;
  const run = taskRun(task, strategy, { totalSteps, stepsPerEpoch: totalSteps });
  const split = async () => splitQueues(method, await stateArrays(method));
  try {
    if (twin !== undefined) await perturbState(method, twin + 1);
    const start = await split();
    const steps: RecordedStep[] = [];
    for (const [s, batches] of plan.batches.entries()) {
      const at = stepStart(s, plan.accumulate, plan.perEpoch, totalSteps);
      try {
        const restore = refuseSyncReads ? forbidSyncReads() : undefined;
        const out = await (
          twin === undefined ? step(run, batches, at) : twinStep(run, method, batches, at, (j) => twinKey(s, twin, j, ROUNDOFF_TWINS, plan.accumulate))
        ).finally(() => restore?.());
        steps.push({ ...out, ...(await split()) });
      } catch (error) {
        throw new StepFailure(s + 1, totalSteps, error);
      }
    }
    return { start, steps };
  } finally {
    run.optimizer.dispose();
    method.dispose();
  }
}

/** An engine's name in the report: its tfjs backend, or `cpu-js` for the cpu backend's pure-JS kernels. */
function engineLabel(info: EngineInfo): string {
  return info.requested === 'cpu-js' ? 'cpu-js' : info.backend;
}

/**
 * The tensors of `reference` whose values in `a` differ by more than `tolerance` relative to
 * their norm (`‖a − ref‖ / ‖ref‖`), or are missing, as `name (difference)`. The initial
 * draws are the same on every engine; what an engine computes from them at construction (a
 * queue's rows normalised) may differ by its rounding, and a drawing that is not the same
 * (a random op of the engine's own) differs by O(1).
 */
function mismatches(a: StateArrays, reference: StateArrays, tolerance: number): string[] {
  return Object.keys(reference).flatMap((name) => {
    const { value } = gradientDifference(pick(a, name), pick(reference, name));
    return value > tolerance ? [`${name} (${value.toExponential(2)})`] : [];
  });
}

/** The entry `name` of `values` alone (none when it is missing: a missing tensor counts as an infinite difference). */
function pick<T>(values: Record<string, T>, name: string): Record<string, T> {
  const value = values[name];
  return value === undefined ? {} : { [name]: value };
}

/** The error's message and the first stack frame of ssl-zoo's own code (where a kernel or a sync read failed). */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const frame = error.stack?.split('\n').find((line) => /^\s+at .*\/src\//.test(line) && !line.includes('node_modules'));
  return frame ? `${error.message} (${frame.trim()})` : error.message;
}

/**
 * Compares `tested` with `reference` step by step: each kind in norm against the bound from
 * `twins` (see the module comment), and each tensor against its own twins' bound.
 */
function compareRuns(
  reference: RecordedRun,
  twins: RecordedRun[],
  tested: RecordedRun,
  options: EngineCheckOptions,
): { steps: EngineCheckStep[]; tensors: TensorDifference[] } {
  const { roundoffFactor, tolerance } = options;
  const bounded = (value: { value: number; tensor: string }, roundoffs: number[]): BoundedDifference => ({
    ...value,
    bound: roundoffBound(Math.max(...roundoffs), roundoffFactor, tolerance),
  });
  const steps: EngineCheckStep[] = [];
  const tensors: TensorDifference[] = [];
  reference.steps.forEach((ref, s) => {
    const out = tested.steps[s]!;
    const twinSteps = twins.map((t) => t.steps[s]!);
    const start = reference.start;
    const stateOf = (kind: 'rest' | 'queues') => (a: RecordedStep) => stateDifference(a[kind], ref[kind], start[kind]);
    const gradientsOf = (a: RecordedStep) => gradientDifference(a.grads, ref.grads);
    const hasQueues = Object.keys(ref.queues).length > 0;
    const perTensor = (kind: TensorDifference['kind'], names: string[], difference: (a: RecordedStep, name: string) => number) => {
      for (const name of names) {
        const roundoff = Math.max(...twinSteps.map((t) => difference(t, name)));
        tensors.push({ step: s + 1, kind, name, value: difference(out, name), bound: roundoffBound(roundoff, roundoffFactor, tolerance) });
      }
    };
    perTensor('gradient', Object.keys(ref.grads), (a, name) => gradientDifference(pick(a.grads, name), pick(ref.grads, name)).value);
    perTensor('state', Object.keys(ref.rest), (a, name) => stateDifference(pick(a.rest, name), pick(ref.rest, name), pick(start.rest, name)).value);
    perTensor('queue', Object.keys(ref.queues), (a, name) => stateDifference(pick(a.queues, name), pick(ref.queues, name), pick(start.queues, name)).value);
    steps.push({
      step: s + 1,
      loss: bounded(
        { value: scalarDifference(out.loss, ref.loss), tensor: '' },
        twinSteps.map((t) => scalarDifference(t.loss, ref.loss)),
      ),
      gradients: bounded(
        gradientsOf(out),
        twinSteps.map((t) => gradientsOf(t).value),
      ),
      parameters: bounded(
        stateOf('rest')(out),
        twinSteps.map((t) => stateOf('rest')(t).value),
      ),
      queues: hasQueues
        ? bounded(
            stateOf('queues')(out),
            twinSteps.map((t) => stateOf('queues')(t).value),
          )
        : undefined,
    });
  });
  tensors.sort((a, b) => boundRatio(b.value, b.bound) - boundRatio(a.value, a.bound));
  return { steps, tensors };
}

/**
 * `ssl-train verify --engine-against ENGINE`: `options.steps` optimizer steps of `config`'s
 * method on one process, on the reference engine `options.against` and on the engine
 * `config.backend` selects, compared step by step (see the module comment). Leaves the engine
 * under test selected.
 */
export async function runEngineAgainst(config: TrainConfig, options: EngineCheckOptions): Promise<EngineCheckResult> {
  const { steps, tolerance, roundoffFactor } = options;
  const request = engineRequest(config);
  const reference = await initEngine(options.against);
  const experiment = prepareExperiment(config);
  const loader = inProcessLoader(experiment, config);
  const accumulate = config.accumulateGradBatches;
  const perEpoch = loader.numBatches();
  const batches: MultiViewBatch[][] = [];
  try {
    for (let s = 0; s < steps; s++) batches.push(await stepBatches(loader, s, accumulate, perEpoch));
  } finally {
    await loader.close();
  }
  const optim = { ...experiment.optim, warmupEpochs: 0, globalBatch: config.batchSize };
  const plan: RunPlan = { createMethod: experiment.createMethod, optim, gradCacheChunk: config.gradCacheChunk, batches, accumulate, perEpoch };
  const referenceRun = await recordRun(plan);
  const twins: RecordedRun[] = [];
  for (let t = 0; t < ROUNDOFF_TWINS; t++) twins.push(await recordRun(plan, t));
  const engine = await initEngine(request.backend, request.gpu);
  const syncReadsRefused = engine.gpu !== undefined;
  const base = { engine: engineLabel(engine), against: engineLabel(reference), tolerance, roundoffFactor, syncReadsRefused };
  let tested: RecordedRun;
  try {
    tested = await recordRun(plan, undefined, syncReadsRefused);
  } catch (error) {
    return {
      ...base,
      initialMismatch: [],
      steps: [],
      tensors: [],
      error: error instanceof StepFailure ? error.message : describeError(error),
      worst: Infinity,
      passed: false,
    };
  }
  const initialMismatch = (['rest', 'queues'] as const).flatMap((kind) => mismatches(tested.start[kind], referenceRun.start[kind], tolerance));
  const { steps: compared, tensors } = compareRuns(referenceRun, twins, tested, options);
  const ratios = compared.flatMap((s) => [s.loss, s.gradients, s.parameters, ...(s.queues ? [s.queues] : [])].map((d) => boundRatio(d.value, d.bound)));
  const worst = Math.max(initialMismatch.length > 0 ? Infinity : 0, ...ratios);
  return { ...base, initialMismatch, steps: compared, tensors, worst, passed: worst <= 1 };
}

/** How many tensors {@link formatEngineResult} lists. */
const LISTED_TENSORS = 8;

/** A readable table of an {@link EngineCheckResult} for `method`: the steps, the tensors furthest from their bound, the verdict. */
export function formatEngineResult(result: EngineCheckResult, method: string): string {
  const e = (x: number) => x.toExponential(2);
  const cell = (d: BoundedDifference) => `${e(d.value)} / ${e(d.bound)}`.padEnd(21);
  const queues = result.steps.some((s) => s.queues);
  const lines = [
    `verify ${method}: engine ${result.engine} against ${result.against} on the same steps (same seed, batches and augmentations)`,
    `relative difference / its bound (${result.roundoffFactor} x the float32 round-off of ${ROUNDOFF_TWINS} twins on ${result.against}, at least ${e(result.tolerance)}); gradients and state in norm over all tensors`,
  ];
  if (result.error !== undefined) {
    lines.push(`FAILED: the ${result.engine} engine could not run ${result.error}`);
    return lines.join('\n');
  }
  if (result.initialMismatch.length > 0) {
    lines.push(`initial state differs between the engines beyond ${e(result.tolerance)} (same seed: the same draws): ${result.initialMismatch.join(', ')}`);
  }
  lines.push(
    `step  ${'loss'.padEnd(21)} ${'gradients'.padEnd(21)} ${'parameters'.padEnd(21)} ${queues ? `${'queues'.padEnd(21)} ` : ''}largest share (gradients; parameters${queues ? '; queues' : ''})`,
    ...result.steps.map(
      (s) =>
        `${String(s.step).padEnd(5)} ${cell(s.loss)} ${cell(s.gradients)} ${cell(s.parameters)} ${s.queues ? `${cell(s.queues)} ` : ''}` +
        `${s.gradients.tensor}; ${s.parameters.tensor}${s.queues ? `; ${s.queues.tensor}` : ''}`,
    ),
    `tensors furthest from their own round-off (step kind name: relative difference / its bound):`,
    ...result.tensors.slice(0, LISTED_TENSORS).map((t) => `  ${t.step} ${t.kind} ${t.name}: ${e(t.value)} / ${e(t.bound)}`),
    ...(result.syncReadsRefused ? [`no synchronous read of the device in any ${result.engine} step (each step ran with them refused)`] : []),
    `${result.passed ? 'PASSED' : 'FAILED'}: the worst difference is ${result.worst.toFixed(2)} of its bound`,
  );
  return lines.join('\n');
}
