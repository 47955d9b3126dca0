/**
 * FeatureQueue on one process: initial rows, writes at the pointer with wrap-around, labels,
 * the nearest-neighbour lookup, the state it saves, and the reordering verify's twins use.
 * (With W ranks, the rank-ordered gather is covered by tests/distributed/zoo-methods.test.ts.)
 */
import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { FeatureQueue } from '../../src/methods/queue.js';

function rowsOf(q: FeatureQueue, view = 0): number[][] {
  const t = q.rows(view);
  const out = t.arraySync() as number[][];
  t.dispose();
  return out;
}

/** The blocks the last flush wrote, with their start slots read from the device. */
function writes(q: FeatureQueue): Array<{ start: number; count: number }> {
  return q.lastWrites.map(({ start, count }) => ({ start: start.dataSync()[0]!, count }));
}

/** `[n, 2]` rows `[base + i, -(base + i)]`. */
function block(base: number, n: number): tf.Tensor2D {
  return tf.tensor2d(
    Array.from({ length: n }, (_, i) => [base + i, -(base + i)]),
    [n, 2],
  );
}

describe('FeatureQueue', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('starts with seeded unit-norm rows, labels -1 and the pointer at 0, the same for the same seed', () => {
    const a = new FeatureQueue(5, 3, { views: 2, labels: true, rng: new Rng(7) });
    const b = new FeatureQueue(5, 3, { views: 2, labels: true, rng: new Rng(7) });
    for (const view of [0, 1]) {
      const rows = rowsOf(a, view);
      assert.equal(rows.length, 5);
      for (const r of rows) assert.ok(Math.abs(Math.hypot(...r) - 1) < 1e-6);
      assert.deepEqual(rows, rowsOf(b, view));
    }
    assert.notDeepEqual(rowsOf(a, 0), rowsOf(a, 1));
    assert.deepEqual(Array.from(a.labels().dataSync()), [-1, -1, -1, -1, -1]);
    assert.equal(a.position, 0);
    assert.deepEqual(Object.keys(a.stateDict()).sort(), ['bank', 'labels', 'pointer']);
    a.dispose();
    b.dispose();
  });

  it('writes pushed rows only on flush, at the pointer, wrapping around and overwriting the oldest', () => {
    const q = new FeatureQueue(5, 2, { labels: true, rng: new Rng(1) });
    const initial = rowsOf(q);
    q.push([block(10, 3)], tf.tensor1d([1, 2, 3], 'int32'));
    assert.deepEqual(rowsOf(q), initial, 'nothing written before flush');
    q.flush();
    assert.deepEqual(rowsOf(q).slice(0, 3), [
      [10, -10],
      [11, -11],
      [12, -12],
    ]);
    assert.deepEqual(rowsOf(q).slice(3), initial.slice(3));
    assert.equal(q.position, 3);
    assert.deepEqual(writes(q), [{ start: 0, count: 3 }]);
    // Two pushes (two micro-batches) flushed in order; the second wraps around.
    q.push([block(20, 2)], tf.tensor1d([4, 5], 'int32'));
    q.push([block(30, 2)], tf.tensor1d([6, 7], 'int32'));
    q.flush();
    assert.deepEqual(rowsOf(q), [
      [30, -30],
      [31, -31],
      [12, -12],
      [20, -20],
      [21, -21],
    ]);
    assert.deepEqual(Array.from(q.labels().dataSync()), [6, 7, 3, 4, 5]);
    assert.equal(q.position, 2);
    assert.deepEqual(writes(q), [
      { start: 3, count: 2 },
      { start: 0, count: 2 },
    ]);
    q.dispose();
  });

  it('keeps the last K rows of a block larger than the queue', () => {
    const q = new FeatureQueue(3, 2, { rng: new Rng(1) });
    q.push([block(0, 4)]);
    q.flush();
    // As if written one by one from slot 0: row 3 overwrote row 0.
    assert.deepEqual(rowsOf(q), [
      [3, -3],
      [1, -1],
      [2, -2],
    ]);
    assert.equal(q.position, 1);
    q.dispose();
  });

  it('finds the nearest row by inner product', () => {
    const q = new FeatureQueue(4, 2, { rng: new Rng(1) });
    q.push([
      tf.tensor2d(
        [
          [1, 0],
          [0, 1],
          [-1, 0],
          [0, -1],
        ],
        [4, 2],
      ),
    ]);
    q.flush();
    const { index, rows } = q.nearest(
      tf.tensor2d(
        [
          [0.1, -0.9],
          [-2, 0.5],
          [0.8, 0.7],
        ],
        [3, 2],
      ),
    );
    assert.deepEqual(Array.from(index.dataSync()), [3, 2, 0]);
    assert.deepEqual(rows.arraySync(), [
      [0, -1],
      [-1, 0],
      [1, 0],
    ]);
    q.dispose();
  });

  it('reorders the last writes into another sample order (what verify does for its twins)', () => {
    const samples = [
      [1, 2],
      [3, 4],
      [5, 6],
    ];
    const order = Int32Array.from([2, 0, 1]); // the twin's sample i is the reference's sample order[i]
    const a = new FeatureQueue(5, 2, { labels: true, rng: new Rng(3) });
    const b = new FeatureQueue(5, 2, { labels: true, rng: new Rng(3) });
    a.push([tf.tensor2d(samples, [3, 2])], tf.tensor1d([7, 8, 9], 'int32'));
    b.push(
      [
        tf.tensor2d(
          Array.from(order, (o) => samples[o]!),
          [3, 2],
        ),
      ],
      tf.tensor1d(
        Array.from(order, (o) => [7, 8, 9][o]!),
        'int32',
      ),
    );
    a.flush();
    b.flush();
    assert.notDeepEqual(rowsOf(a), rowsOf(b));
    b.reorderLastWrites([order]);
    assert.deepEqual(rowsOf(b), rowsOf(a));
    assert.deepEqual(Array.from(b.labels().dataSync()), Array.from(a.labels().dataSync()));
    for (const q of [a, b]) q.dispose();
  });

  it('saves and restores its rows, labels and pointer with the state dict', () => {
    const q = new FeatureQueue(4, 2, { labels: true, rng: new Rng(5) });
    q.push([block(1, 3)], tf.tensor1d([4, 5, 6], 'int32'));
    q.flush();
    const copy = new FeatureQueue(4, 2, { labels: true, rng: new Rng(99) });
    copy.loadStateDict(q.stateDict());
    assert.deepEqual(rowsOf(copy), rowsOf(q));
    assert.deepEqual(Array.from(copy.labels().dataSync()), [4, 5, 6, -1]);
    assert.equal(copy.position, 3);
    q.dispose();
    copy.dispose();
  });

  it('refuses pushes of the wrong shape or without labels it keeps', () => {
    const q = new FeatureQueue(4, 2, { views: 2, labels: true, rng: new Rng(5) });
    assert.throws(() => q.push([block(0, 2)], tf.tensor1d([1, 2], 'int32')), /1 view\(s\) given, the queue has 2/);
    assert.throws(() => q.push([block(0, 2), tf.zeros([2, 3])], tf.tensor1d([1, 2], 'int32')), /every view must be \[B, 2\]/);
    assert.throws(() => q.push([block(0, 2), block(0, 2)]), /keeps labels/);
    q.dispose();
  });
});
