import assert from 'node:assert/strict';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { tf } from '../../src/core/tf.js';
import { Linear } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { DistributedSampler } from '../../src/distributed/sampler.js';
import {
  decodeImage,
  evalTransform,
  loadFashionMnist,
  loadImageFolder,
  MultiViewLoader,
  PixelReader,
  pixelStore,
  RandomSampler,
  simclrViews,
  subset,
  type FolderDataset,
  type MultiViewBatch,
  type SkippedFile,
} from '../../src/data/index.js';
import { extractDatasetFeatures, extractFeatures, type FeatureModel } from '../../src/eval/features.js';
import { writeJpeg, writePngFolder } from '../helpers/image-folder.js';
import { tempDir } from '../helpers/run.js';

async function collect(loader: MultiViewLoader, epoch: number): Promise<MultiViewBatch[]> {
  const out: MultiViewBatch[] = [];
  for await (const b of loader.batches(epoch)) out.push(b);
  await loader.close();
  return out;
}

describe('data/folder: decoding and streaming', () => {
  const fmnist = loadFashionMnist('test');
  const dir = tempDir();
  let written: number[];
  let folder: FolderDataset;
  before(async () => {
    written = await writePngFolder(fmnist, join(dir, 'png'), 12);
    folder = (await loadImageFolder({ dir: join(dir, 'png'), valFraction: 0, unlabelled: false, imageSize: 28, seed: 0, valDir: join(dir, 'png') })).train;
  });

  it('PNG files written from Fashion-MNIST decode to exactly their pixels, labelled by their folder', async () => {
    assert.equal(folder.length, 120);
    assert.equal(folder.channels, 1);
    const { pixels, rows, sources } = await new PixelReader(pixelStore(folder)).read(Int32Array.from({ length: 120 }, (_, i) => i));
    const expected = subset(fmnist, written);
    for (let k = 0; k < 120; k++) {
      assert.deepEqual(pixels.subarray(rows[k] * 784, (rows[k] + 1) * 784), expected.pixels.subarray(k * 784, (k + 1) * 784), `image ${folder.files[k]}`);
      assert.equal(sources[k], k);
      assert.equal(folder.classNames[folder.labels[k]], fmnist.classNames[expected.labels[k]].replace(/[^A-Za-z0-9-]/g, '_'));
    }
  });

  it('JPEG photos of different sizes and aspect ratios are resized to cover S x S and centre cropped', async () => {
    const sizes: [number, number][] = [
      [640, 480],
      [300, 800],
      [50, 37],
      [12, 20],
      [64, 64],
    ];
    for (const [i, [w, h]] of sizes.entries()) {
      const path = join(dir, `photo-${i}.jpg`);
      await writeJpeg(path, w, h, i);
      for (const channels of [1, 3]) {
        const image = await decodeImage(path, 32, 32, channels);
        assert.equal(image.length, 32 * 32 * channels);
      }
      // the reference: sharp's own cover resize of the whole image, then the centre crop
      const scale = 32 / Math.min(w, h);
      const [rw, rh] = [Math.max(32, Math.round(w * scale)), Math.max(32, Math.round(h * scale))];
      const full = await sharp(path).resize(rw, rh, { fit: 'fill' }).raw().toBuffer();
      const got = await decodeImage(path, 32, 32, 3);
      const [left, top] = [Math.floor((rw - 32) / 2), Math.floor((rh - 32) / 2)];
      let diff = 0;
      for (let y = 0; y < 32; y++) for (let x = 0; x < 96; x++) diff += Math.abs(got[y * 96 + x] - full[(top + y) * rw * 3 + left * 3 + x]);
      assert.ok(diff / (32 * 96) < 3, `${w}x${h}: mean abs difference to the centre crop ${diff / (32 * 96)}`);
    }
  });

  it('corrupt files in the middle of a folder are skipped once each and counted, replaced by the next file, never a hang', async () => {
    const bad = join(dir, 'bad');
    await writePngFolder(fmnist, bad, 8, 3);
    const { train } = await loadImageFolder({ dir: bad, valFraction: 0, unlabelled: false, imageSize: 28, seed: 0, valDir: bad });
    const jpeg = await sharp(Buffer.alloc(64 * 64 * 3, 128), { raw: { width: 64, height: 64, channels: 3 } })
      .jpeg()
      .toBuffer();
    writeFileSync(train.files[3], jpeg.subarray(0, jpeg.length >> 1)); // a truncated JPEG named .png
    writeFileSync(train.files[10], 'not an image at all');
    copyFileSync(train.files[10], train.files[11]);
    for (const workers of [0, 2]) {
      const skipped: SkippedFile[] = [];
      const loader = new MultiViewLoader({
        dataset: train,
        views: simclrViews(train),
        batchSize: 6,
        sampler: new RandomSampler(train.length, 1),
        seed: 0,
        workers,
        onSkip: (f) => skipped.push(f),
      });
      const batches = [...(await collect(loader, 0)), ...(await collect(loader, 1))];
      assert.equal(batches.length, 8);
      assert.deepEqual(skipped.map((f) => f.path).sort(), [train.files[3], train.files[10], train.files[11]].sort());
      assert.equal(loader.skippedFiles, 3);
      // file 10 and 11 show file 12 (of the same class here), under its label
      for (const b of batches) for (const [k, i] of b.indices.entries()) assert.equal(b.labels[k], train.labels[[10, 11].includes(i) ? 12 : i === 3 ? 4 : i]);
    }
  });

  it('a folder that became unreadable fails the loader with an error (workers and inline), no hang', async () => {
    const gone = join(dir, 'gone');
    await writePngFolder(fmnist, gone, 4, 2);
    const { train } = await loadImageFolder({ dir: gone, valFraction: 0, unlabelled: false, imageSize: 28, seed: 0, valDir: gone });
    for (const f of train.files) writeFileSync(f, 'gone');
    for (const workers of [0, 1]) {
      const loader = new MultiViewLoader({
        dataset: train,
        views: simclrViews(train),
        batchSize: 4,
        sampler: new RandomSampler(train.length, 1),
        seed: 0,
        workers,
      });
      await assert.rejects(collect(loader, 0), /no readable image among 8 consecutive files from .*gone/);
      await loader.close();
    }
  });

  it('a folder trains on the same batches with workers, inline, and split over 2 ranks (global index keys)', async () => {
    const views = simclrViews(folder);
    const base = { dataset: folder, views, seed: 4 };
    const one = await collect(new MultiViewLoader({ ...base, batchSize: 40, sampler: new RandomSampler(folder.length, 9), dropLast: true, workers: 0 }), 2);
    const workers = await collect(new MultiViewLoader({ ...base, batchSize: 40, sampler: new RandomSampler(folder.length, 9), dropLast: true, workers: 2 }), 2);
    const ranks = await Promise.all(
      [0, 1].map((rank) =>
        collect(
          new MultiViewLoader({
            ...base,
            batchSize: 20,
            sampler: new DistributedSampler({ length: folder.length, seed: 9, rank, worldSize: 2, localBatch: 20 }),
            dropLast: true,
            workers: 1,
          }),
          2,
        ),
      ),
    );
    for (const [b, batch] of one.entries()) {
      assert.deepEqual(workers[b].views, batch.views);
      for (let v = 0; v < views.length; v++) {
        const joined = new Float32Array([...ranks[0][b].views[v], ...ranks[1][b].views[v]]);
        assert.deepEqual(joined, batch.views[v]);
      }
      assert.deepEqual([...ranks[0][b].labels, ...ranks[1][b].labels], [...batch.labels]);
    }
  });

  it('streamed feature extraction of a folder equals in-memory extraction of the same images', async () => {
    const rng = new Rng(0);
    const linear = new Linear(784, 8, { rng });
    const model: FeatureModel = { features: (x) => tf.tidy(() => linear.forward(tf.reshape(x, [x.shape[0], 784]))), classifier: { forward: (f) => f } };
    const inMemory = subset(fmnist, written);
    const transform = evalTransform(folder);
    const streamed = await extractDatasetFeatures(model, folder, transform, 32);
    const reference = extractFeatures(model, inMemory, transform, 32);
    const [a, b] = [streamed.features.dataSync(), reference.features.dataSync()];
    assert.equal(a.length, 120 * 8);
    assert.ok(
      a.every((x, i) => x === b[i]),
      'streamed features differ from in-memory ones',
    );
    assert.deepEqual(streamed.labels, folder.labels);
    tf.dispose([streamed.features, streamed.logits, reference.features, reference.logits]);
  });
});
