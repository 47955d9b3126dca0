import assert from 'node:assert/strict';
import { splitKTransposedB } from '../../src/core/kernels/webgpu/matmul.js';
import { tf } from '../../src/core/tf.js';
import { useCpu } from '../helpers/webgpu.js';
import { assertMatches, onBothEngines, randn, type Computation, type ReadBack } from './webgpu-helpers.js';

/**
 * The corrected `BatchMatMul` / `_FusedMatMul` on webgpu (src/core/kernels/webgpu/matmul.ts)
 * against cpu-js, on the shapes that send tfjs 4.22 to its split-K program (batch 1,
 * K >= 2000, few 32x32 output tiles, more than 128 outputs), with B transposed or not, K
 * and N multiples of 4 (its vec4 path, the wrong one with transposed B) or not, and on
 * shapes next to them (batched; many tiles; K below 2000). The fused kernel (bias, relu)
 * is checked where B is transposed (batch 1, K <= 2048).
 */
type Case = { m: number; k: number; n: number; transposeA: boolean; transposeB: boolean; batch?: number };

const CASES: Case[] = [
  { m: 16, k: 2048, n: 128, transposeA: false, transposeB: true },
  { m: 5, k: 2000, n: 36, transposeA: false, transposeB: true },
  { m: 12, k: 2052, n: 36, transposeA: true, transposeB: true },
  { m: 13, k: 2001, n: 40, transposeA: false, transposeB: true },
  { m: 16, k: 2048, n: 128, transposeA: false, transposeB: false },
  { m: 4, k: 2048, n: 20, transposeA: false, transposeB: true, batch: 2 },
  { m: 40, k: 2048, n: 132, transposeA: false, transposeB: true },
  { m: 16, k: 1999, n: 36, transposeA: false, transposeB: true },
];

function name(c: Case): string {
  const a = `${c.batch ? `${c.batch}x` : ''}[${c.transposeA ? `${c.k}, ${c.m}]^T` : `${c.m}, ${c.k}]`}`;
  const b = `[${c.transposeB ? `${c.n}, ${c.k}]^T` : `${c.k}, ${c.n}]`}`;
  return `${a} x ${b}`;
}

function operands(c: Case, seed: number): [tf.Tensor, tf.Tensor] {
  const batch = c.batch ? [c.batch] : [];
  const a = randn([...batch, ...(c.transposeA ? [c.k, c.m] : [c.m, c.k])], seed);
  const b = randn([...batch, ...(c.transposeB ? [c.n, c.k] : [c.k, c.n])], seed + 1, 0.05);
  return [a, b];
}

function computations(): Record<string, Computation> {
  const out: Record<string, Computation> = {};
  CASES.forEach((c, i) => {
    out[`matMul ${name(c)}`] = () => {
      const [a, b] = operands(c, 10 * i);
      return [tf.matMul(a, b, c.transposeA, c.transposeB)];
    };
    if (!c.transposeB || c.k > 2048 || c.batch) return;
    out[`fused matMul ${name(c)} + bias, relu`] = () => {
      const [a, b] = operands(c, 10 * i + 5);
      const bias = randn([c.n], 10 * i + 7);
      return [tf.fused.matMul({ a, b, transposeA: c.transposeA, transposeB: c.transposeB, bias, activation: 'relu' })];
    };
  });
  return out;
}

describe('kernels/webgpu: matMul (tfjs split-K program corrected) against cpu-js', function () {
  const cases = computations();
  let results: { webgpu: Record<string, ReadBack>; reference: Record<string, ReadBack> };

  before(async () => {
    results = await onBothEngines(cases);
  });
  after(useCpu);

  for (const what of Object.keys(cases)) {
    it(what, () => assertMatches(results.webgpu[what], results.reference[what], what));
  }

  it('corrects exactly the products tfjs may run with its split-K program and B transposed', () => {
    const info = (shape: number[]) => ({ dataId: {}, shape, dtype: 'float32' as const });
    assert.equal(splitKTransposedB(info([16, 2048]), info([128, 2048]), false, true), true);
    assert.equal(splitKTransposedB(info([2048, 16]), info([128, 2048]), true, true), true);
    assert.equal(splitKTransposedB(info([1, 16, 2048]), info([128, 2048]), false, true), true);
    assert.equal(splitKTransposedB(info([16, 2048]), info([2048, 128]), false, false), false);
    assert.equal(splitKTransposedB(info([2, 16, 2048]), info([2, 128, 2048]), false, true), false);
    assert.equal(splitKTransposedB(info([16, 1999]), info([128, 1999]), false, true), false);
  });
});
