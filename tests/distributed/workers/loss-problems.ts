/**
 * Shared by the distributed loss tests (tests/distributed/losses.full.test.ts) and their worker
 * (workers/loss-cases.ts): the losses of a reference case as functions of this rank's rows, the
 * shared linear map θ that stands in for a network (so that DDP's parameter-gradient
 * averaging can be checked), and deliberately WRONG distributed variants used only as
 * negative controls (they live here, in the tests, never in src).
 */
import { type Scalar, type Tensor, tf } from '../../../src/core/tf.js';
import type { ProcessGroup } from '../../../src/core/process-group.js';
import { Rng } from '../../../src/core/random.js';
import { ntXentLoss, l2NormalizeRows } from '../../../src/losses/index.js';
import { caseLossSpec, rankSlice, type LossCase } from '../../../src/verify/index.js';
import { allGather } from '../../../src/distributed/collectives.js';
import { detach } from '../../../src/core/ops.js';

/** The four losses whose DDP-averaged θ gradient the test checks (cases of the same names in cases.json). */
export const LOSS_NAMES = ['simclr', 'barlow', 'byol', 'vicreg'] as const;
/** The wrong variants (negative controls). */
export const WRONG_VARIANTS = ['simclr-local-offset', 'simclr-local-slice-gather', 'barlow-solo-learn'] as const;
export type Variant = (typeof LOSS_NAMES)[number] | (typeof WRONG_VARIANTS)[number];

/** The case (of tests/fixtures/losses/cases.json) each variant runs on and is checked against. */
export const VARIANT_CASE: Record<Variant, (typeof LOSS_NAMES)[number]> = {
  simclr: 'simclr',
  barlow: 'barlow',
  byol: 'byol',
  vicreg: 'vicreg',
  'simclr-local-offset': 'simclr',
  'simclr-local-slice-gather': 'simclr',
  'barlow-solo-learn': 'barlow',
};

/** Inputs each variant takes, in order. */
export function inputNames(variant: Variant): string[] {
  return variant === 'byol' ? ['p1', 'p2', 'z1', 'z2'] : ['z1', 'z2'];
}

function hyper(c: LossCase, key: string): number {
  const v = c.hyper[key];
  if (v === undefined) throw new Error(`hyper.${key} missing`);
  return v;
}

/** The width D of the case's `[N, D]` inputs. */
export function caseWidth(c: LossCase): number {
  return c.inputs.z1!.shape[1]!;
}

/** Rank `rank` of `worldSize`'s rows of input `k` of the case: `[B, D]`. */
export function caseRows(c: LossCase, k: string, rank: number, worldSize: number): tf.Tensor2D {
  const t = c.inputs[k];
  if (!t) throw new Error(`inputs.${k} missing`);
  const { shape, data } = rankSlice(t, rank, worldSize);
  return tf.tensor2d(data, shape as [number, number], 'float32');
}

/** A seeded `[D, D]` map near the identity (the "network" shared by every rank). */
export function thetaValues(d: number, seed = 4242): Float32Array {
  const rng = new Rng(seed);
  const noise = rng.normalArray(d * d, 0, 0.3 / Math.sqrt(d));
  for (let i = 0; i < d; i++) noise[i * d + i]! += 1;
  return Float32Array.from(noise);
}

/** The loss `variant` of this rank's inputs (`xs` in {@link inputNames} order). */
export function runVariant(variant: Variant, c: LossCase, xs: tf.Tensor2D[], group: ProcessGroup | undefined): Scalar {
  const [a, b] = xs as [tf.Tensor2D, tf.Tensor2D];
  switch (variant) {
    case 'simclr':
    case 'barlow':
    case 'byol':
    case 'vicreg': {
      const named = Object.fromEntries(inputNames(variant).map((k, i) => [k, xs[i]!]));
      const out = caseLossSpec(variant)!.run(c, named, group);
      return 'loss' in out ? out.loss : out;
    }
    case 'simclr-local-offset':
      return wrongNtXent(a, b, hyper(c, 'temperature'), group, 'local-offset');
    case 'simclr-local-slice-gather':
      return wrongNtXent(a, b, hyper(c, 'temperature'), group, 'local-slice-gather');
    case 'barlow-solo-learn':
      return soloLearnBarlow(a, b, hyper(c, 'lambd'), hyper(c, 'scale'), hyper(c, 'eps'), group);
  }
}

// ----------------------------------------------------------------------------- WRONG on purpose

/**
 * A gather whose backward returns only this rank's slice of the incoming gradient (what
 * several public SimCLR ports do): WRONG, it drops what other ranks' losses send here.
 */
function localSliceGather(x: tf.Tensor2D, group: ProcessGroup): tf.Tensor2D {
  const f = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as Tensor;
    const gathered = group.allGather(Float32Array.from(input.dataSync()));
    const b = input.shape[0]!;
    const value = tf.tensor(gathered, [group.worldSize * b, ...input.shape.slice(1)], 'float32');
    return { value, gradFunc: (dy: Tensor) => tf.slice(dy, [group.rank * b, 0], [b, -1]) };
  });
  return f(x) as tf.Tensor2D;
}

/**
 * NT-Xent with a WRONG distributed detail: `local-offset` puts the positive and self columns
 * at i (as if there were one rank) instead of rank·B + i; `local-slice-gather` gathers with
 * {@link localSliceGather}.
 */
