import assert from 'node:assert/strict';
import { Backbone, BACKBONE_NAMES, createBackbone, registerBackbone, TinyResNet, type BackboneOptions } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { UserError } from '../../src/core/errors.js';
import { BatchNorm, Linear, type BatchMoments } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { randn } from '../core/helpers.js';

const conv = (k: number, cin: number, cout: number) => k * k * cin * cout;
const bn = (c: number) => 2 * c;
/** A basic block's parameters, with the 1x1 conv + batch norm shortcut when the shape changes. */
const basicBlock = (cin: number, cout: number, stride: number) =>
  conv(3, cin, cout) + bn(cout) + conv(3, cout, cout) + bn(cout) + (stride !== 1 || cin !== cout ? conv(1, cin, cout) + bn(cout) : 0);

function build(name: string, overrides: Partial<BackboneOptions> = {}): Backbone {
  return createBackbone(name, { inChannels: 3, imageSize: 8, rng: new Rng(1), ...overrides });
}

function forwardShape(backbone: Backbone, batch: number, size: number, channels: number): number[] {
  const x = randn([batch, size, size, channels], 3);
  const y = backbone.forward(x);
  const shape = y.shape;
  assert.ok(y.dataSync().every(Number.isFinite));
  tf.dispose([x, y]);
  return shape;
}

