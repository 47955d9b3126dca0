/**
 * The loss-reference format `ssl-loss-oracle/2` (docs/loss-case.md): a file of cases, each one
 * loss of the zoo on a global batch of N samples, with its inputs, its state before the step
 * (queues, DINO's centre), its hyper-parameters and the float64 expected loss, gradients,
 * per-rank losses, outputs and state after. {@link parseLossCaseFile} validates parsed JSON
 * (every problem a `UserError` naming the file and the field), {@link loadLossCases} reads a
 * file or every `*.json` of a directory. Files of the older `ssl-loss-oracle/1` format are read
 * too (./loss-case-v1.ts converts them).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import { CaseReader } from './loss-case-reader.js';
import { LEGACY_LOSS_CASE_FORMAT, parseLegacyLossCase } from './loss-case-v1.js';

/** The format tag of a file. */
export const LOSS_CASE_FORMAT = 'ssl-loss-oracle/2';
export { LEGACY_LOSS_CASE_FORMAT };

/** A tensor of a case: an input, a state entry, an expected output or state after. */
export interface CaseTensor {
  shape: number[];
  dtype: 'float32' | 'int32';
  /** The axis of length N that is split over ranks (rank r holds r·B .. r·B+B−1 along it); null: the same on every rank. */
  batchAxis: number | null;
  /** Row-major values, `shape` product long (as read: float64). */
  data: number[];
}

/** What a case expects. Gradients are flat, in the layout of their input. */
export interface LossCaseExpected {
  /** The loss of the global batch. */
  loss: number;
  /** ∂loss/∂input for every float32 input (exact zeros for detached ones). */
  grad: Record<string, number[]>;
  /** W -> the loss of each of W ranks (their mean is `loss`). */
  perRank: Record<number, number[]>;
  /** Values the loss returns besides the scalar (SwAV's assignments), of the global batch. */
  outputs: Record<string, CaseTensor>;
  /** The state after the step (DINO's centre), the same on every rank. */
  stateAfter: Record<string, CaseTensor>;
  /** Named parts of the loss (Barlow Twins, VICReg); not checked by `verify`. */
  terms?: Record<string, number>;
}

/** One validated case. */
export interface LossCase {
  /** The file it came from, for messages. */
  source: string;
  /** Unique in its file (`dclw`, `swav-queue`). */
  name: string;
  /** Which loss of the zoo (`dcl`, `swav`); see CASE_LOSS_NAMES. */
  loss: string;
  /** The global batch size. */
  N: number;
  seed?: number;
  hyper: Record<string, number>;
  convention?: string;
  inputs: Record<string, CaseTensor>;
  /** State before the step: constants the same on every rank, never differentiated. */
  state: Record<string, CaseTensor>;
  expected: LossCaseExpected;
}

/** A validated file (or directory) of cases. */
export interface LossCaseFile {
  source: string;
  format: string;
  cases: LossCase[];
}

type Json = unknown;

