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

export interface ZooCase {
  format: string;
  loss: ZooLoss;
  hyper: Record<string, number>;
  N: number;
  inputs: Record<string, ZooInput>;
  loss_value: number;
  /** ∂loss/∂input of every float32 input, flattened (zeros for detached / constant inputs). */
  grads: Record<string, number[]>;
  /** Per world size: rank r's loss. */
  per_rank: Record<string, number[]>;
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
export function floatInputs(c: ZooCase): string[] {
  return Object.keys(c.inputs).filter((k) => c.inputs[k]!.dtype === 'float32');
}

/** Rank r's inputs in a job of W ranks: rows r·B .. r·B+B−1 of the sharded ones, all of the others. */
export function rankInputs(c: ZooCase, rank: number, worldSize: number): Record<string, Tensor> {
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

/** A loss of named inputs (the real one, or a deliberately wrong variant in the tests). */
export type ZooLossFn = (c: ZooCase, x: Record<string, Tensor>, group: ProcessGroup | undefined) => Scalar;

/** One rank's loss and its gradients on this rank's float32 inputs (flattened). */
export interface ZooRankResult {
  value: number;
  grads: Record<string, number[]>;
}

/** Evaluates `fn` (default: the file's loss) on rank `rank`'s inputs: value and input gradients. */
export function evaluateZooCase(c: ZooCase, rank: number, worldSize: number, group: ProcessGroup | undefined, fn: ZooLossFn = callZooLoss): ZooRankResult {
  const x = rankInputs(c, rank, worldSize);
  const names = floatInputs(c);
  try {
    const f = (...a: Tensor[]) => {
      const named = { ...x };
      names.forEach((k, i) => (named[k] = a[i]!));
      return fn(c, named, group);
    };
    const { value, grads } = tf.valueAndGrads(f)(names.map((k) => x[k]!));
    const out: ZooRankResult = { value: value.dataSync()[0]!, grads: {} };
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