describe('backbones', () => {
  before(async () => {
    await initEngine('cpu');
  });

  describe('resnet18', () => {
    it("has torchvision's parameter count without fc (11,176,512) and names", () => {
      const net = build('resnet18');
      assert.equal(net.numParameters(), 11_176_512);
      assert.equal(net.featureDim, 512);
      const state = net.stateDict();
      assert.deepEqual(state['conv1.weight'].shape, [7, 7, 3, 64]);
      assert.deepEqual(state['layer1.0.conv1.weight'].shape, [3, 3, 64, 64]);
      assert.deepEqual(state['layer2.0.downsample.0.weight'].shape, [1, 1, 64, 128]);
      assert.deepEqual(state['layer4.1.bn2.runningVar'].shape, [512]);
      assert.ok(!('layer1.0.downsample.0.weight' in state));
      assert.ok(!Object.keys(state).some((k) => k.startsWith('fc')));
      assert.deepEqual(forwardShape(net, 2, 16, 3), [2, 512]);
      net.dispose();
    });

    it('with cifarStem: 3x3 stride-1 padding-2 first conv, no max-pool (solo-learn)', () => {
      const net = build('resnet18', { cifarStem: true });
      assert.deepEqual(net.stateDict()['conv1.weight'].shape, [3, 3, 3, 64]);
      assert.equal(net.numParameters(), 11_176_512 - conv(7, 3, 64) + conv(3, 3, 64));
      const x = randn([2, 8, 8, 3], 1);
      const stem = (net.namedChildren()[0][1] as Backbone).forward(x);
      assert.deepEqual(stem.shape, [2, 10, 10, 64], '8x8 + padding 2 -> 10x10, as in solo-learn');
      tf.dispose([x, stem]);
      assert.deepEqual(forwardShape(net, 2, 8, 3), [2, 512]);
      net.dispose();
    });
  });

  it("resnet50 has torchvision's parameter count without fc (23,508,032) and 2048 features", () => {
    const net = build('resnet50');
    assert.equal(net.numParameters(), 23_508_032);
    assert.equal(net.featureDim, 2048);
    const state = net.stateDict();
    assert.deepEqual(state['layer1.0.conv3.weight'].shape, [1, 1, 64, 256]);
    assert.deepEqual(state['layer1.0.downsample.0.weight'].shape, [1, 1, 64, 256]);
    assert.deepEqual(state['layer3.5.conv2.weight'].shape, [3, 3, 256, 256]);
    assert.deepEqual(forwardShape(net, 2, 8, 3), [2, 2048]);
    net.dispose();
  });

  describe('tiny_resnet', () => {
    it('maps 28x28 grayscale to 128 features, with the hand-derived parameter count', () => {
      const net = build('tiny_resnet', { inChannels: 1, imageSize: 28 });
      const expected = conv(3, 1, 32) + bn(32) + basicBlock(32, 32, 1) + basicBlock(32, 64, 2) + basicBlock(64, 128, 2);
      assert.equal(expected, 306_784);
      assert.equal(net.numParameters(), expected);
      assert.equal(net.featureDim, 128);
      assert.deepEqual(forwardShape(net, 2, 28, 1), [2, 128]);
      net.dispose();
    });

    it('works for other sizes and channel counts', () => {
      const net = build('tiny_resnet', { inChannels: 3, imageSize: 16 });
      assert.equal(net.numParameters(), 306_784 + conv(3, 2, 32));
      assert.deepEqual(forwardShape(net, 2, 16, 3), [2, 128]);
      net.dispose();
    });

    it('does not leak tensors over train-mode forward + backward steps', () => {
      const net = build('tiny_resnet', { inChannels: 1, imageSize: 8 });
      const x = randn([4, 8, 8, 1], 5);
      const step = () => {
        const { value, grads } = tf.variableGrads(() => tf.mean(tf.square(net.forward(x))) as tf.Scalar);
        assert.equal(Object.keys(grads).length, net.parameters().length);
        tf.dispose([value, grads]);
      };
      step(); // warm up
      const before = tf.memory().numTensors;
      for (let i = 0; i < 3; i++) step();
      tf.tidy(() => {
        net.eval().forward(x);
      });
      assert.equal(tf.memory().numTensors, before);
      x.dispose();
      net.dispose();
    });
  });

  describe('crops smaller than the image (multi-crop)', () => {
    it('tiny_resnet and resnet18 (both stems) built for 28 px take 12 px crops: global average pooling, any size', () => {
      for (const [name, options] of [
        ['tiny_resnet', {}],
        ['resnet18', { cifarStem: true }],
        ['resnet18', { cifarStem: false }],
      ] as const) {
        const net = build(name, { inChannels: 1, imageSize: 28, ...options });
        assert.equal(net.inputSize, undefined, `${name} takes any input size`);
        assert.deepEqual(forwardShape(net, 2, 12, 1), [2, net.featureDim], name);
        assert.deepEqual(forwardShape(net, 2, 28, 1), [2, net.featureDim], name);
        net.dispose();
      }
    });

    it('mlp takes its image size only and refuses other sizes with a clear error', () => {
      const net = build('mlp', { inChannels: 1, imageSize: 28 });
      assert.equal(net.inputSize, 28);
      assert.deepEqual(forwardShape(net, 2, 28, 1), [2, 256]);
      const x = randn([2, 12, 12, 1], 1);
      assert.throws(() => net.forward(x), /^Error: mlp backbone: input \[2, 12, 12, 1\] is not allowed; it takes 28 x 28 images only/);
      tf.dispose(x);
      net.dispose();
    });
  });

  describe('mlp', () => {
    it('flattens and applies Linear + BatchNorm + ReLU layers (default [256, 256])', () => {
      const net = build('mlp', { inChannels: 1, imageSize: 8 });
      assert.equal(net.featureDim, 256);
      assert.equal(net.numParameters(), 64 * 256 + 256 + bn(256) + 256 * 256 + 256 + bn(256));
      assert.deepEqual(
        net.namedParameters().map(([n]) => n),
        ['fc1.weight', 'fc1.bias', 'bn1.weight', 'bn1.bias', 'fc2.weight', 'fc2.bias', 'bn2.weight', 'bn2.bias'],
      );
      const x = randn([4, 8, 8, 1], 5);
      const y = net.forward(x);
      assert.deepEqual(y.shape, [4, 256]);
      assert.ok(
        y.dataSync().every((v) => v >= 0),
        'ends with a ReLU',
      );
      tf.dispose([x, y]);
      net.dispose();
    });

    it('takes custom hidden widths and rejects bad ones', () => {
      const net = build('mlp', { inChannels: 3, imageSize: 4, mlpHidden: [32, 16, 8] });
      assert.equal(net.featureDim, 8);
      assert.deepEqual(forwardShape(net, 3, 4, 3), [3, 8]);
      net.dispose();
      for (const mlpHidden of [[], [16, 0], [2.5]]) {
        assert.throws(
          () => build('mlp', { mlpHidden }),
          (e: unknown) => e instanceof UserError && /^mlpHidden: .* expected a non-empty list/.test(e.message),
        );
      }
    });
  });

  describe('initialisation', () => {
    it('is a function of the seed', () => {
      const a = build('tiny_resnet', { rng: new Rng(42) });
      const b = build('tiny_resnet', { rng: new Rng(42) });
      const c = build('tiny_resnet', { rng: new Rng(43) });
      const [sa, sb, sc] = [a, b, c].map((m) => m.stateDict());
      for (const name of Object.keys(sa)) {
        assert.deepEqual(Array.from(sa[name].dataSync()), Array.from(sb[name].dataSync()), name);
      }
      const [wa, wc] = [sa, sc].map((s) => Array.from(s['layer2.conv1.weight'].dataSync()));
      assert.ok(
        wa.every((v, i) => v !== wc[i]),
        'a different seed changes every weight',
      );
      for (const m of [a, b, c]) m.dispose();
    });

    it('uses He normal (fan-out) convolutions and gamma=1, beta=0 batch norms', () => {
      const net = build('resnet18', { rng: new Rng(7) });
      const w = Array.from(net.stateDict()['layer3.0.conv2.weight'].dataSync());
      const std = Math.sqrt(w.reduce((s, v) => s + v * v, 0) / w.length);
      assert.ok(Math.abs(std / Math.sqrt(2 / (3 * 3 * 256)) - 1) < 0.01, `std ${std}`);
      assert.ok(
        net
          .stateDict()
          ['layer3.0.bn2.weight'].dataSync()
          .every((v) => v === 1),
      );
      assert.ok(
        net
          .stateDict()
          ['layer3.0.bn2.bias'].dataSync()
          .every((v) => v === 0),
      );
      net.dispose();
    });
  });

  describe('registry', () => {
    it('lists the built-in backbones', () => {
      for (const name of ['resnet18', 'resnet50', 'tiny_resnet', 'mlp']) assert.ok(BACKBONE_NAMES.includes(name), name);
    });

    it('rejects an unknown name with a UserError naming the field, the value and the choices', () => {
      assert.throws(
        () => build('vit_huge'),
        (e: unknown) =>
          e instanceof UserError &&
          e.message.startsWith('backbone: "vit_huge" is not allowed') &&
          e.message.includes('resnet18 | resnet50 | tiny_resnet | mlp | vit_tiny | vit_small'),
      );
    });

    it('rejects bad sizes', () => {
      const userError = (pattern: RegExp) => (e: unknown) => e instanceof UserError && pattern.test(e.message);
      assert.throws(() => build('tiny_resnet', { inChannels: 0 }), userError(/^inChannels: 0 is not allowed/));
      assert.throws(() => build('mlp', { imageSize: 2.5 }), userError(/^imageSize: 2\.5 is not allowed/));
    });

    it('accepts user backbones, once per name', () => {
      class Linear1 extends Backbone {
        readonly featureDim = 5;
        constructor(options: BackboneOptions) {
          super();
          this.addModule('fc', new Linear(options.imageSize ** 2 * options.inChannels, 5, { rng: options.rng }));
        }
        forward(x: Tensor): Tensor {
          return tf.tidy(() => (this.namedChildren()[0][1] as Linear).forward(tf.reshape(x, [x.shape[0], -1])));
        }
      }
      registerBackbone('test_linear', (options) => new Linear1(options));
      assert.ok(BACKBONE_NAMES.includes('test_linear'));
      const net = build('test_linear', { imageSize: 4 });
      assert.deepEqual(forwardShape(net, 2, 4, 3), [2, 5]);
      net.dispose();
      assert.throws(() => registerBackbone('test_linear', (options) => new Linear1(options)), /already registered/);
    });
  });

  it('forward uses batch norms swapped in with replaceModule (how SyncBatchNorm is installed)', () => {
    class CountingBatchNorm extends BatchNorm {
      calls = 0;
      protected override batchMoments(x: Tensor, reduceAxes: number[]): BatchMoments {
        this.calls++;
        return super.batchMoments(x, reduceAxes);
      }
    }
    const net = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(1) });
    const replacements: CountingBatchNorm[] = [];
    for (const [, parent] of net.namedModules()) {
      for (const [name, child] of parent.namedChildren()) {
        if (!(child instanceof BatchNorm)) continue;
        const sync = new CountingBatchNorm(child.numFeatures);
        sync.loadStateDict(child.stateDict());
        child.dispose();
        parent.replaceModule(name, sync);
        replacements.push(sync);
      }
    }
    assert.equal(replacements.length, 9); // bn1, 2 per block, 2 downsample norms
    assert.deepEqual(forwardShape(net, 2, 8, 1), [2, 128]);
    assert.ok(replacements.every((m) => m.calls === 1));
    net.dispose();
  });
});