function size(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** A tensor entry `{shape, dtype, batch_axis, data}`; `batched`: whether batch_axis may be set (state: no). */
function readTensor(r: CaseReader, v: Json, field: string, n: number, batched: boolean): CaseTensor {
  const o = r.object(v, field);
  if (!Array.isArray(o.shape)) r.fail(`${field}.shape`, `expected an array of positive integers, got ${r.describe(o.shape)}`);
  const shape = o.shape.map((s, i) => r.positiveInt(s, `${field}.shape[${i}]`));
  const dtype = o.dtype === undefined ? 'float32' : r.string(o.dtype, `${field}.dtype`);
  if (dtype !== 'float32' && dtype !== 'int32') r.fail(`${field}.dtype`, `${JSON.stringify(dtype)} is not allowed; expected "float32" or "int32"`);
  let batchAxis: number | null = null;
  if (o.batch_axis !== undefined && o.batch_axis !== null) {
    if (!batched) r.fail(`${field}.batch_axis`, 'state is the same on every rank: expected null or no batch_axis');
    const a = r.number(o.batch_axis, `${field}.batch_axis`);
    if (!Number.isInteger(a) || a < 0 || a >= shape.length) r.fail(`${field}.batch_axis`, `expected an axis in 0..${shape.length - 1} or null, got ${a}`);
    if (shape[a] !== n) r.fail(`${field}.shape[${a}]`, `the batch axis must have N = ${n} entries, got ${shape[a]}`);
    batchAxis = a;
  }
  const data = r.numbers(o.data, `${field}.data`, size(shape), `[${shape.join(', ')}] row-major`);
  if (dtype === 'int32') {
    const bad = data.findIndex((x) => !Number.isInteger(x));
    if (bad >= 0) r.fail(`${field}.data[${bad}]`, `expected an integer (int32), got ${data[bad]}`);
  }
  return { shape, dtype, batchAxis, data };
}

function readTensors(r: CaseReader, v: Json, field: string, n: number, batched: boolean): Record<string, CaseTensor> {
  const out: Record<string, CaseTensor> = {};
  for (const [k, t] of Object.entries(r.object(v, field))) out[k] = readTensor(r, t, `${field}.${k}`, n, batched);
  return out;
}

function readCase(r: CaseReader, v: Json, field: string): LossCase {
  const o = r.object(v, field);
  const name = r.string(o.name, `${field}.name`);
  if (name === '') r.fail(`${field}.name`, 'expected a non-empty string');
  const at = `${field} (${name})`;
  const loss = r.string(o.loss, `${at}.loss`);
  const N = r.positiveInt(o.N, `${at}.N`);
  const seed = o.seed === undefined ? undefined : r.number(o.seed, `${at}.seed`);
  const hyper: Record<string, number> = {};
  if (o.hyper !== undefined) for (const [k, h] of Object.entries(r.object(o.hyper, `${at}.hyper`))) hyper[k] = r.number(h, `${at}.hyper.${k}`);
  const convention = o.convention === undefined ? undefined : r.string(o.convention, `${at}.convention`);
  const inputs = readTensors(r, o.inputs, `${at}.inputs`, N, true);
  if (Object.keys(inputs).length === 0) r.fail(`${at}.inputs`, 'no inputs');
  if (!Object.values(inputs).some((t) => t.batchAxis !== null)) r.fail(`${at}.inputs`, 'no input has a batch_axis (nothing to split over ranks)');
  const state = o.state === undefined ? {} : readTensors(r, o.state, `${at}.state`, N, false);
  for (const k of Object.keys(state)) if (k in inputs) r.fail(`${at}.state.${k}`, 'also an input; names must be unique');

  const e = r.object(o.expected, `${at}.expected`);
  const grad: Record<string, number[]> = {};
  const gradJson = r.object(e.grad, `${at}.expected.grad`);
  for (const [k, g] of Object.entries(gradJson)) {
    const input = inputs[k];
    if (!input) r.fail(`${at}.expected.grad.${k}`, `no input named ${JSON.stringify(k)}`);
    if (input.dtype !== 'float32') r.fail(`${at}.expected.grad.${k}`, 'an int32 input has no gradient');
    grad[k] = r.numbers(g, `${at}.expected.grad.${k}`, input.data.length, `[${input.shape.join(', ')}] like the input`);
  }
  for (const [k, t] of Object.entries(inputs))
    if (t.dtype === 'float32' && !(k in grad)) r.fail(`${at}.expected.grad.${k}`, 'missing (every float32 input needs one)');
  const perRank: Record<number, number[]> = {};
  if (e.per_rank !== undefined) {
    for (const [k, p] of Object.entries(r.object(e.per_rank, `${at}.expected.per_rank`))) {
      const w = Number(k);
      if (!Number.isInteger(w) || w < 1) r.fail(`${at}.expected.per_rank.${k}`, 'keys are world sizes (positive integers)');
      if (N % w !== 0) r.fail(`${at}.expected.per_rank.${k}`, `${w} does not divide N = ${N}`);
      perRank[w] = r.numbers(p, `${at}.expected.per_rank.${k}`, w, 'one per rank');
    }
  }
  const outputs = e.outputs === undefined ? {} : readTensors(r, e.outputs, `${at}.expected.outputs`, N, true);
  const stateAfter = e.state_after === undefined ? {} : readTensors(r, e.state_after, `${at}.expected.state_after`, N, false);
  for (const [k, t] of Object.entries(stateAfter)) {
    const before = state[k];
    if (!before) r.fail(`${at}.expected.state_after.${k}`, `no state named ${JSON.stringify(k)}`);
    if (before.shape.join() !== t.shape.join())
      r.fail(`${at}.expected.state_after.${k}.shape`, `expected [${before.shape.join(', ')}] as the state before, got [${t.shape.join(', ')}]`);
  }
  let terms: Record<string, number> | undefined;
  if (e.terms !== undefined) {
    terms = {};
    for (const [k, t] of Object.entries(r.object(e.terms, `${at}.expected.terms`))) terms[k] = r.number(t, `${at}.expected.terms.${k}`);
  }
  const expected: LossCaseExpected = { loss: r.number(e.loss, `${at}.expected.loss`), grad, perRank, outputs, stateAfter, ...(terms ? { terms } : {}) };
  return { source: r.source, name, loss, N, seed, hyper, convention, inputs, state, expected };
}

/**
 * Validates parsed JSON as a case file (`ssl-loss-oracle/2`, or `/1`, converted) and returns it
 * typed. Throws a `UserError` naming the file and the field (e.g. `cases[3] (moco).expected.grad.query`).
 */
export function parseLossCaseFile(json: unknown, source = '<case>'): LossCaseFile {
  const r: CaseReader = new CaseReader(source);
  const root = r.object(json, '(top level)');
  const format = r.string(root.format, 'format');
  if (format === LEGACY_LOSS_CASE_FORMAT) return { source, format, cases: parseLegacyLossCase(root, r) };
  if (format !== LOSS_CASE_FORMAT) {
    r.fail(
      'format',
      `${JSON.stringify(format)} is not supported; expected ${JSON.stringify(LOSS_CASE_FORMAT)} (or ${JSON.stringify(LEGACY_LOSS_CASE_FORMAT)})`,
    );
  }
  const list = root.cases;
  if (!Array.isArray(list)) r.fail('cases', `expected an array of cases, got ${r.describe(list)}`);
  if (list.length === 0) r.fail('cases', 'no cases in the file');
  const cases = list.map((c, i) => readCase(r, c, `cases[${i}]`));
  const seen = new Set<string>();
  cases.forEach((c, i) => {
    if (seen.has(c.name)) r.fail(`cases[${i}].name`, `${JSON.stringify(c.name)} is used by an earlier case; names must be unique`);
    seen.add(c.name);
  });
  return { source, format, cases };
}

function readJson(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UserError(`loss case ${path}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UserError(`loss case ${path}: not valid JSON (${(err as Error).message})`);
  }
}

/**
 * Reads and validates a case file, or every `*.json` file of a directory (in name order, their
 * cases concatenated; case names must be unique across them). Every problem is a `UserError`.
 */
export function loadLossCases(path: string): LossCaseFile {
  let isDir = false;
  try {
    isDir = statSync(path).isDirectory();
  } catch {
    // not there: readJson says so
  }
  if (!isDir) return parseLossCaseFile(readJson(path), path);
  const files = readdirSync(path)
    .filter((f) => f.endsWith('.json'))
    .sort();
  if (files.length === 0) throw new UserError(`loss case ${path}: a directory without *.json case files`);
  const parsed = files.map((f) => parseLossCaseFile(readJson(join(path, f)), join(path, f)));
  const owner = new Map<string, string>();
  for (const file of parsed) {
    for (const c of file.cases) {
      const first = owner.get(c.name);
      if (first) throw new UserError(`loss case ${file.source}: case ${JSON.stringify(c.name)} is also in ${first}; names must be unique in a directory`);
      owner.set(c.name, file.source);
    }
  }
  return { source: path, format: LOSS_CASE_FORMAT, cases: parsed.flatMap((f) => f.cases) };
}

/**
 * The slice `start .. start+count−1` along `axis` of row-major `data` of `shape`, row-major.
 */
export function sliceAxis(data: ArrayLike<number>, shape: readonly number[], axis: number, start: number, count: number): number[] {
  const outer = size(shape.slice(0, axis));
  const inner = size(shape.slice(axis + 1));
  const dim = shape[axis]!;
  const out: number[] = [];
  for (let o = 0; o < outer; o++) {
    const from = (o * dim + start) * inner;
    for (let i = from; i < from + count * inner; i++) out.push(data[i]!);
  }
  return out;
}

/** What rank `rank` of `worldSize` holds of `t`: its slice along the batch axis, or all of it. */
export function rankSlice(t: CaseTensor, rank: number, worldSize: number): { shape: number[]; data: number[] } {
  if (t.batchAxis === null) return { shape: t.shape, data: t.data };
  const b = t.shape[t.batchAxis]! / worldSize;
  const shape = t.shape.slice();
  shape[t.batchAxis] = b;
  return { shape, data: sliceAxis(t.data, t.shape, t.batchAxis, rank * b, b) };
}
