// Over 400 lines: the ssl-loss-oracle/1 format in one place: its parser, its validation with field-naming errors, and the evaluation of every loss kind it names.
/**
 * Loss reference cases, format `ssl-loss-oracle/1` (see docs/loss-case.md): embeddings and
 * the float64 values and gradients of each loss on them, from an independent PyTorch
 * implementation (scripts/gen_loss_fixtures.py writes some). {@link loadLossCase} reads and
 * validates a file; {@link checkLossCase} recomputes every implemented loss on this rank's
 * rows and compares. `ssl-train verify --case FILE` is built on these two.
 */
import { readFileSync } from 'node:fs';
import { UserError } from '../core/errors.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { barlowTwinsLoss } from '../losses/barlow-twins.js';
import { byolLoss } from '../losses/byol.js';
import { ntXentLoss } from '../losses/nt-xent.js';
import { vicregLoss } from '../losses/vicreg.js';

/** The format tag a case file must carry. */
export const LOSS_CASE_FORMAT = 'ssl-loss-oracle/1';

/** Row-major `[N][D]` numbers. */
export type Matrix = number[][];

/** Hyper-parameters of a case, named as in the file. */
export interface LossCaseHyper {
  /** SimCLR τ. */
  temperature?: number;
  /** Barlow Twins λ, scale and variance eps. */
  lambd?: number;
  scale?: number;
  bt_eps?: number;
  /** VICReg weights, γ and variance eps. */
  sim_w?: number;
  var_w?: number;
  cov_w?: number;
  gamma?: number;
  vic_eps?: number;
  /** Anything else the file holds (kept, unused). */
  [other: string]: number | undefined;
}

/** The inputs, each `[N][D]`: `z1`, `z2` always; `p1`, `p2` when the case has BYOL. */
export interface LossCaseInputs {
  z1: Matrix;
  z2: Matrix;
  p1?: Matrix;
  p2?: Matrix;
  [other: string]: Matrix | undefined;
}

/** One loss of a case: the global value and its gradient with respect to each input. */
export interface LossCaseEntry {
  loss: number;
  /** `[N][D]` per input name. */
  grad: Record<string, Matrix>;
  terms?: Record<string, number>;
}

/** The optional `distributed` block: the per-rank losses for one world size. */
export interface LossCaseDistributed {
  worldSize: number;
  /** Loss name -> `[worldSize]` per-rank losses (their mean is the global loss). */
  perRankLoss: Record<string, number[]>;
}

/** A validated case. */
export interface LossCase {
  /** Where it came from (a path, or a label), for messages. */
  source: string;
  format: typeof LOSS_CASE_FORMAT;
  N: number;
  D: number;
  seed?: number;
  hyper: LossCaseHyper;
  conventions: Record<string, string>;
  inputs: LossCaseInputs;
  /** Every loss of the file, implemented by ssl-zoo or not (the others are skipped). */
  losses: Record<string, LossCaseEntry>;
  distributed?: LossCaseDistributed;
}

interface LossSpec {
  /** Inputs the loss takes, in order; gradients are expected for each. */
  inputs: readonly string[];
  /** Hyper-parameters it needs. */
  hyper: readonly (keyof LossCaseHyper & string)[];
  run(x: Record<string, tf.Tensor2D>, h: LossCaseHyper, group: ProcessGroup | undefined): Scalar;
}

