import { strict as assert } from 'node:assert';
import { tf, type Tensor, type Variable } from '../../src/core/tf.js';
import type { NamedParam } from '../../src/optim/index.js';

/** Asserts |a - e| <= rtol * |e| + atol elementwise. */
export function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string, rtol = 1e-5, atol = 1e-7): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    assert.ok(Math.abs(a - e) <= rtol * Math.abs(e) + atol, `${what}[${i}]: got ${a}, expected ${e}`);
  }
}

/** Values of a tensor as a plain array. */
export function values(t: Tensor): number[] {
  return Array.from(t.dataSync());
}

/** A named trainable variable holding `data` with `shape`. */
export function param(name: string, data: number[], shape: number[] = [data.length]): NamedParam {
  return { name, variable: tf.variable(tf.tensor(data, shape), true) };
}

/** Disposes every variable of `params`. */
export function disposeParams(params: Array<NamedParam | Variable>): void {
  for (const p of params) ('variable' in p && !(p instanceof tf.Tensor) ? p.variable : (p as Variable)).dispose();
}

/** Gradients keyed by `variable.name`, as `tf.variableGrads` returns them. */
export function gradsOf(entries: Array<[NamedParam, number[]]>): tf.NamedTensorMap {
  const out: tf.NamedTensorMap = {};
  for (const [p, g] of entries) out[p.variable.name] = tf.tensor(g, p.variable.shape);
  return out;
}

/** Disposes every tensor of a gradient map. */
export function disposeGrads(grads: tf.NamedTensorMap): void {
  for (const t of Object.values(grads)) t.dispose();
}
