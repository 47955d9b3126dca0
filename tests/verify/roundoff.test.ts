import { strict as assert } from 'node:assert';
import { verifyTimeoutMs } from '../../src/verify/harness.js';
import {
  gradientDifference,
  largestPairDifference,
  permuteRows,
  perturbByOneUlp,
  roundoffBound,
  ROUNDOFF_TWINS,
  scalarDifference,
  stateDifference,
} from '../../src/verify/roundoff.js';

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

  it('permuteRows reorders whole rows (images and labels alike) and keeps the input', () => {
    const images = Float32Array.from({ length: 12 }, (_, i) => i); // 4 rows of 3
    const order = Int32Array.of(2, 0, 3, 1);
    assert.deepEqual([...permuteRows(images, order)], [6, 7, 8, 0, 1, 2, 9, 10, 11, 3, 4, 5]);
    const labels = permuteRows(Int32Array.of(10, 11, 12, 13), order);
    assert.ok(labels instanceof Int32Array);
    assert.deepEqual([...labels], [12, 10, 13, 11]);
    assert.equal(images[0], 0, 'the input is not modified');
    assert.throws(() => permuteRows(Float32Array.of(1, 2, 3), Int32Array.of(0, 1)), /do not split into 2 rows/);
  });

  it('gradientDifference is the norm of the difference over the norm of all reference gradients; it names the largest share', () => {
    const reference = { w: Float32Array.of(3, -4), b: Float32Array.of(0, 0) }; // norm 5
    const exact = gradientDifference({ w: Float32Array.of(3, -4), b: Float32Array.of(0.3, 0.4) }, reference);
    assert.ok(Math.abs(exact.value - 0.1) < 1e-7 && exact.tensor === 'b', JSON.stringify(exact));
    const d = gradientDifference({ w: Float32Array.of(3.3, -4), b: Float32Array.of(0, 0.4) }, reference);
    assert.ok(Math.abs(d.value - 0.1) < 1e-7 && d.tensor === 'b', JSON.stringify(d));
    assert.equal(gradientDifference({ w: Float32Array.of(3, -4) }, reference).value, Infinity, 'a missing gradient');
    assert.equal(gradientDifference({ w: Float32Array.of(3, -4), b: Float32Array.of(0) }, reference).value, Infinity, 'a wrong size');
  });

  it('stateDifference measures the difference against how far the state moved from its start', () => {
    const start = { big: Float32Array.of(100, 50), small: Float32Array.of(0, 0) };
    const reference = { big: Float32Array.of(103, 46), small: Float32Array.of(0, 0) }; // moved by 5
    assert.deepEqual(stateDifference({ big: Float32Array.of(103, 46), small: Float32Array.of(0.5, 0) }, reference, start), { value: 0.1, tensor: 'small' });
    assert.equal(stateDifference(reference, reference, start).value, 0);
    assert.equal(
      stateDifference({ big: Float32Array.of(100, 50), small: Float32Array.of(3e-7, 0) }, start, start).value,
      Math.fround(3e-7),
      'absolute when nothing moved',
    );
    assert.equal(stateDifference({ big: Float32Array.of(103, 46) }, reference, start).value, Infinity);
  });

  it('the bound is the factor times the round-off, never below the tolerance; NaN never passes', () => {
    assert.equal(roundoffBound(1e-3, 4, 1e-5), 4e-3);
    assert.equal(roundoffBound(0, 4, 1e-5), 1e-5);
    assert.ok(Math.abs(scalarDifference(2.2, 2) - 0.1) < 1e-12);
    assert.equal(scalarDifference(3e-7, 0), 3e-7);
    assert.ok(!(scalarDifference(NaN, 2) <= roundoffBound(1, 4, 1e-5)));
    assert.ok(!(gradientDifference({ w: Float32Array.of(NaN) }, { w: Float32Array.of(1) }).value <= 1));
    assert.ok(!(stateDifference({ w: Float32Array.of(NaN) }, { w: Float32Array.of(2) }, { w: Float32Array.of(1) }).value <= 1));
  });
});

describe('verify: the round-off of five correct computations', () => {
  it('is the largest difference over all ten pairs of the reference and its twins, each pair measured once, later against earlier', () => {
    // Losses of the reference (first) and four twins.
    const losses = [2.0, 2.3, 1.7, 2.6, 1.9];
    const seen: Array<[number, number]> = [];
    const largest = largestPairDifference(losses, (a, b) => {
      seen.push([a, b]);
      return Math.abs(a - b);
    });
    assert.equal(seen.length, 10);
    assert.deepEqual(seen.slice(0, 4), [
      [2.3, 2.0],
      [1.7, 2.0],
      [2.6, 2.0],
      [1.9, 2.0],
    ]);
    // Twin to reference alone: 0.6 (2.6 vs 2.0); twin to twin: 0.9 (2.6 vs 1.7).
    assert.ok(Math.abs(largest - 0.9) < 1e-12, `${largest}`);
    assert.equal(
      largestPairDifference([1], () => 5),
      0,
    );
  });
});

describe('verify: the W-rank collective timeout', () => {
  it('covers the one-process reference and twins a rank runs while the others wait for it in a collective', () => {
    // Each step, a rank runs its own W-rank step, then up to 1 + ROUNDOFF_TWINS one-process steps on the global batch.
    assert.equal(verifyTimeoutMs(300), 300_000 * (2 + ROUNDOFF_TWINS));
  });
});
