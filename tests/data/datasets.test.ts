import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import {
  classCounts,
  createDataset,
  DATASET_NAMES,
  datasetStats,
  loadDataset,
  normalizationFor,
  subset,
  syntheticDataset,
  type ImageDataset,
} from '../../src/data/index.js';

function pixelsOf(ds: ImageDataset, i: number): Uint8Array {
  const n = ds.height * ds.width * ds.channels;
  return ds.pixels.subarray(i * n, (i + 1) * n);
}

describe('data/synthetic', () => {
  const train = syntheticDataset({ split: 'train', seed: 3 });
  const test = syntheticDataset({ split: 'test', seed: 3 });

  it('has the documented defaults and shapes', () => {
    assert.equal(train.name, 'synthetic');
    assert.equal(train.length, 2048);
    assert.equal(test.length, 512);
    assert.equal(train.height, 16);
    assert.equal(train.width, 16);
    assert.equal(train.channels, 1);
    assert.equal(train.numClasses, 10);
    assert.equal(train.classNames.length, 10);
    assert.equal(train.pixels.length, 2048 * 16 * 16);
    assert.ok(train.pixels.buffer instanceof SharedArrayBuffer);
  });

  it('is deterministic, seed-dependent, and train/test come from different streams', () => {
    const again = syntheticDataset({ split: 'train', seed: 3 });
    assert.deepEqual(again.pixels, train.pixels);
    assert.deepEqual(again.labels, train.labels);
    const other = syntheticDataset({ split: 'train', seed: 4, size: 64 });
    assert.notDeepEqual(other.pixels, train.pixels.subarray(0, other.pixels.length));
    const testAsTrain = test.pixels;
    assert.notDeepEqual(testAsTrain, train.pixels.subarray(0, testAsTrain.length));
    // image i depends only on (seed, split, i): a smaller dataset is a prefix
    const small = syntheticDataset({ split: 'train', seed: 3, size: 50 });
    assert.deepEqual(small.pixels, train.pixels.subarray(0, small.pixels.length));
  });

  it('is class balanced and uses the full pixel range', () => {
    assert.deepEqual(
      Array.from(classCounts(train)),
      new Array(10).fill(205).map((v, i) => (i < 8 ? v : 204)),
    );
    assert.deepEqual(Array.from(classCounts(test)), [52, 52, 51, 51, 51, 51, 51, 51, 51, 51]);
    let min = 255;
    let max = 0;
    for (const v of train.pixels) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    assert.equal(min, 0);
    assert.ok(max > 240);
  });

  it('has real class structure: raw-pixel classifiers clearly beat chance (10%)', () => {
    const D = 256;
    // nearest centroid
    const cent = Array.from({ length: 10 }, () => new Float64Array(D));
    const counts = classCounts(train);
    for (let i = 0; i < train.length; i++) {
      const c = cent[train.labels[i]];
      const p = pixelsOf(train, i);
      for (let d = 0; d < D; d++) c[d] += p[d] / counts[train.labels[i]];
    }
    let centroidHits = 0;
    let nnHits = 0;
    for (let i = 0; i < test.length; i++) {
      const p = pixelsOf(test, i);
      let best = -1;
      let bestD = Infinity;
      for (let l = 0; l < 10; l++) {
        let s = 0;
        for (let d = 0; d < D; d++) s += (p[d] - cent[l][d]) ** 2;
        if (s < bestD) [bestD, best] = [s, l];
      }
      if (best === test.labels[i]) centroidHits++;
      // 1-NN against the first 1024 training images
      bestD = Infinity;
      for (let j = 0; j < 1024; j++) {
        const q = pixelsOf(train, j);
        let s = 0;
        for (let d = 0; d < D; d++) s += (p[d] - q[d]) ** 2;
        if (s < bestD) [bestD, best] = [s, train.labels[j]];
      }
      if (best === test.labels[i]) nnHits++;
    }
    const centroidAcc = centroidHits / test.length;
    const nnAcc = nnHits / test.length;
    assert.ok(centroidAcc > 0.16, `nearest-centroid accuracy ${centroidAcc}`);
    assert.ok(nnAcc > 0.4, `1-NN accuracy ${nnAcc}`);
    // ...yet not trivial, so learned features have room to improve on raw pixels
    assert.ok(nnAcc < 0.9, `1-NN accuracy ${nnAcc}`);
  });

  it('supports imageSize, size and 3 channels', () => {
    const ds = syntheticDataset({ split: 'test', seed: 1, size: 30, imageSize: 24, channels: 3 });
    assert.equal(ds.length, 30);
    assert.equal(ds.height, 24);
    assert.equal(ds.channels, 3);
    assert.equal(ds.pixels.length, 30 * 24 * 24 * 3);
    // colour varies between channels
    let diff = 0;
    for (let i = 0; i < ds.pixels.length; i += 3) diff += Math.abs(ds.pixels[i] - ds.pixels[i + 1]);
    assert.ok(diff > 0);
  });

  it('rejects bad options with UserErrors naming the field', () => {
    assert.throws(
      () => syntheticDataset({ split: 'train', size: 0 }),
      (e: Error) => e instanceof UserError && /size/.test(e.message),
    );
    assert.throws(() => syntheticDataset({ split: 'train', imageSize: 4 }), /imageSize/);
    assert.throws(() => syntheticDataset({ split: 'train', channels: 2 }), /channels/);
  });
});

