import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { augmentView, evalTransform, evalView } from '../../src/data/augment/index.js';
import { subset, type ImageDataset } from '../../src/data/dataset.js';
import { loadFashionMnist } from '../../src/data/index.js';
import { extractFeatures } from '../../src/eval/features.js';
import { knnSweep } from '../../src/eval/knn.js';
import { buildConfig } from '../../src/experiment/config.js';
import { backboneFeatures, evalConfig, prepareEvalModel, type BackboneInit } from '../../src/experiment/eval-model.js';
import { imageSet, supervisedView } from '../../src/experiment/linear-eval.js';
import { runKnnEval } from '../../src/experiment/offline-eval.js';
import { writePngFolderCopy } from '../helpers/image-folder.js';
import { tempDir } from '../helpers/run.js';

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/** The `[n, S, S, C]` views of images `indices` of an in-memory dataset, each computed on its own. */
function views(ds: ImageDataset, indices: number[], view: (offset: number, index: number) => Float32Array): Float32Array {
  const bytes = ds.height * ds.width * ds.channels;
  return Float32Array.from(indices.flatMap((i) => Array.from(view(i * bytes, i))));
}

describe('offline evaluation on an image folder (--dataset folder)', function () {
  this.timeout(60_000);
  const dir = tempDir('ssl-zoo-folder-eval-');
  // A training folder and a separate validation folder of Fashion-MNIST PNGs, and the same
  // images in memory (folder order, folder labels).
  let train: ImageDataset;
  let val: ImageDataset;
  let init: BackboneInit;
  before(async () => {
    const fmnist = loadFashionMnist('test');
    train = await writePngFolderCopy(subset(fmnist, range(0, 1000)), join(dir, 'train'), 6, 4);
    val = await writePngFolderCopy(subset(fmnist, range(1000, 2000)), join(dir, 'val'), 3, 4);
    const config = buildConfig({
      dataset: 'folder',
      dataDir: join(dir, 'train'),
      valDir: join(dir, 'val'),
      imageSize: 28,
      backbone: 'mlp',
      methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
    });
    init = { kind: 'random-init', config };
  });

  it("backbone features of the folder's splits are those of the same images in memory (same normalisation, order and labels)", async () => {
    const model = await prepareEvalModel(init, {}, 'test');
    try {
      // The statistics sample (up to 256 images) is the whole training folder: its estimate is the in-memory one.
      assert.deepEqual(model.transform, evalTransform(train));
      assert.notDeepEqual(model.transform.mean, [0.286], 'not the published Fashion-MNIST constants');
      for (const [folder, memory] of [
        [model.experiment.train, train],
        [model.experiment.test!, val],
      ] as const) {
        assert.deepEqual(Array.from(folder.labels), Array.from(memory.labels));
        const features = await backboneFeatures(model, folder, 8);
        const reference = extractFeatures(model.method, memory, evalTransform(train), 8);
        assert.deepEqual(features.dataSync(), reference.features.dataSync());
        tf.dispose([features, reference.features, reference.logits]);
      }
    } finally {
      model.method.dispose();
    }
  });

  it('knn: the validation folder queried against the training folder, as the in-memory copies give', async () => {
    const settings = { ks: [1, 5], temperatures: [0.07, 0.5], distances: ['cosine', 'euclidean'] as const };
    const results = await runKnnEval({
      init,
      data: {},
      ...settings,
      distances: [...settings.distances],
      trainSamples: 0,
      valSamples: 0,
      batchSize: 8,
      seed: 0,
    });
    const model = await prepareEvalModel(init, {}, 'test');
    const memory = extractFeatures(model.method, train, evalTransform(train), 8);
    const queries = extractFeatures(model.method, val, evalTransform(train), 8);
    const reference = knnSweep(memory.features, train.labels, queries.features, val.labels, { ...settings, numClasses: 4 });
    tf.dispose([memory.features, memory.logits, queries.features, queries.logits]);
    model.method.dispose();
    assert.deepEqual(results, reference);
    // 1-NN of the training images among themselves would be 100%: the queries are other images.
    assert.ok(reference[0].top1 < 1, `1-NN top-1 ${reference[0].top1}`);
  });

  it('linear image sets read a folder per batch: crop-flip views keyed by (seed, epoch, index), the eval view otherwise', async () => {
    const model = await prepareEvalModel(init, {}, 'test');
    model.method.dispose();
    const folder = model.experiment.train;
    const view = supervisedView(folder);
    assert.deepEqual(view, supervisedView(train));
    const set = imageSet(folder, model.transform, view, 7);
    const indices = [5, 0, 17, 23];
    const { height: h, width: w, channels: c } = train;
    const inputs = async (epoch: number) => {
      const t = await set.inputs(Int32Array.from(indices), epoch);
      const values = t.dataSync() as Float32Array;
      t.dispose();
      return values;
    };
    for (const epoch of [0, 1]) {
      const expected = views(train, indices, (offset, index) => augmentView(train.pixels, offset, h, w, c, view, Rng.keyed(7, epoch, index, 0)));
      assert.deepEqual(await inputs(epoch), expected, `epoch ${epoch}`);
    }
    assert.notDeepEqual(await inputs(0), await inputs(1), 'each epoch draws new views');
    assert.deepEqual(
      await inputs(-1),
      views(train, indices, (offset) => evalView(train.pixels, offset, h, w, c, model.transform)),
    );
  });

  it("evaluation data options: the run's, except another dataset's or folder's layout", () => {
    const run = buildConfig({ dataset: 'folder', dataDir: 'a', valDir: 'a-val', unlabelled: false, imageSize: 32, channels: 3, valFraction: 0.2 });
    const same = evalConfig(run, {});
    assert.deepEqual([same.dataDir, same.valDir, same.imageSize, same.channels, same.valFraction], ['a', 'a-val', 32, 3, 0.2]);
    const other = evalConfig(buildConfig({ ...run, valDir: undefined, unlabelled: true }), { dataDir: 'b' });
    assert.deepEqual([other.dataDir, other.valDir, other.unlabelled, other.imageSize, other.channels], ['b', undefined, false, 32, 3]);
    const unlabelled = evalConfig(run, { unlabelled: true });
    assert.deepEqual(
      [unlabelled.dataDir, unlabelled.valDir, unlabelled.unlabelled],
      ['a', undefined, true],
      'read unlabelled, the folder has no validation split',
    );
    const inMemory = evalConfig(run, { dataset: 'fashion-mnist' });
    assert.deepEqual([inMemory.dataDir, inMemory.valDir, inMemory.channels], [undefined, undefined, undefined]);
  });
});