const SPECS = {
  simclr: {
    inputs: ['z1', 'z2'],
    hyper: ['temperature'],
    run: (x, h, group) => ntXentLoss(x.z1, x.z2, { temperature: hyperValue(h, 'temperature') }, group),
  },
  barlow: {
    inputs: ['z1', 'z2'],
    hyper: ['lambd', 'scale', 'bt_eps'],
    run: (x, h, group) => barlowTwinsLoss(x.z1, x.z2, { lambd: hyperValue(h, 'lambd'), scale: hyperValue(h, 'scale'), eps: hyperValue(h, 'bt_eps') }, group),
  },
  byol: {
    inputs: ['p1', 'p2', 'z1', 'z2'],
    hyper: [],
    run: (x, _h, group) => byolLoss(x.p1, x.p2, x.z1, x.z2, group),
  },
  vicreg: {
    inputs: ['z1', 'z2'],
    hyper: ['sim_w', 'var_w', 'cov_w', 'gamma', 'vic_eps'],
    run: (x, h, group) =>
      vicregLoss(
        x.z1,
        x.z2,
        {
          simWeight: hyperValue(h, 'sim_w'),
          varWeight: hyperValue(h, 'var_w'),
          covWeight: hyperValue(h, 'cov_w'),
          gamma: hyperValue(h, 'gamma'),
          eps: hyperValue(h, 'vic_eps'),
        },
        group,
      ),
  },
} satisfies Record<string, LossSpec>;

/** The case losses ssl-zoo implements (others in a file are reported as skipped). */
export const CASE_LOSS_NAMES = Object.keys(SPECS) as CaseLossName[];
export type CaseLossName = keyof typeof SPECS;

function isCaseLossName(name: string): name is CaseLossName {
  return Object.prototype.hasOwnProperty.call(SPECS, name);
}

function hyperValue(h: LossCaseHyper, key: string): number {
  const v = h[key];
  if (v === undefined) throw new Error(`hyper.${key} missing (parseLossCase should have caught it)`);
  return v;
}

// ----------------------------------------------------------------------------- parsing

type Json = unknown;

class CaseReader {
  constructor(readonly source: string) {}

  fail(field: string, problem: string): never {
    throw new UserError(`loss case ${this.source}: ${field}: ${problem}`);
  }

  describe(v: Json): string {
    if (v === undefined) return 'nothing (missing)';
    if (Array.isArray(v)) return `an array of ${v.length}`;
    if (v === null) return 'null';
    if (typeof v === 'object') return 'an object';
    const text = JSON.stringify(v);
    return `${typeof v} ${text.length > 40 ? text.slice(0, 40) + '…' : text}`;
  }

  object(v: Json, field: string): Record<string, Json> {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      this.fail(field, `expected an object, got ${this.describe(v)}`);
    }
    return v as Record<string, Json>;
  }

  number(v: Json, field: string): number {
    if (typeof v !== 'number' || !Number.isFinite(v)) this.fail(field, `expected a finite number, got ${this.describe(v)}`);
    return v;
  }

  positiveInt(v: Json, field: string): number {
    const n = this.number(v, field);
    if (!Number.isInteger(n) || n < 1) this.fail(field, `expected a positive integer, got ${n}`);
    return n;
  }

  string(v: Json, field: string): string {
    if (typeof v !== 'string') this.fail(field, `expected a string, got ${this.describe(v)}`);
    return v;
  }

  numbers(v: Json, field: string, length: number, what: string): number[] {
    if (!Array.isArray(v)) this.fail(field, `expected an array of ${length} numbers (${what}), got ${this.describe(v)}`);
    if (v.length !== length) this.fail(field, `expected ${length} numbers (${what}), got ${v.length}`);
    return v.map((x, i) => this.number(x, `${field}[${i}]`));
  }

  matrix(v: Json, field: string, n: number, d: number): Matrix {
    if (!Array.isArray(v)) this.fail(field, `expected an [N][D] = [${n}][${d}] array, got ${this.describe(v)}`);
    if (v.length !== n) this.fail(field, `expected N = ${n} rows, got ${v.length}`);
    return v.map((row, i) => this.numbers(row, `${field}[${i}]`, d, 'D'));
  }
}

/**
 * Validates parsed JSON as an `ssl-loss-oracle/1` case and returns it typed. Throws a
 * `UserError` naming the file and the field (e.g. `losses.simclr.grad.z1[3]`) when malformed.
 * `source` labels the messages (the file path).
 */
