import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, copyFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { UserError } from '../../src/core/errors.js';
import {
  CIFAR100_CLASS_NAMES,
  cifarRecordBytes,
  classCounts,
  FASHION_MNIST_DEFAULT_DIR,
  loadCifar,
  loadDataset,
  parseIdx,
  readIdxFile,
} from '../../src/data/index.js';

function idxBytes(dims: number[], data: ArrayLike<number>, type = 0x08): Uint8Array {
  const header = new Uint8Array(4 + 4 * dims.length);
  const view = new DataView(header.buffer);
  header[2] = type;
  header[3] = dims.length;
  dims.forEach((d, i) => view.setUint32(4 + 4 * i, d, false));
  const out = new Uint8Array(header.length + data.length);
  out.set(header);
  out.set(Uint8Array.from(data), header.length);
  return out;
}

function userError(pattern: RegExp) {
  return (e: Error): boolean => {
    assert.ok(e instanceof UserError, `expected a UserError, got ${e.name}: ${e.message}`);
    assert.match(e.message, pattern);
    return true;
  };
}

describe('data/idx', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-idx-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('parses a valid IDX array', () => {
    const a = parseIdx(idxBytes([2, 3], [1, 2, 3, 4, 5, 6]), 'x');
    assert.deepEqual(a.dims, [2, 3]);
    assert.deepEqual(Array.from(a.data), [1, 2, 3, 4, 5, 6]);
  });

  it('rejects bad magic numbers, types, truncation and trailing bytes, naming the file', () => {
    const good = idxBytes([2, 3], [1, 2, 3, 4, 5, 6]);
    const badMagic = good.slice();
    badMagic[0] = 0x1f;
    assert.throws(() => parseIdx(badMagic, 'f.idx'), userError(/^f\.idx: not an IDX file/));
    const badType = idxBytes([2], [1, 2], 0x0d);
    assert.throws(() => parseIdx(badType, 'f.idx'), userError(/^f\.idx: unsupported IDX element type 0x0d/));
    assert.throws(() => parseIdx(good.subarray(0, 3), 'f.idx'), userError(/^f\.idx: truncated IDX file/));
    assert.throws(() => parseIdx(good.subarray(0, 9), 'f.idx'), userError(/^f\.idx: truncated IDX header/));
    assert.throws(
      () => parseIdx(good.subarray(0, good.length - 2), 'f.idx'),
      userError(/^f\.idx: truncated IDX data: dimensions 2x3 need 6 bytes, the file has 4/),
    );
    const extra = new Uint8Array(good.length + 1);
    extra.set(good);
    assert.throws(() => parseIdx(extra, 'f.idx'), userError(/^f\.idx: corrupt IDX file: 1 unexpected bytes/));
    assert.throws(() => parseIdx(good, 'f.idx', 3), userError(/has 2 dimensions, expected 3/));
  });

  it('reads gzip files and reports truncated or corrupt gzip data naming the file', () => {
    const raw = idxBytes(
      [4, 2, 2],
      Array.from({ length: 16 }, (_, i) => i),
    );
    const gz = gzipSync(raw);
    const ok = join(dir, 'ok.gz');
    writeFileSync(ok, gz);
    assert.deepEqual(readIdxFile(ok, 3).dims, [4, 2, 2]);
    const plain = join(dir, 'plain');
    writeFileSync(plain, raw);
    assert.deepEqual(readIdxFile(plain).data, readIdxFile(ok).data);
    const truncated = join(dir, 'truncated.gz');
    writeFileSync(truncated, gz.subarray(0, gz.length - 10));
    assert.throws(() => readIdxFile(truncated), userError(/truncated\.gz: corrupt or truncated gzip data/));
    const corrupt = join(dir, 'corrupt.gz');
    const bad = Buffer.from(gz);
    bad.fill(0xaa, 12, 30);
    writeFileSync(corrupt, bad);
    assert.throws(() => readIdxFile(corrupt), userError(/corrupt\.gz: corrupt or truncated gzip data/));
  });

  it('loads a small fashion-mnist layout from dataDir, .gz or uncompressed', () => {
    const d = join(dir, 'fm');
    mkdirSync(d);
    const images = Array.from({ length: 3 * 4 * 5 }, (_, i) => i);
    writeFileSync(join(d, 't10k-images-idx3-ubyte'), idxBytes([3, 4, 5], images));
    writeFileSync(join(d, 't10k-labels-idx1-ubyte.gz'), gzipSync(idxBytes([3], [9, 0, 4])));
    const ds = loadDataset('fashion-mnist', { split: 'test', dataDir: d });
    assert.equal(ds.length, 3);
    assert.equal(ds.height, 4);
    assert.equal(ds.width, 5);
    assert.equal(ds.channels, 1);
    assert.deepEqual(Array.from(ds.labels), [9, 0, 4]);
    assert.deepEqual(Array.from(ds.pixels), images);
    assert.equal(ds.classNames[9], 'Ankle boot');
  });

  it('rejects count mismatches and out-of-range labels', () => {
    const d = join(dir, 'fm-bad');
    mkdirSync(d);
    writeFileSync(join(d, 't10k-images-idx3-ubyte'), idxBytes([2, 2, 2], new Array(8).fill(1)));
    writeFileSync(join(d, 't10k-labels-idx1-ubyte'), idxBytes([3], [1, 2, 3]));
    assert.throws(() => loadDataset('fashion-mnist', { split: 'test', dataDir: d }), userError(/3 labels, but .* has 2 images/));
    writeFileSync(join(d, 't10k-labels-idx1-ubyte'), idxBytes([2], [1, 12]));
    assert.throws(() => loadDataset('fashion-mnist', { split: 'test', dataDir: d }), userError(/label 12 at index 1 is out of range 0\.\.9/));
    writeFileSync(join(d, 't10k-labels-idx1-ubyte'), idxBytes([2, 1], [1, 2]));
    assert.throws(() => loadDataset('fashion-mnist', { split: 'test', dataDir: d }), userError(/has 2 dimensions, expected 1/));
  });

  it('names the missing path and how to get the data', () => {
    const d = join(dir, 'empty');
    mkdirSync(d);
    assert.throws(
      () => loadDataset('fashion-mnist', { split: 'train', dataDir: d }),
      (e: Error) =>
        e instanceof UserError &&
        e.message.includes(join(d, 'train-images-idx3-ubyte.gz')) &&
        e.message.includes('apt-get install dataset-fashion-mnist') &&
        e.message.includes('--data-dir'),
    );
  });

  const haveFashion = existsSync(join(FASHION_MNIST_DEFAULT_DIR, 't10k-labels-idx1-ubyte.gz'));
  (haveFashion ? it : it.skip)('loads the real Fashion-MNIST files', function () {
    this.timeout(30000);
    const train = loadDataset('fashion-mnist', { split: 'train' });
    const test = loadDataset('fashion-mnist', { split: 'test' });
    assert.equal(train.length, 60000);
    assert.equal(test.length, 10000);
    for (const ds of [train, test]) {
      assert.equal(ds.height, 28);
      assert.equal(ds.width, 28);
      assert.equal(ds.channels, 1);
      assert.equal(ds.numClasses, 10);
      assert.equal(ds.pixels.length, ds.length * 784);
      assert.ok(ds.labels.every((l) => l >= 0 && l <= 9));
      assert.ok(ds.pixels.buffer instanceof SharedArrayBuffer);
    }
    assert.deepEqual(Array.from(classCounts(train)), new Array(10).fill(6000));
    assert.deepEqual(Array.from(classCounts(test)), new Array(10).fill(1000));
    // mean pixel value close to the published 0.2860
    let s = 0;
    for (let i = 0; i < test.pixels.length; i++) s += test.pixels[i];
    assert.ok(Math.abs(s / test.pixels.length / 255 - 0.286) < 0.01);
  });

  (haveFashion ? it : it.skip)('accepts uncompressed copies of the real files', function () {
    const d = join(dir, 'fm-copy');
    mkdirSync(d);
    copyFileSync(join(FASHION_MNIST_DEFAULT_DIR, 't10k-labels-idx1-ubyte.gz'), join(d, 't10k-labels-idx1-ubyte.gz'));
    const images = readIdxFile(join(FASHION_MNIST_DEFAULT_DIR, 't10k-images-idx3-ubyte.gz'));
    writeFileSync(join(d, 't10k-images-idx3-ubyte'), idxBytes(images.dims, images.data));
    const ds = loadDataset('fashion-mnist', { split: 'test', dataDir: d });
    assert.equal(ds.length, 10000);
    assert.deepEqual(ds.pixels.subarray(0, 784), images.data.subarray(0, 784));
  });
});

