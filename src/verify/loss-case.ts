/**
 * Checking loss cases (docs/loss-case.md) on W ranks: {@link evaluateLossCase} runs one case's
 * loss on this rank's slices, {@link caseErrors} compares the answers of ranks with the float64
 * reference (a pure function: tests call it with every rank's answer), and
 * {@link checkLossCases} does both inside a W-rank job, combining the ranks' errors with
 * collectives. `ssl-train verify --case FILE --devices W` is built on the last one.
 */
import { UserError } from '../core/errors.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import { rankSlice, sliceAxis, type CaseTensor, type LossCase, type LossCaseFile } from './loss-case-format.js';
import { caseLossSpec, caseProblem, type CaseLossFn } from './loss-case-specs.js';

/** One rank's answer on a case: all flat, in the layout of the rank's slice. */
export interface RankResult {
  value: number;
  /** ∂loss_r/∂input on this rank's slice, for every float32 input. */
  grads: Record<string, number[]>;
  /** ∂loss_r/∂state for every float32 state entry (must be exactly 0). */
  stateGrads: Record<string, number[]>;
  outputs: Record<string, number[]>;
  stateAfter: Record<string, number[]>;
}

/** The tensors of rank `rank` of `worldSize`: its slices of the inputs, all of the state. */
function rankTensors(c: LossCase, rank: number, worldSize: number): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  for (const [k, t] of Object.entries(c.inputs)) {
    const { shape, data } = rankSlice(t, rank, worldSize);
    out[k] = tf.tensor(data, shape, t.dtype);
  }
  for (const [k, t] of Object.entries(c.state)) out[k] = tf.tensor(t.data, t.shape, t.dtype);
  return out;
}

/**
 * Rank `rank`'s loss of case `c` in a job of `worldSize` ranks on `group` (undefined: one
 * process), with `fn` (default: the case's loss; tests pass deliberately wrong variants): its
 * value, its gradients with respect to its float32 inputs and state, its outputs and state
 * after. Throws when ssl-zoo has no such loss. Frees every tensor it makes.
 */
export function evaluateLossCase(c: LossCase, rank: number, worldSize: number, group: ProcessGroup | undefined, fn?: CaseLossFn): RankResult {
  const run = fn ?? caseLossSpec(c.loss)?.run;
  if (!run) throw new Error(`${c.name}: ssl-zoo has no loss ${JSON.stringify(c.loss)}`);
  const x = rankTensors(c, rank, worldSize);
  const inputNames = Object.keys(c.inputs).filter((k) => c.inputs[k]!.dtype === 'float32');
  const stateNames = Object.keys(c.state).filter((k) => c.state[k]!.dtype === 'float32');
  const names = [...inputNames, ...stateNames];
  const result: RankResult = { value: NaN, grads: {}, stateGrads: {}, outputs: {}, stateAfter: {} };
  try {
    const f = (...a: Tensor[]): Scalar => {
      const named = { ...x };
      names.forEach((k, i) => (named[k] = a[i]!));
      const out = run(c, named, group);
      if (!('loss' in out)) return out;
      for (const [k, t] of Object.entries(out.outputs ?? {})) result.outputs[k] = Array.from(t.dataSync());
      for (const [k, t] of Object.entries(out.stateAfter ?? {})) result.stateAfter[k] = Array.from(t.dataSync());
      tf.dispose([...Object.values(out.outputs ?? {}), ...Object.values(out.stateAfter ?? {})]);
      return out.loss;
    };
    // An input the loss does not use at all (DINO's student crop of a lone teacher) has no
    // gradient: allowed, and exactly zero.
    const xs = names.map((k) => x[k]!);
    const { value, grads } = tf.engine().gradients(() => f(...xs), xs, undefined, true);
    result.value = value.dataSync()[0]!;
    names.forEach((k, i) => {
      const g = grads[i];
      (i < inputNames.length ? result.grads : result.stateGrads)[k] = g ? Array.from(g.dataSync()) : new Array<number>(xs[i]!.size).fill(0);
    });
    tf.dispose([value, ...grads.filter((g): g is Tensor => g !== undefined && g !== null)]);
    return result;
  } finally {
    tf.dispose(Object.values(x));
  }
}

/** How far W ranks' answers are from a case (each a relative error; NaN counts as Infinity). */
export interface CaseErrors {
  /** |mean_r loss_r − loss| / max(|loss|, 1e-6). */
  loss: number;
  /** max_r |loss_r − per_rank[W][r]| / max(|per_rank[W][r]|, 1e-6); undefined when the case has none for W. */
  rankLoss?: number;
  /**
   * max over inputs and ranks of |grad_r / W − reference slice| (an input without batch axis:
   * |mean_r grad_r − reference|), relative to the largest |entry| of that input's reference.
   */
  grad: number;
  /** max over outputs and ranks of rank r's output (its slice) against the reference, relative to the largest entry; undefined: no outputs. */
  outputs?: number;
  /** max over state entries and ranks of the state after against the reference, relative; undefined: none. */
  stateAfter?: number;
  /** Inputs whose reference gradient is exactly zero (detached) and state entries that got a non-zero gradient on some rank. */
  detached: string[];
}

