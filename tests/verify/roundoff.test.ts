import { strict as assert } from 'node:assert';
import { gradientDifference, perturbByOneUlp, roundoffBound, scalarDifference, stateDifference } from '../../src/verify/roundoff.js';

/** The float32 neighbours of x (towards and away from zero). */
function neighbours(x: number): [number, number] {
  const f = Float32Array.of(x, x);
  const u = new Uint32Array(f.buffer);
  u[0] = u[0]! - 1;
  u[1] = u[1]! + 1;
  return [f[0]!, f[1]!];
}

describe('verify: round-off measurement', () => {
  it('perturbByOneUlp moves every non-zero value to a float32 neighbour, both directions occurring, zeros kept', () => {
    const values = Float32Array.from({ length: 1000 }, (_, i) => (i % 10 === 0 ? 0 : Math.sin(i) * 10 ** ((i % 7) - 3)));
    const out = perturbByOneUlp(values, 7);
    let up = 0;
    let down = 0;
    for (let i = 0; i < values.length; i++) {
      if (values[i] === 0) {
        assert.equal(out[i], 0);
        continue;
      }
      const [a, b] = neighbours(values[i]!);
      assert.ok(out[i] === a || out[i] === b, `value ${i}: ${out[i]} is not a neighbour of ${values[i]}`);
      if (Math.abs(out[i]!) > Math.abs(values[i]!)) up++;
      else down++;
    }
    assert.ok(up > 300 && down > 300, `${up} up, ${down} down`);
    assert.deepEqual(perturbByOneUlp(values, 7), out, 'the same key gives the same perturbation');
    assert.notDeepEqual(perturbByOneUlp(values, 8), out, 'another key gives another one');
    assert.equal(values[1], Math.fround(Math.sin(1) * 1e-2), 'the input is not modified');
  });

  it('gradientDifference measures every tensor against the largest entry of all (a zero gradient is not its own scale)', () => {
    const reference = { w: Float32Array.of(2, -4), b: Float32Array.of(0, 0) };
    assert.equal(gradientDifference({ w: Float32Array.of(2, -4), b: Float32Array.of(1e-6, 0) }, reference), Math.fround(1e-6) / 4);
    assert.equal(gradientDifference({ w: Float32Array.of(2.5, -4), b: Float32Array.of(0, 0) }, reference), 0.5 / 4);
    assert.equal(gradientDifference({ w: Float32Array.of(2, -4) }, reference), Infinity, 'a missing gradient');
  });

  it('stateDifference measures each tensor on its own scale (absolute for an all-zero tensor)', () => {
    const reference = { big: Float32Array.of(100, 50), small: Float32Array.of(0.01, 0), zero: Float32Array.of(0) };
    assert.equal(stateDifference({ big: Float32Array.of(100, 51), small: Float32Array.of(0.01, 0), zero: Float32Array.of(0) }, reference), 0.01);
    assert.ok(Math.abs(stateDifference({ big: Float32Array.of(100, 50), small: Float32Array.of(0.011, 0), zero: Float32Array.of(0) }, reference) - 0.1) < 1e-6);
    assert.equal(stateDifference({ big: Float32Array.of(100, 50), small: Float32Array.of(0.01, 0), zero: Float32Array.of(3e-7) }, reference), Math.fround(3e-7));
    assert.equal(stateDifference({ big: Float32Array.of(100, 50) }, reference), Infinity);
  });

  it('the bound is the factor times the round-off, never below the tolerance; NaN never passes', () => {
    assert.equal(roundoffBound(1e-3, 4, 1e-5), 4e-3);
    assert.equal(roundoffBound(0, 4, 1e-5), 1e-5);
    assert.ok(Math.abs(scalarDifference(2.2, 2) - 0.1) < 1e-12);
    assert.equal(scalarDifference(3e-7, 0), 3e-7);
    assert.ok(!(scalarDifference(NaN, 2) <= roundoffBound(1, 4, 1e-5)));
    assert.ok(!(gradientDifference({ w: Float32Array.of(NaN) }, { w: Float32Array.of(1) }) <= 1));
  });
});