function wrongNtXent(
  z1: tf.Tensor2D,
  z2: tf.Tensor2D,
  temperature: number,
  group: ProcessGroup | undefined,
  bug: 'local-offset' | 'local-slice-gather',
): Scalar {
  if (!group || group.worldSize === 1) return ntXentLoss(z1, z2, { temperature });
  const g = group;
  return tf.tidy(() => {
    const b = z1.shape[0];
    const n = g.worldSize * b;
    const offset = bug === 'local-offset' ? 0 : g.rank * b;
    const gather = (x: tf.Tensor2D) => (bug === 'local-slice-gather' ? localSliceGather(x, g) : allGather(x, g));
    const n1 = l2NormalizeRows(z1);
    const n2 = l2NormalizeRows(z2);
    const anchors = tf.concat([n1, n2], 0);
    const candidates = tf.concat([gather(n1), gather(n2)], 0);
    const logits = tf.div(tf.matMul(anchors, candidates, false, true), temperature);
    const self: number[] = [];
    const pos: number[] = [];
    for (let i = 0; i < b; i++) {
      self.push(offset + i);
      pos.push(n + offset + i);
    }
    for (let i = 0; i < b; i++) {
      self.push(n + offset + i);
      pos.push(offset + i);
    }
    const selfMask = tf.cast(tf.oneHot(tf.tensor1d(self, 'int32'), 2 * n), 'bool');
    const masked = tf.where(selfMask, tf.fill(logits.shape, -1e9), logits);
    const logProb = tf.logSoftmax(masked, 1);
    const positive = tf.oneHot(tf.tensor1d(pos, 'int32'), 2 * n);
    return tf.neg(tf.mean(tf.sum(tf.mul(logProb, tf.cast(positive, 'float32')), 1))) as Scalar;
  });
}

/**
 * solo-learn's `barlow_loss_func` under DDP: per-rank BatchNorm statistics, the local
 * cross-correlation all-reduced with a raw (non-differentiable) all-reduce, divided by W.
 * WRONG: per-rank statistics change the objective and the gradient is 1/W of the local term.
 */
function soloLearnBarlow(z1: tf.Tensor2D, z2: tf.Tensor2D, lambd: number, scale: number, eps: number, group: ProcessGroup | undefined): Scalar {
  return tf.tidy(() => {
    const w = group?.worldSize ?? 1;
    const bn = (z: tf.Tensor2D) => {
      const { mean, variance } = tf.moments(z, 0);
      return tf.div(tf.sub(z, mean), tf.sqrt(tf.add(variance, eps)));
    };
    const local = tf.div(tf.matMul(bn(z1), bn(z2), true, false), z1.shape[0]) as tf.Tensor2D;
    let corr: tf.Tensor2D = local;
    if (group && w > 1) {
      const summed = Float32Array.from(local.dataSync());
      group.allReduce(summed, 'sum');
      // In-place dist.all_reduce: the value becomes the sum, autograd still sees `local`.
      corr = tf.div(tf.add(local, detach(tf.sub(tf.tensor(summed, local.shape), local))), w) as tf.Tensor2D;
    }
    const d = corr.shape[0];
    const eye = tf.eye(d);
    const onDiag = tf.sum(tf.square(tf.sub(1, tf.sum(tf.mul(corr, eye), 1))));
    const offDiag = tf.sum(tf.square(tf.mul(corr, tf.sub(1, eye))));
    return tf.mul(scale, tf.add(onDiag, tf.mul(lambd, offDiag))) as Scalar;
  });
}

// ----------------------------------------------------------------------------- evaluation

/** One variant's loss, input gradients and θ gradient on some rows. */
export interface VariantResult {
  value: number;
  /** Per input (inputNames order): ∂loss/∂input, flattened `[rows·D]`. */
  grads: number[][];
  /** ∂loss/∂θ with every input mapped through θ, flattened `[D·D]`. */
  thetaGrad: number[];
}

/**
 * Evaluates `variant` on rank `rank` of `worldSize`'s rows of the case (`c`: the case of the
 * loss the variant computes): the loss and its gradients w.r.t. the raw inputs, and w.r.t. θ
 * when every input is replaced by `input · θ`.
 */
export function evaluateVariant(variant: Variant, c: LossCase, rank: number, worldSize: number, group: ProcessGroup | undefined): VariantResult {
  const names = inputNames(variant);
  const xs = names.map((k) => caseRows(c, k, rank, worldSize));
  const d = caseWidth(c);
  const theta = tf.tensor2d(thetaValues(d), [d, d]);
  try {
    const f = (...a: Tensor[]) => runVariant(variant, c, a as tf.Tensor2D[], group);
    const { value, grads } = tf.valueAndGrads(f)(xs);
    const thetaGrad = tf.grad((t: Tensor) => f(...xs.map((x) => tf.matMul(x, t))))(theta);
    const out = {
      value: value.dataSync()[0]!,
      grads: grads.map((g) => Array.from(g.dataSync())),
      thetaGrad: Array.from(thetaGrad.dataSync()),
    };
    tf.dispose([value, ...grads, thetaGrad]);
    return out;
  } finally {
    tf.dispose([...xs, theta]);
  }
}