const REL_FLOOR = 1e-6;

/** max |a − b| / scale (scale 0: must be exactly equal). */
function scaled(a: ArrayLike<number>, b: ArrayLike<number>, scale: number): number {
  let diff = 0;
  for (let i = 0; i < b.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (Number.isNaN(d)) return Infinity;
    diff = Math.max(diff, d);
  }
  if (a.length !== b.length) return Infinity;
  return scale > 0 ? diff / scale : diff === 0 ? 0 : Infinity;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

function relative(a: number, b: number): number {
  const e = Math.abs(a - b) / Math.max(Math.abs(b), REL_FLOOR);
  return Number.isNaN(e) ? Infinity : e;
}

/** Rank r's part of an output or a gradient of `t`'s layout. */
function slice(data: number[], t: Pick<CaseTensor, 'shape' | 'batchAxis'>, rank: number, worldSize: number): number[] {
  if (t.batchAxis === null) return data;
  const b = t.shape[t.batchAxis]! / worldSize;
  return sliceAxis(data, t.shape, t.batchAxis, rank * b, b);
}

/**
 * The per-rank error vector of the ranks in `results` (rank -> answer; one rank inside a job,
 * all of them in a test): `[rankLoss, grad, outputs, stateAfter, ...one 0/1 flag per detached
 * input or state entry]`, each a max over the given ranks. `replicatedMean` holds, for every
 * float32 input without batch axis, the mean over all W ranks of their gradients.
 */
function errorVector(
  c: LossCase,
  worldSize: number,
  results: Map<number, RankResult>,
  replicatedMean: Record<string, number[]>,
): { vector: number[]; flagNames: string[] } {
  let rankLoss = 0;
  let grad = 0;
  let outputs = 0;
  let stateAfter = 0;
  const flagNames: string[] = [];
  const flags: number[] = [];
  const perRank = c.expected.perRank[worldSize];
  for (const [k, ref] of Object.entries(c.expected.grad)) {
    const input = c.inputs[k]!;
    const scale = maxAbs(ref);
    if (scale === 0) {
      flagNames.push(k);
      flags.push([...results.values()].some((r) => r.grads[k]!.some((g) => g !== 0)) ? 1 : 0);
      continue;
    }
    for (const [rank, res] of results) {
      const mine = input.batchAxis === null ? replicatedMean[k]! : res.grads[k]!.map((g) => g / worldSize);
      grad = Math.max(grad, scaled(mine, slice(ref, input, rank, worldSize), scale));
    }
  }
  for (const k of Object.keys(c.state)) {
    if (c.state[k]!.dtype !== 'float32') continue;
    flagNames.push(`state.${k}`);
    flags.push([...results.values()].some((r) => r.stateGrads[k]!.some((g) => g !== 0)) ? 1 : 0);
  }
  for (const [rank, res] of results) {
    if (perRank) rankLoss = Math.max(rankLoss, relative(res.value, perRank[rank]!));
    for (const [k, ref] of Object.entries(c.expected.outputs)) {
      const mine = res.outputs[k];
      outputs = Math.max(outputs, mine ? scaled(mine, slice(ref.data, ref, rank, worldSize), maxAbs(ref.data)) : Infinity);
    }
    for (const [k, ref] of Object.entries(c.expected.stateAfter)) {
      const mine = res.stateAfter[k];
      stateAfter = Math.max(stateAfter, mine ? scaled(mine, ref.data, maxAbs(ref.data)) : Infinity);
    }
  }
  return { vector: [rankLoss, grad, outputs, stateAfter, ...flags], flagNames };
}

function errorsFrom(c: LossCase, worldSize: number, values: number[], vector: number[], flagNames: string[]): CaseErrors {
  const mean = values.reduce((s, v) => s + v, 0) / worldSize;
  const errors: CaseErrors = { loss: relative(mean, c.expected.loss), grad: vector[1]!, detached: flagNames.filter((_, i) => vector[4 + i]! > 0) };
  if (c.expected.perRank[worldSize]) errors.rankLoss = vector[0]!;
  if (Object.keys(c.expected.outputs).length > 0) errors.outputs = vector[2]!;
  if (Object.keys(c.expected.stateAfter).length > 0) errors.stateAfter = vector[3]!;
  return errors;
}

/** The errors of every rank's answer on case `c` (`results[r]`: rank r's, W = results.length). */
export function caseErrors(c: LossCase, results: RankResult[]): CaseErrors {
  const W = results.length;
  const replicatedMean: Record<string, number[]> = {};
  for (const [k, t] of Object.entries(c.inputs)) {
    if (t.batchAxis !== null || t.dtype !== 'float32') continue;
    replicatedMean[k] = results[0]!.grads[k]!.map((_, i) => results.reduce((s, r) => s + r.grads[k]![i]!, 0) / W);
  }
  const { vector, flagNames } = errorVector(c, W, new Map(results.map((r, i) => [i, r])), replicatedMean);
  return errorsFrom(
    c,
    W,
    results.map((r) => r.value),
    vector,
    flagNames,
  );
}

/** Whether every error is within `tolerance` and no detached input or state got a gradient. */
export function errorsPass(e: CaseErrors, tolerance: number): boolean {
  return [e.loss, e.rankLoss ?? 0, e.grad, e.outputs ?? 0, e.stateAfter ?? 0].every((x) => x <= tolerance) && e.detached.length === 0;
}

/** The outcome for one case. */
export interface LossCheckResult {
  /** The case's name and loss. */
  name: string;
  loss: string;
  status: 'passed' | 'failed' | 'skipped';
  passed: boolean;
  /** Why it was skipped. */
  reason?: string;
  N: number;
  /** The mean over ranks of the per-rank losses (float32), and the case's loss. */
  value?: number;
  expected?: number;
  /** Every rank's loss, in rank order. */
  rankValues?: number[];
  errors?: CaseErrors;
}

/** The outcome of a file of cases on W ranks (the same on every rank but `rank`). */
export interface LossCaseReport {
  source: string;
  rank: number;
  worldSize: number;
  tolerance: number;
  results: LossCheckResult[];
  /** True when no case failed (skipped ones do not count). */
  passed: boolean;
}

export interface CheckLossCaseOptions {
  /** Relative tolerance of every error; default 1e-4. */
  tolerance?: number;
  /** Only the cases of these names (default: all). */
  only?: readonly string[];
}

/** max over ranks, element-wise; NaN counts as Infinity. */
function maxOverRanks(values: number[], group: ProcessGroup | undefined): number[] {
  const safe = values.map((v) => (Number.isNaN(v) ? Infinity : v));
  if (!group || group.worldSize === 1) return safe;
  const buf = Float32Array.from(safe);
  group.allReduce(buf, 'max');
  return Array.from(buf);
}

/**
 * Checks every case of `file` on this rank of `group` (undefined: one process): rank r takes
 * its slices (docs/loss-case.md), runs the loss with the distributed implementation and
 * compares with the reference; the errors are combined over ranks (every rank must call this
 * with the same file and options). Cases of a loss ssl-zoo does not have are skipped; a case
 * it cannot run (a missing input, state entry or hyper-parameter), and a case whose N the
 * world size does not divide, is a `UserError` naming it, thrown before any case runs.
 */
export function checkLossCases(file: LossCaseFile, options: CheckLossCaseOptions = {}, group?: ProcessGroup): LossCaseReport {
  const tolerance = options.tolerance ?? 1e-4;
  const W = group?.worldSize ?? 1;
  const rank = group?.rank ?? 0;
  const cases = file.cases.filter((c) => !options.only || options.only.includes(c.name));
  for (const c of cases) {
    const spec = caseLossSpec(c.loss);
    const problem = spec && caseProblem(c, spec);
    if (problem) throw new UserError(`loss case ${c.source}: case ${c.name}: ${problem}`);
    if (c.N % W !== 0) {
      throw new UserError(
        `loss case ${c.source}: case ${c.name}: N = ${c.N} rows cannot be split evenly over W = ${W} processes (--devices ${W}); use a number of processes that divides N`,
      );
    }
  }
  const results = cases.map((c): LossCheckResult => {
    const base = { name: c.name, loss: c.loss, N: c.N, passed: false };
    if (!caseLossSpec(c.loss)) return { ...base, status: 'skipped', reason: `ssl-zoo has no loss ${JSON.stringify(c.loss)}` };
    let res: RankResult;
    try {
      res = evaluateLossCase(c, rank, W, group);
    } catch (err) {
      if (err instanceof UserError) throw err;
      throw new UserError(`loss case ${c.source}: case ${c.name}: the ${c.loss} loss cannot run on its inputs: ${(err as Error).message}`);
    }
    const rankValues = !group || W === 1 ? [res.value] : Array.from(group.allGather(Float32Array.of(res.value)));
    const replicatedMean: Record<string, number[]> = {};
    for (const [k, t] of Object.entries(c.inputs)) {
      if (t.batchAxis !== null || t.dtype !== 'float32') continue;
      const sum = Float32Array.from(res.grads[k]!);
      if (group && W > 1) group.allReduce(sum, 'sum');
      replicatedMean[k] = Array.from(sum, (g) => g / W);
    }
    const { vector, flagNames } = errorVector(c, W, new Map([[rank, res]]), replicatedMean);
    const errors = errorsFrom(c, W, rankValues, maxOverRanks(vector, group), flagNames);
    const passed = errorsPass(errors, tolerance);
    const value = rankValues.reduce((s, v) => s + v, 0) / W;
    return { ...base, status: passed ? 'passed' : 'failed', passed, value, expected: c.expected.loss, rankValues, errors };
  });
  return { source: file.source, rank, worldSize: W, tolerance, results, passed: results.every((r) => r.status !== 'failed') };
}
