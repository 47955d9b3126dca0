import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import {
  augmentBatch,
  augmentView,
  byolViews,
  CROP_FIELDS,
  createDataset,
  MultiViewLoader,
  RandomSampler,
  SequentialSampler,
  syntheticDataset,
  type MultiViewBatch,
  type MultiViewLoaderOptions,
} from '../../src/data/index.js';

const ds = syntheticDataset({ split: 'train', seed: 1, size: 100 });
const views = byolViews(ds);
const IMG = 16 * 16;

async function collect(loader: MultiViewLoader, epoch: number, start = 0): Promise<MultiViewBatch[]> {
  const out: MultiViewBatch[] = [];
  for await (const b of loader.batches(epoch, start)) out.push(b);
  return out;
}

function loader(extra: Partial<MultiViewLoaderOptions> = {}): MultiViewLoader {
  return new MultiViewLoader({ dataset: ds, views, batchSize: 16, sampler: new RandomSampler(100, 5), seed: 9, ...extra });
}

describe('data/sampler', () => {
  it('SequentialSampler is 0..n-1; RandomSampler is a permutation keyed by (seed, epoch)', () => {
    assert.deepEqual(Array.from(new SequentialSampler(5).indices(3)), [0, 1, 2, 3, 4]);
    const s = new RandomSampler(50, 3);
    const p0 = s.indices(0);
    assert.deepEqual(
      Array.from(p0).sort((a, b) => a - b),
      Array.from({ length: 50 }, (_, i) => i),
    );
    assert.deepEqual(new RandomSampler(50, 3).indices(0), p0);
    assert.notDeepEqual(s.indices(1), p0);
    assert.notDeepEqual(new RandomSampler(50, 4).indices(0), p0);
  });
});

