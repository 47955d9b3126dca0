import assert from 'node:assert/strict';
import { TinyResNet } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { randn } from './helpers.js';

describe('core/module state and modes (on layers)', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('stateDict -> loadStateDict into a differently seeded module gives identical outputs', () => {
    const source = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(1) });
    const target = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(2) });
    const x = randn([3, 8, 8, 1], 7);
    tf.dispose(source.forward(x)); // non-trivial running statistics
    const differ = tf.tidy(() => tf.max(tf.abs(tf.sub(source.eval().forward(x), target.eval().forward(x)))).dataSync()[0]);
    assert.ok(differ > 1e-3, 'different seeds should give different outputs');

    target.loadStateDict(source.stateDict());
    for (const mode of ['eval', 'train'] as const) {
      source.train(mode === 'train');
      target.train(mode === 'train');
      const a = source.forward(x);
      const b = target.forward(x);
      assert.deepEqual(Array.from(a.dataSync()), Array.from(b.dataSync()), `${mode} outputs`);
      tf.dispose([a, b]);
    }
    assert.equal(target.stateDict()['bn1.numBatchesTracked'].dataSync()[0], 2);
    x.dispose();
    source.dispose();
    target.dispose();
  });

  it('loading a state with a wrongly shaped entry throws a clear UserError and changes nothing', () => {
    const gray = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(1) });
    const rgb = new TinyResNet({ inChannels: 3, imageSize: 8, rng: new Rng(1) });
    const before = Array.from(gray.stateDict()['layer1.conv1.weight'].dataSync());
    assert.throws(
      () => gray.loadStateDict(rgb.stateDict()),
      (e: unknown) => e instanceof UserError && /'conv1\.weight' has shape \[3,3,3,32\] but the model expects \[3,3,1,32\]/.test(e.message),
    );
    assert.deepEqual(Array.from(gray.stateDict()['layer1.conv1.weight'].dataSync()), before);
    gray.dispose();
    rgb.dispose();
  });

  it('train() and eval() reach every submodule', () => {
    const net = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(1) });
    const modules = net.namedModules();
    assert.ok(modules.some(([name]) => name === 'layer2.downsample.1'));
    assert.ok(modules.every(([, m]) => m.training));
    net.eval();
    assert.ok(modules.every(([, m]) => !m.training));
    net.train();
    assert.ok(modules.every(([, m]) => m.training));
    net.dispose();
  });
});
