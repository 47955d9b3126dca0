/**
 * The `ssl-zoo-loss/1` reference files of the zoo losses (scripts/gen_zoo_loss_fixtures.py,
 * tests/fixtures/losses/zoo-*.json): loading, the inputs of one rank, the call of each loss
 * with the file's hyper-parameters, and the loss and input gradients of one rank. Shared by
 * tests/losses/zoo-fixtures.test.ts (one process) and tests/distributed/zoo-losses.test.ts
 * (its worker runs the same evaluation on W real processes).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { dclLoss, mocoLoss, mocov3Loss, negativeCosineLoss, nnclrLoss, resslLoss, supconLoss } from '../../src/losses/index.js';
import { FIXTURE_DIR } from './helpers.js';

export const ZOO_FORMAT = 'ssl-zoo-loss/1';
/** The losses with a reference file `zoo-<name>.json`. */
export const ZOO_LOSSES = ['moco', 'mocov3', 'simsiam', 'nnclr', 'supcon', 'ressl', 'dcl', 'dclw'] as const;
export type ZooLoss = (typeof ZOO_LOSSES)[number];

export interface ZooInput {
  shape: number[];
  /** Split by rows over ranks (the batch); else the same on every rank (a queue). */
  sharded: boolean;
  dtype: 'float32' | 'int32';
  data: number[];
}

/** A reference file of either generator (scripts/gen_zoo_loss_fixtures.py, scripts/gen_zoo2_loss_fixtures.py). */
export interface ZooCaseFile {
  format: string;
  loss: string;
  hyper: Record<string, number>;
  N: number;
  inputs: Record<string, ZooInput>;
  loss_value: number;
  /** ∂loss/∂input of every float32 input, flattened (zeros for detached / constant inputs). */
  grads: Record<string, number[]>;
  /** Per world size: rank r's loss. */
  per_rank: Record<string, number[]>;
  /** Values other than the loss, of the global batch (zoo2 files only): sharded ones by rows. */
  outputs?: Record<string, ZooOutput>;
}

export interface ZooOutput {
  shape: number[];
  sharded: boolean;
  data: number[];
}

export interface ZooCase extends ZooCaseFile {
  loss: ZooLoss;
}

export function zooFixturePath(loss: string): string {
  return join(FIXTURE_DIR, `zoo-${loss}.json`);
}

export function loadZooCase(path: string): ZooCase {
  const c = JSON.parse(readFileSync(path, 'utf8')) as ZooCase;
  if (c.format !== ZOO_FORMAT) throw new Error(`${path}: format ${JSON.stringify(c.format)}, expected ${ZOO_FORMAT}`);
  if (!(ZOO_LOSSES as readonly string[]).includes(c.loss)) throw new Error(`${path}: unknown loss ${c.loss}`);
  return c;
}

/** Names of the float32 inputs (the ones with gradients), in file order. */
export function floatInputs(c: ZooCaseFile): string[] {
  return Object.keys(c.inputs).filter((k) => c.inputs[k]!.dtype === 'float32');
}

/** Rank r's inputs in a job of W ranks: rows r·B .. r·B+B−1 of the sharded ones, all of the others. */
export function rankInputs(c: ZooCaseFile, rank: number, worldSize: number): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  for (const [name, input] of Object.entries(c.inputs)) {
    const rows = input.shape[0]!;
    const rowLen = input.data.length / rows;
    const b = input.sharded ? rows / worldSize : rows;
    const first = input.sharded ? rank * b : 0;
    if (!Number.isInteger(b)) throw new Error(`${name}: ${rows} rows do not split over ${worldSize} ranks`);
    const data = input.data.slice(first * rowLen, (first + b) * rowLen);
    out[name] = tf.tensor(data, [b, ...input.shape.slice(1)], input.dtype);
  }
  return out;
}

function hyper(c: ZooCase, key: string): number {
  const v = c.hyper[key];
  if (v === undefined) throw new Error(`${c.loss}: hyper.${key} missing`);
  return v;
}

type T2 = tf.Tensor2D;

/** The file's loss of the inputs `x` (by name) with its hyper-parameters, on `group`. */
export function callZooLoss(c: ZooCase, x: Record<string, Tensor>, group: ProcessGroup | undefined): Scalar {
  switch (c.loss) {
    case 'moco':
      return mocoLoss(x.query as T2, x.key as T2, x.queue as T2, { temperature: hyper(c, 'temperature') }, group);
    case 'mocov3':
      return mocov3Loss(x.query as T2, x.key as T2, { temperature: hyper(c, 'temperature') }, group);
    case 'simsiam':
      return negativeCosineLoss(x.p as T2, x.z as T2, group);
    case 'nnclr':
      return nnclrLoss(x.neighbours as T2, x.predictions as T2, { temperature: hyper(c, 'temperature') }, group);
    case 'supcon': {
      const views = Object.keys(x)
        .filter((k) => k.startsWith('view'))
        .sort()
        .map((k) => x[k] as T2);
      return supconLoss(views, x.labels as tf.Tensor1D, { temperature: hyper(c, 'temperature') }, group);
    }
    case 'ressl':
      return resslLoss(x.q as T2, x.k as T2, x.queue as T2, { temperatureQ: hyper(c, 'temperatureQ'), temperatureK: hyper(c, 'temperatureK') }, group);
    case 'dcl':
      return dclLoss(x.z1 as T2, x.z2 as T2, { temperature: hyper(c, 'temperature') }, group);
    case 'dclw':
      return dclLoss(x.z1 as T2, x.z2 as T2, { temperature: hyper(c, 'temperature'), sigma: hyper(c, 'sigma') }, group);
  }
}