/** One CIFAR record: label byte(s) then R, G, B planes of 32x32 with a recognisable pattern. */
function cifarRecord(labels: number[], seed: number): Uint8Array {
  const rec = new Uint8Array(labels.length + 3072);
  rec.set(labels);
  for (let ch = 0; ch < 3; ch++) {
    for (let p = 0; p < 1024; p++) rec[labels.length + ch * 1024 + p] = (seed * 7 + ch * 50 + p) % 256;
  }
  return rec;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

describe('data/cifar', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-cifar-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('parses CIFAR-10 batches (CHW records -> HWC)', () => {
    const sub = join(dir, 'c10', 'cifar-10-batches-bin');
    mkdirSync(sub, { recursive: true });
    for (let b = 1; b <= 5; b++) {
      writeFileSync(join(sub, `data_batch_${b}.bin`), concat([cifarRecord([b], b), cifarRecord([(b + 5) % 10], b + 10)]));
    }
    writeFileSync(join(sub, 'test_batch.bin'), concat([cifarRecord([3], 99)]));
    const train = loadDataset('cifar10', { split: 'train', dataDir: join(dir, 'c10') });
    assert.equal(train.length, 10);
    assert.equal(train.height, 32);
    assert.equal(train.width, 32);
    assert.equal(train.channels, 3);
    assert.equal(train.numClasses, 10);
    assert.deepEqual(Array.from(train.labels), [1, 6, 2, 7, 3, 8, 4, 9, 5, 0]);
    // image 2 (batch 2, record 0, seed 2): pixel (y, x) channel ch = (14 + ch*50 + y*32 + x) % 256
    const img = 2 * 3072;
    for (const [y, x, ch] of [
      [0, 0, 0],
      [0, 1, 2],
      [5, 7, 1],
      [31, 31, 2],
    ]) {
      assert.equal(train.pixels[img + (y * 32 + x) * 3 + ch], (14 + ch * 50 + y * 32 + x) % 256);
    }
    // the directory holding the batches works as dataDir too
    const test = loadCifar('cifar10', 'test', sub);
    assert.equal(test.length, 1);
    assert.deepEqual(Array.from(test.labels), [3]);
    assert.equal(test.classNames[3], 'cat');
  });

  it('parses CIFAR-100 with fine labels', () => {
    const sub = join(dir, 'c100', 'cifar-100-binary');
    mkdirSync(sub, { recursive: true });
    writeFileSync(join(sub, 'train.bin'), concat([cifarRecord([4, 72], 1), cifarRecord([19, 99], 2), cifarRecord([0, 0], 3)]));
    assert.equal(cifarRecordBytes('cifar100'), 3074);
    const ds = loadDataset('cifar100', { split: 'train', dataDir: join(dir, 'c100') });
    assert.equal(ds.length, 3);
    assert.equal(ds.numClasses, 100);
    assert.equal(CIFAR100_CLASS_NAMES.length, 100);
    assert.deepEqual(Array.from(ds.labels), [72, 99, 0]);
    assert.equal(ds.classNames[72], 'seal');
    assert.equal(ds.pixels[3072 + 1], (14 + 50) % 256); // image 1, pixel 0, green
  });

  it('rejects truncated files and bad labels naming the file', () => {
    const sub = join(dir, 'c100-bad', 'cifar-100-binary');
    mkdirSync(sub, { recursive: true });
    const file = join(sub, 'test.bin');
    writeFileSync(file, concat([cifarRecord([1, 2], 1)]).subarray(0, 3000));
    assert.throws(
      () => loadDataset('cifar100', { split: 'test', dataDir: join(dir, 'c100-bad') }),
      userError(/test\.bin: not a cifar100 binary batch: 3000 bytes .*3074-byte record/),
    );
    writeFileSync(file, concat([cifarRecord([1, 2], 1), cifarRecord([1, 100], 1)]));
    assert.throws(
      () => loadDataset('cifar100', { split: 'test', dataDir: join(dir, 'c100-bad') }),
      userError(/test\.bin: record 1 has label 100, out of range 0\.\.99/),
    );
  });

  it('names the missing files and how to get them', () => {
    const d = join(dir, 'partial');
    mkdirSync(join(d, 'cifar-10-batches-bin'), { recursive: true });
    writeFileSync(join(d, 'cifar-10-batches-bin', 'data_batch_1.bin'), cifarRecord([1], 1));
    assert.throws(
      () => loadDataset('cifar10', { split: 'train', dataDir: d }),
      (e: Error) =>
        e instanceof UserError &&
        e.message.includes(join(d, 'cifar-10-batches-bin', 'data_batch_2.bin')) &&
        !e.message.includes('data_batch_1.bin') &&
        e.message.includes('cifar-10-binary.tar.gz') &&
        e.message.includes('--data-dir'),
    );
    assert.throws(() => loadDataset('cifar100', { split: 'train', dataDir: join(dir, 'nowhere') }), userError(/missing .*train\.bin/));
  });
});