describe('data/loadDataset', () => {
  it('lists the dataset names', () => {
    assert.deepEqual([...DATASET_NAMES], ['synthetic', 'fashion-mnist', 'cifar10', 'cifar100']);
  });

  it('loads synthetic with options', () => {
    const ds = loadDataset('synthetic', { split: 'train', seed: 2, size: 20, imageSize: 12 });
    assert.equal(ds.length, 20);
    assert.equal(ds.height, 12);
    assert.deepEqual(ds.pixels, syntheticDataset({ split: 'train', seed: 2, size: 20, imageSize: 12 }).pixels);
  });

  it('rejects an unknown name naming the field, the value and the allowed names', () => {
    assert.throws(
      () => loadDataset('imagenet', { split: 'train' }),
      (e: Error) =>
        e instanceof UserError && e.message.startsWith('dataset:') && e.message.includes('"imagenet"') && DATASET_NAMES.every((n) => e.message.includes(n)),
    );
  });

  it('rejects an unknown split', () => {
    assert.throws(
      () => loadDataset('synthetic', { split: 'val' as 'train' }),
      (e: Error) => e instanceof UserError && /^split:/.test(e.message),
    );
  });
});

describe('data/dataset helpers', () => {
  const ds = syntheticDataset({ split: 'train', seed: 5, size: 40 });

  it('subset copies the chosen images and labels in order', () => {
    const sub = subset(ds, [7, 3, 7]);
    assert.equal(sub.length, 3);
    assert.deepEqual(pixelsOf(sub, 0), pixelsOf(ds, 7));
    assert.deepEqual(pixelsOf(sub, 1), pixelsOf(ds, 3));
    assert.deepEqual(pixelsOf(sub, 2), pixelsOf(ds, 7));
    assert.deepEqual(Array.from(sub.labels), [ds.labels[7], ds.labels[3], ds.labels[7]]);
    assert.equal(sub.numClasses, ds.numClasses);
    assert.throws(() => subset(ds, [40]), UserError);
  });

  it('createDataset checks sizes', () => {
    assert.throws(() => createDataset({ ...ds, length: 41 }));
  });

  it('computes statistics and uses published ones for known datasets', () => {
    const tiny = createDataset({
      name: 'tiny',
      length: 2,
      height: 1,
      width: 1,
      channels: 1,
      numClasses: 1,
      classNames: ['a'],
      labels: new Int32Array(2),
      pixels: new Uint8Array([0, 255]),
    });
    const s = datasetStats(tiny);
    assert.ok(Math.abs(s.mean[0] - 0.5) < 1e-12);
    assert.ok(Math.abs(s.std[0] - 0.5) < 1e-12);
    assert.deepEqual(normalizationFor({ ...tiny, name: 'fashion-mnist' }), { mean: [0.286], std: [0.353] });
    assert.deepEqual(normalizationFor(tiny), s);
  });
});