/**
 * A loss of named inputs (the real one, or a deliberately wrong variant in the tests): the
 * scalar, or the scalar with named outputs (Sinkhorn assignments, DINO's new centre).
 */
export type ZooLossFn<C extends ZooCaseFile = ZooCase> = (
  c: C,
  x: Record<string, Tensor>,
  group: ProcessGroup | undefined,
) => Scalar | { loss: Scalar; outputs: Record<string, Tensor> };

/** One rank's loss, its gradients on this rank's float32 inputs and its outputs (flattened). */
export interface ZooRankResult {
  value: number;
  grads: Record<string, number[]>;
  outputs: Record<string, number[]>;
}

/** Evaluates `fn` (default: the file's loss) on rank `rank`'s inputs: value and input gradients. */
export function evaluateZooCase(c: ZooCase, rank: number, worldSize: number, group: ProcessGroup | undefined, fn: ZooLossFn = callZooLoss): ZooRankResult {
  return evaluateCase(c, rank, worldSize, group, fn);
}

/** {@link evaluateZooCase} for a case file of either generator and its loss function `fn`. */
export function evaluateCase<C extends ZooCaseFile>(c: C, rank: number, worldSize: number, group: ProcessGroup | undefined, fn: ZooLossFn<C>): ZooRankResult {
  const x = rankInputs(c, rank, worldSize);
  const names = floatInputs(c);
  const outputs: Record<string, number[]> = {};
  try {
    const f = (...a: Tensor[]) => {
      const named = { ...x };
      names.forEach((k, i) => (named[k] = a[i]!));
      const result = fn(c, named, group);
      if (!('outputs' in result)) return result;
      for (const [k, t] of Object.entries(result.outputs)) outputs[k] = Array.from(t.dataSync());
      tf.dispose(Object.values(result.outputs));
      return result.loss;
    };
    const { value, grads } = tf.valueAndGrads(f)(names.map((k) => x[k]!));
    const out: ZooRankResult = { value: value.dataSync()[0]!, grads: {}, outputs };
    names.forEach((k, i) => (out.grads[k] = Array.from(grads[i]!.dataSync())));
    tf.dispose([value, ...grads]);
    return out;
  } finally {
    tf.dispose(Object.values(x));
  }
}

/** max |a − b| / scale (scale: the largest |entry| of the reference; 0 means "must be exactly equal"). */
export function scaledError(a: ArrayLike<number>, b: ArrayLike<number>, scale: number): number {
  if (a.length !== b.length) throw new Error(`length mismatch: ${a.length} vs ${b.length}`);
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (Number.isNaN(d)) return Infinity;
    diff = Math.max(diff, d);
  }
  return scale > 0 ? diff / scale : diff === 0 ? 0 : Infinity;
}

export function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

/** How far W ranks' answers are from a reference file (see {@link checkRanks}). */
export interface RankCheckErrors {
  /** max over ranks of |loss_r − per_rank[W][r]| / |per_rank[W][r]|. */
  rankLoss: number;
  /** |mean_r loss_r − loss| / |loss|. */
  meanLoss: number;
  /** max over inputs and ranks of the local-row gradient / W against the reference rows (scaled by the largest reference entry of that input). */
  grad: number;
  /** Inputs with a zero reference gradient whose gradient is not exactly 0 on some rank. */
  nonZeroDetached: string[];
  /** max over the file's outputs and ranks of rank r's output (its rows if sharded) against the reference, scaled by the largest reference entry. */
  outputs: number;
}

/** The check of one loss with W ranks: `results[r]` is rank r's answer, `c` the reference file. */
export function checkRanks(c: ZooCaseFile, results: ZooRankResult[]): RankCheckErrors {
  const W = results.length;
  const perRank = c.per_rank[String(W)]!;
  const e: RankCheckErrors = { rankLoss: 0, meanLoss: 0, grad: 0, nonZeroDetached: [], outputs: 0 };
  results.forEach((res, r) => (e.rankLoss = Math.max(e.rankLoss, Math.abs(res.value - perRank[r]!) / Math.abs(perRank[r]!))));
  const mean = results.reduce((s, res) => s + res.value, 0) / W;
  e.meanLoss = Math.abs(mean - c.loss_value) / Math.abs(c.loss_value);
  for (const [name, ref] of Object.entries(c.grads)) {
    const input = c.inputs[name]!;
    const scale = maxAbs(ref);
    if (scale === 0) {
      if (results.some((res) => res.grads[name]!.some((g) => g !== 0))) e.nonZeroDetached.push(name);
      continue;
    }
    if (input.sharded) {
      const rowLen = ref.length / W;
      results.forEach((res, r) => {
        const mine = res.grads[name]!.map((g) => g / W);
        e.grad = Math.max(e.grad, scaledError(mine, ref.slice(r * rowLen, (r + 1) * rowLen), scale));
      });
    } else {
      // The same input on every rank: the global gradient is the mean over ranks of theirs.
      const mean = ref.map((_, k) => results.reduce((s, res) => s + res.grads[name]![k]!, 0) / W);
      e.grad = Math.max(e.grad, scaledError(mean, ref, scale));
    }
  }
  for (const [name, ref] of Object.entries(c.outputs ?? {})) {
    const rowLen = ref.sharded ? ref.data.length / W : 0;
    results.forEach((res, r) => {
      const expected = ref.sharded ? ref.data.slice(r * rowLen, (r + 1) * rowLen) : ref.data;
      const mine = res.outputs[name];
      e.outputs = Math.max(e.outputs, mine ? scaledError(mine, expected, maxAbs(ref.data)) : Infinity);
    });
  }
  for (const k of ['rankLoss', 'meanLoss', 'grad', 'outputs'] as const) if (Number.isNaN(e[k])) e[k] = Infinity;
  return e;
}
