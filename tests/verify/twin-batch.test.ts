import { strict as assert } from 'node:assert';
import type { MultiViewBatch } from '../../src/data/loader.js';
import { permuteRows } from '../../src/verify/roundoff.js';
import { twinBatch } from '../../src/verify/steps.js';

/** A hand-made batch of 6 samples: two 2x2x1 views and, when asked, their [6, 5] crop rows. */
function batch(withCrops: boolean): MultiViewBatch {
  const B = 6;
  const views = [0, 1].map((v) => Float32Array.from({ length: B * 4 }, (_, i) => 1 + i + 100 * v));
  const crops = [0, 1].map((v) =>
    Float32Array.from({ length: B * 5 }, (_, i) => (i % 5 === 4 ? (Math.floor(i / 5) + v) % 2 : 10 * Math.floor(i / 5) + (i % 5) + 1000 * v)),
  );
  return {
    views,
    ...(withCrops && { crops }),
    shape: [B, 2, 2, 1],
    shapes: [
      [B, 2, 2, 1],
      [B, 2, 2, 1],
    ],
    labels: Int32Array.from({ length: B }, (_, i) => i % 3),
    indices: Int32Array.from({ length: B }, (_, i) => 40 + i),
    index: 0,
  };
}

describe('verify: a round-off twin batch', () => {
  it('reorders the crop rows (5 a sample) as views, labels and indices, without moving them by an ulp', () => {
    const ref = batch(true);
    const { batch: twin, order } = twinBatch(ref, 3);
    assert.notDeepEqual([...order], [0, 1, 2, 3, 4, 5], 'the key gives a real permutation');
    assert.deepEqual(twin.indices, permuteRows(ref.indices, order));
    assert.equal(twin.crops?.length, 2);
    for (let v = 0; v < 2; v++) {
      assert.deepEqual(twin.crops![v], permuteRows(ref.crops![v], order), `view ${v}: rows of 5 in the twin's order, values exact`);
      for (let i = 0; i < order.length; i++) {
        // row i of the twin is sample order[i]: its top is 10 * order[i] (+ 1000 v), the same sample as its index
        assert.equal(twin.crops![v][i * 5], 10 * order[i]! + 1000 * v);
        assert.equal(twin.indices[i], 40 + order[i]!);
      }
      // the views are reordered too, but moved by one ulp
      assert.notDeepEqual(twin.views[v], permuteRows(ref.views[v], order));
    }
    assert.equal(ref.crops![0][0], 0, 'the input is not modified');
  });

  it('leaves a batch built by hand without crops without them', () => {
    const { batch: twin } = twinBatch(batch(false), 3);
    assert.ok(!('crops' in twin));
  });
});