export function parseLossCase(json: unknown, source = '<case>'): LossCase {
  const r = new CaseReader(source);
  const root = r.object(json, '(top level)');
  const format = r.string(root.format, 'format');
  if (format !== LOSS_CASE_FORMAT) {
    r.fail('format', `${JSON.stringify(format)} is not supported; expected ${JSON.stringify(LOSS_CASE_FORMAT)}`);
  }
  const N = r.positiveInt(root.N, 'N');
  const D = r.positiveInt(root.D, 'D');
  const seed = root.seed === undefined ? undefined : r.number(root.seed, 'seed');

  const hyperJson = r.object(root.hyper, 'hyper');
  const hyper: LossCaseHyper = {};
  for (const [k, v] of Object.entries(hyperJson)) hyper[k] = r.number(v, `hyper.${k}`);

  const conventions: Record<string, string> = {};
  if (root.conventions !== undefined) {
    for (const [k, v] of Object.entries(r.object(root.conventions, 'conventions'))) {
      conventions[k] = r.string(v, `conventions.${k}`);
    }
  }

  const inputsJson = r.object(root.inputs, 'inputs');
  for (const k of ['z1', 'z2']) if (!(k in inputsJson)) r.fail(`inputs.${k}`, 'missing');
  const inputs: LossCaseInputs = { z1: [], z2: [] };
  for (const [k, v] of Object.entries(inputsJson)) inputs[k] = r.matrix(v, `inputs.${k}`, N, D);

  const lossesJson = r.object(root.losses, 'losses');
  if (Object.keys(lossesJson).length === 0) r.fail('losses', 'no losses in the case');
  const losses: Record<string, LossCaseEntry> = {};
  for (const [name, entryJson] of Object.entries(lossesJson)) {
    const field = `losses.${name}`;
    const e = r.object(entryJson, field);
    const loss = r.number(e.loss, `${field}.loss`);
    const spec: LossSpec | undefined = isCaseLossName(name) ? SPECS[name] : undefined;
    for (const k of spec?.inputs ?? []) {
      if (inputs[k] === undefined) r.fail(`inputs.${k}`, `missing (needed by ${field})`);
    }
    const grad: Record<string, Matrix> = {};
    for (const [k, g] of Object.entries(r.object(e.grad, `${field}.grad`))) {
      if (inputs[k] === undefined) r.fail(`${field}.grad.${k}`, `no input named ${JSON.stringify(k)} in inputs`);
      grad[k] = r.matrix(g, `${field}.grad.${k}`, N, D);
    }
    let terms: Record<string, number> | undefined;
    if (e.terms !== undefined) {
      terms = {};
      for (const [k, t] of Object.entries(r.object(e.terms, `${field}.terms`))) {
        terms[k] = r.number(t, `${field}.terms.${k}`);
      }
    }
    if (spec) {
      for (const k of spec.inputs) if (grad[k] === undefined) r.fail(`${field}.grad.${k}`, 'missing');
      for (const k of spec.hyper) if (hyper[k] === undefined) r.fail(`hyper.${k}`, `missing (needed by ${field})`);
    }
    losses[name] = terms ? { loss, grad, terms } : { loss, grad };
  }

  let distributed: LossCaseDistributed | undefined;
  if (root.distributed !== undefined) {
    const dj = r.object(root.distributed, 'distributed');
    const worldSize = r.positiveInt(dj.world_size, 'distributed.world_size');
    if (N % worldSize !== 0) r.fail('distributed.world_size', `${worldSize} does not divide N = ${N}`);
    const perRankLoss: Record<string, number[]> = {};
    if (dj.per_rank_loss !== undefined) {
      for (const [k, v] of Object.entries(r.object(dj.per_rank_loss, 'distributed.per_rank_loss'))) {
        perRankLoss[k] = r.numbers(v, `distributed.per_rank_loss.${k}`, worldSize, 'one per rank');
      }
    }
    distributed = { worldSize, perRankLoss };
  }

  return { source, format: LOSS_CASE_FORMAT, N, D, seed, hyper, conventions, inputs, losses, distributed };
}