describe('data/MultiViewLoader', () => {
  it('covers every index once per epoch, with labels and shapes (inline)', async () => {
    const l = loader();
    assert.equal(l.numBatches(), 7);
    const batches = await collect(l, 0);
    assert.equal(batches.length, 7);
    const seen = batches.flatMap((b) => Array.from(b.indices));
    assert.deepEqual(
      seen.slice().sort((a, b) => a - b),
      Array.from({ length: 100 }, (_, i) => i),
    );
    assert.deepEqual(seen, Array.from(new RandomSampler(100, 5).indices(0)));
    batches.forEach((b, i) => {
      assert.equal(b.index, i);
      const B = i < 6 ? 16 : 4;
      assert.deepEqual(b.shape, [B, 16, 16, 1]);
      assert.equal(b.views.length, 2);
      for (const v of b.views) assert.equal(v.length, B * IMG);
      assert.deepEqual(
        Array.from(b.labels),
        Array.from(b.indices, (k) => ds.labels[k]),
      );
    });
    // row k of view v is the keyed augmentation of sample indices[k]
    const b = batches[2];
    assert.deepEqual(b.views[1].subarray(3 * IMG, 4 * IMG), augmentView(ds.pixels, b.indices[3] * IMG, 16, 16, 1, views[1], Rng.keyed(9, 0, b.indices[3], 1)));
  });

  it('dropLast drops the incomplete batch', async () => {
    const l = loader({ dropLast: true });
    assert.equal(l.numBatches(), 6);
    const batches = await collect(l, 1);
    assert.equal(batches.length, 6);
    const seen = new Set(batches.flatMap((b) => Array.from(b.indices)));
    assert.equal(seen.size, 96);
    assert.ok(batches.every((b) => b.indices.length === 16));
  });

  it('worker and inline outputs are identical (any worker count, across epochs)', async () => {
    const inline = loader();
    const two = loader({ workers: 2, prefetch: 2 });
    const one = loader({ workers: 1, prefetch: 1, batchSize: 16 });
    try {
      for (const epoch of [0, 3]) {
        const a = await collect(inline, epoch);
        const b = await collect(two, epoch);
        const c = await collect(one, epoch);
        assert.equal(b.length, a.length);
        for (let i = 0; i < a.length; i++) {
          for (const other of [b[i], c[i]]) {
            assert.equal(other.index, a[i].index);
            assert.deepEqual(other.indices, a[i].indices);
            assert.deepEqual(other.labels, a[i].labels);
            assert.deepEqual(other.shape, a[i].shape);
            for (let v = 0; v < 2; v++) assert.deepEqual(other.views[v], a[i].views[v]);
          }
        }
      }
      // different epochs give different views of the same sample
      const e0 = await collect(inline, 0);
      const e1 = await collect(inline, 1);
      const idx = e0[0].indices[0];
      const find = (bs: MultiViewBatch[]) => {
        for (const b of bs) {
          const k = b.indices.indexOf(idx);
          if (k >= 0) return b.views[0].subarray(k * IMG, (k + 1) * IMG);
        }
        throw new Error('not found');
      };
      assert.notDeepEqual(find(e1), find(e0));
    } finally {
      await two.close();
      await one.close();
    }
  });

  it("every batch carries each view's [B, 5] crop boxes and flips, the same inline and from a worker, keyed as augmentBatch", async () => {
    const inline = loader();
    const worker = loader({ workers: 1, prefetch: 1 });
    try {
      const a = await collect(inline, 1);
      const b = await collect(worker, 1);
      assert.equal(b.length, a.length);
      for (let i = 0; i < a.length; i++) {
        const B = a[i].indices.length;
        for (const batch of [a[i], b[i]]) {
          assert.equal(batch.crops?.length, views.length);
          for (const crop of batch.crops!) {
            assert.ok(crop instanceof Float32Array);
            assert.equal(crop.length, B * CROP_FIELDS);
          }
        }
        const expected = augmentBatch(ds, views, 9, 1, a[i].indices).crops;
        for (let v = 0; v < views.length; v++) {
          assert.deepEqual(a[i].crops![v], expected[v], `batch ${i} view ${v} inline`);
          assert.deepEqual(b[i].crops![v], expected[v], `batch ${i} view ${v} worker`);
        }
      }
    } finally {
      await worker.close();
    }
  });

  it('views do not depend on the batch size (keyed per sample)', async () => {
    const a = await collect(loader({ batchSize: 10, sampler: new SequentialSampler(100) }), 2);
    const b = await collect(loader({ batchSize: 33, sampler: new SequentialSampler(100) }), 2);
    const flat = (bs: MultiViewBatch[], v: number) => {
      const out = new Float32Array(100 * IMG);
      for (const x of bs) x.indices.forEach((idx, k) => out.set(x.views[v].subarray(k * IMG, (k + 1) * IMG), idx * IMG));
      return out;
    };
    assert.deepEqual(flat(a, 0), flat(b, 0));
    assert.deepEqual(flat(a, 1), flat(b, 1));
  });

  it('startBatch skips already-done batches (inline and workers)', async () => {
    const full = await collect(loader(), 4);
    for (const workers of [0, 2]) {
      const l = loader({ workers });
      try {
        const rest = await collect(l, 4, 3);
        assert.deepEqual(
          rest.map((b) => b.index),
          [3, 4, 5, 6],
        );
        rest.forEach((b, i) => {
          assert.deepEqual(b.indices, full[i + 3].indices);
          assert.deepEqual(b.views[0], full[i + 3].views[0]);
          assert.deepEqual(b.views[1], full[i + 3].views[1]);
        });
        assert.equal((await collect(l, 4, 7)).length, 0);
      } finally {
        await l.close();
      }
    }
    const l = loader();
    await assert.rejects(collect(l, 0, 8), (e: Error) => e instanceof UserError && /^startBatch: 8/.test(e.message));
  });

  it('skipped batches are not computed (counts keyed augmentation streams inline)', async () => {
    const original = Rng.keyed;
    let calls = 0;
    Rng.keyed = (...key: number[]) => {
      if (key.length === 4) calls++;
      return original(...key);
    };
    try {
      const rest = await collect(loader(), 0, 5);
      assert.equal(rest.length, 2);
      assert.equal(calls, (16 + 4) * 2); // batches 5 and 6, two views each
    } finally {
      Rng.keyed = original;
    }
  });

  it('works with a dataset whose pixels are not in shared memory', async () => {
    const plain = createDataset({ ...ds, pixels: new Uint8Array(ds.pixels) });
    const l = new MultiViewLoader({ dataset: plain, views, batchSize: 50, sampler: new SequentialSampler(100), seed: 9, workers: 1 });
    try {
      const a = await collect(l, 0);
      const b = await collect(loader({ batchSize: 50, sampler: new SequentialSampler(100) }), 0);
      assert.deepEqual(a[1].views[1], b[1].views[1]);
    } finally {
      await l.close();
    }
  });

  it('rejects bad options naming the field', () => {
    const bad = (extra: Partial<MultiViewLoaderOptions>, re: RegExp) =>
      assert.throws(
        () => loader(extra),
        (e: Error) => e instanceof UserError && re.test(e.message),
      );
    bad({ batchSize: 0 }, /^batchSize: 0/);
    bad({ views: [] }, /^views:/);
    bad({ workers: -1 }, /^workers: -1/);
    bad({ views: [{ ...views[0], mean: [0, 0, 0] }] }, /^views\[0\]\.mean/);
  });

  it('close() terminates the workers so the process exits (and idle workers never block exit)', function () {
    this.timeout(60000);
    const dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-loader-'));
    try {
      const index = fileURLToPath(new URL('../../src/data/index.js', import.meta.url));
      // 'busy': the consumer computes synchronously after its last batch (as a training step
      // does), so the prefetched batches' results are queued when close() is called and are
      // delivered while the workers terminate.
      const script = (ending: 'close' | 'busy' | 'none') => `
        import { MultiViewLoader, RandomSampler, simclrViews, syntheticDataset } from ${JSON.stringify(index)};
        const ds = syntheticDataset({ split: 'test', size: 64 });
        for (let round = 0; round < ${ending === 'busy' ? 5 : 1}; round++) {
          const l = new MultiViewLoader({ dataset: ds, views: simclrViews(ds), batchSize: 8,
            sampler: new RandomSampler(64, 1), seed: 0, workers: 2, prefetch: 2 });
          let n = 0;
          for await (const b of l.batches(0)) { n++; if (n === 3) break; }
          ${ending === 'busy' ? 'const until = Date.now() + 300; while (Date.now() < until);' : ''}
          ${ending === 'none' ? '' : 'await l.close();'}
        }
        console.log('done');
      `;
      for (const ending of ['close', 'busy', 'none'] as const) {
        const file = join(dir, `run-${ending}.mjs`);
        writeFileSync(file, script(ending));
        const r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 20000 });
        assert.equal(r.signal, null, `timed out (hang), ${ending}: ${r.stderr}`);
        assert.equal(r.status, 0, `${ending}: exit code ${r.status} (13: the event loop emptied during close()) ${r.stderr}`);
        assert.equal(r.stdout.trim(), 'done');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
