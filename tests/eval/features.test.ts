import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { evalTransform, evalView } from '../../src/data/augment/index.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { extractFeatures, type FeatureModel } from '../../src/eval/features.js';

/** Features = the flattened eval view itself; logits = its first two values. */
const identity: FeatureModel = {
  features: (images: Tensor) => tf.reshape(images, [images.shape[0], -1]),
  classifier: { forward: (f: Tensor) => tf.slice(f, [0, 0], [-1, 2]) },
};

describe('eval/extractFeatures', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('gives the eval views of the whole set in dataset order, in batches of any size', () => {
    const ds = syntheticDataset({ split: 'test', seed: 3, size: 37 });
    const t = evalTransform(ds);
    const out = extractFeatures(identity, ds, t, 8);
    assert.deepEqual(out.features.shape, [37, t.cropSize * t.cropSize * ds.channels]);
    assert.deepEqual(out.logits.shape, [37, 2]);
    assert.deepEqual(Array.from(out.labels), Array.from(ds.labels));
    const rows = out.features.arraySync() as number[][];
    for (const i of [0, 8, 36])
      assert.deepEqual(
        Float32Array.from(rows[i]!),
        evalView(ds.pixels, i * ds.height * ds.width * ds.channels, ds.height, ds.width, ds.channels, t),
        `image ${i}`,
      );
    tf.dispose([out.features, out.logits]);
  });

  it('refuses a bad transform with a message naming the field', () => {
    const ds = syntheticDataset({ split: 'test', seed: 3, size: 4 });
    assert.throws(() => extractFeatures(identity, ds, { ...evalTransform(ds), cropSize: 0 }, 8), /transform\.cropSize/);
  });
});