/** Reads and validates a case file; every problem is a `UserError` naming the file and field. */
export function loadLossCase(path: string): LossCase {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new UserError(`loss case ${path}: cannot read the file (${code})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UserError(`loss case ${path}: not valid JSON (${(err as Error).message})`);
  }
  return parseLossCase(json, path);
}

// ----------------------------------------------------------------------------- checking

/** The outcome for one loss of a case. */
export interface LossCheckResult {
  name: string;
  status: 'passed' | 'failed' | 'skipped';
  /** `status === 'passed'`. */
  passed: boolean;
  /** Why it was skipped. */
  reason?: string;
  /** The mean over ranks of the per-rank losses (float32), and the case's global loss. */
  value?: number;
  expected?: number;
  /** Every rank's loss, in rank order (float32). */
  rankValues?: number[];
  /** |value − expected| / max(|expected|, 1e-6). */
  lossError?: number;
  /** max |grad/W − expected| over all rows / max |expected grad entry| (all inputs). */
  gradError?: number;
  /**
   * When the case's `distributed.world_size` equals the world size: max over ranks of
   * |loss_r − per_rank_loss[r]| / max(|per_rank_loss[r]|, 1e-6).
   */
  rankLossError?: number;
}

/**
 * The outcome of a whole case on W ranks. Errors are reduced (max) over ranks, so every field
 * but `rank` is the same on every rank.
 */
export interface LossCaseReport {
  source: string;
  /** The rank that produced this copy of the report. */
  rank: number;
  worldSize: number;
  /** B = N / W: rank r held rows `r·B .. r·B + B − 1`. */
  rowsPerRank: number;
  /** The case's `distributed.world_size` (per-rank losses are compared only when it equals W). */
  caseWorldSize?: number;
  tolerance: number;
  results: LossCheckResult[];
  /** True when no implemented loss failed (skipped ones do not count). */
  passed: boolean;
}

export interface CheckLossCaseOptions {
  /** Relative tolerance of every error; default 1e-4. */
  tolerance?: number;
  /** Compare gradients too (default true); false checks values only. */
  gradients?: boolean;
  /** Only these losses (default: every loss in the case). */
  only?: readonly string[];
}

const REL_FLOOR = 1e-6;

/**
 * Recomputes each loss of `lossCase` in float32 on this rank's rows and compares it with the
 * case. Rank r of W takes rows `r·B .. r·B + B − 1` (B = N / W) of every input, computes the
 * loss and the gradients w.r.t. its local rows, and compares the mean over ranks of the
 * losses with `losses.<name>.loss` and its gradient divided by W (DDP averaging) with the
 * matching rows of `losses.<name>.grad` (see docs/loss-case.md). With W > 1 every rank must
 * call this with the same case and options (it runs collectives to combine the errors).
 * Losses ssl-zoo does not implement are skipped.
 */
export function checkLossCase(lossCase: LossCase, options: CheckLossCaseOptions = {}, group?: ProcessGroup): LossCaseReport {
  const tolerance = options.tolerance ?? 1e-4;
  const withGradients = options.gradients ?? true;
  const worldSize = group?.worldSize ?? 1;
  const rank = group?.rank ?? 0;
  if (lossCase.N % worldSize !== 0) {
    throw new UserError(
      `loss case ${lossCase.source}: N = ${lossCase.N} rows cannot be split evenly over W = ${worldSize} ` +
        `processes (--devices ${worldSize}); use a number of processes that divides N`,
    );
  }
  const b = lossCase.N / worldSize;
  const results: LossCheckResult[] = [];
  for (const [name, entry] of Object.entries(lossCase.losses)) {
    if (options.only && !options.only.includes(name)) continue;
    if (!isCaseLossName(name)) {
      results.push({ name, status: 'skipped', passed: false, reason: 'not implemented by ssl-zoo' });
      continue;
    }
    const spec: LossSpec = SPECS[name];
    const local = evaluate(lossCase, spec, rank * b, b, withGradients, group);
    const expected = entry.loss;
    const rankValues = gatherOverRanks(local.value, group);
    const value = rankValues.reduce((a, v) => a + v, 0) / worldSize;
    const errors: number[] = [Math.abs(value - expected) / Math.max(Math.abs(expected), REL_FLOOR)];
    if (withGradients) {
      let refMax = 0;
      for (const k of spec.inputs) for (const row of entry.grad[k]) for (const g of row) refMax = Math.max(refMax, Math.abs(g));
      let diffMax = 0;
      spec.inputs.forEach((k, i) => {
        const ref = entry.grad[k];
        const mine = local.grads[i];
        for (let row = 0; row < b; row++) {
          for (let j = 0; j < lossCase.D; j++) {
            const d = Math.abs(mine[row * lossCase.D + j] / worldSize - ref[rank * b + row][j]);
            diffMax = Math.max(diffMax, d);
          }
        }
      });
      errors.push(diffMax / Math.max(refMax, Number.MIN_VALUE));
    }
    const perRank = lossCase.distributed?.worldSize === worldSize ? lossCase.distributed.perRankLoss[name] : undefined;
    if (perRank) {
      const ref = perRank[rank];
      errors.push(Math.abs(local.value - ref) / Math.max(Math.abs(ref), REL_FLOOR));
    }
    const worst = reduceOverRanks(errors, 'max', group);
    const result: LossCheckResult = {
      name,
      status: 'failed',
      passed: false,
      value,
      expected,
      rankValues,
      lossError: worst[0],
    };
    if (withGradients) result.gradError = worst[1];
    if (perRank) result.rankLossError = worst[worst.length - 1];
    result.passed = worst.every((e) => e <= tolerance);
    result.status = result.passed ? 'passed' : 'failed';
    results.push(result);
  }
  return {
    source: lossCase.source,
    rank,
    worldSize,
    rowsPerRank: b,
    ...(lossCase.distributed ? { caseWorldSize: lossCase.distributed.worldSize } : {}),
    tolerance,
    results,
    passed: results.every((r) => r.status !== 'failed'),
  };
}

/** This rank's loss value and (optionally) gradients, flattened `[B·D]` per spec input. */
function evaluate(
  lossCase: LossCase,
  spec: LossSpec,
  firstRow: number,
  rows: number,
  withGradients: boolean,
  group: ProcessGroup | undefined,
): { value: number; grads: Float32Array[] } {
  const tensors = spec.inputs.map((k) => {
    const m = lossCase.inputs[k];
    if (m === undefined) throw new Error(`inputs.${k} missing (parseLossCase should have caught it)`);
    return tf.tensor2d(m.slice(firstRow, firstRow + rows), [rows, lossCase.D], 'float32');
  });
  const f = (...xs: Tensor[]): Scalar => {
    const named: Record<string, tf.Tensor2D> = {};
    spec.inputs.forEach((k, i) => (named[k] = xs[i] as tf.Tensor2D));
    return spec.run(named, lossCase.hyper, group);
  };
  try {
    if (!withGradients) {
      const v = f(...tensors);
      const value = v.dataSync()[0];
      v.dispose();
      return { value, grads: [] };
    }
    const { value, grads } = tf.valueAndGrads(f)(tensors);
    const out = { value: value.dataSync()[0], grads: grads.map((g) => Float32Array.from(g.dataSync())) };
    tf.dispose([value, ...grads]);
    return out;
  } finally {
    tf.dispose(tensors);
  }
}

/**
 * Element-wise max of small arrays of errors over ranks (plain, non-differentiable
 * collective). NaN counts as +Infinity, so a rank with a NaN error fails everywhere.
 */
function reduceOverRanks(values: number[], op: 'max', group: ProcessGroup | undefined): number[] {
  const safe = values.map((v) => (Number.isNaN(v) ? Infinity : v));
  if (!group || group.worldSize === 1) return safe;
  const buf = Float32Array.from(safe);
  group.allReduce(buf, op);
  return Array.from(buf);
}

/** Every rank's `value`, in rank order. */
function gatherOverRanks(value: number, group: ProcessGroup | undefined): number[] {
  if (!group || group.worldSize === 1) return [value];
  return Array.from(group.allGather(Float32Array.of(value)));
}
