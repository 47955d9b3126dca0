/**
 * `BackboneOptions.norm` ('batch' | 'group' | 'layer') for resnet18/50, tiny_resnet and mlp:
 * which layers each choice builds, under the same (torchvision) names, parameter counts and
 * shapes; and the gradient cache's precondition: with group or layer norm a backbone treats
 * every sample on its own, so its outputs on a batch equal the concatenation of its outputs on
 * chunks of the batch, and the parameter gradient of a per-sample loss is the sum of the
 * chunks' gradients. With batch norm (training mode) neither holds.
 */
import assert from 'node:assert/strict';
import { Backbone, createBackbone, type BackboneOptions } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { UserError } from '../../src/core/errors.js';
import { BatchNorm, GroupNorm, LayerNorm, type NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { hasBatchNorm } from '../../src/methods/base.js';
import { randn } from '../core/helpers.js';

function build(name: string, norm: NormKind | undefined, overrides: Partial<BackboneOptions> = {}): Backbone {
  return createBackbone(name, { inChannels: 3, imageSize: 8, rng: new Rng(1), norm, ...overrides });
}

/** Each normalisation layer of the tree as `name: Kind(args)`. */
function normLayers(net: Backbone): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, m] of net.namedModules()) {
    if (m instanceof GroupNorm) out[name] = `GroupNorm(${m.numGroups}, ${m.numChannels})`;
    else if (m instanceof LayerNorm) out[name] = `LayerNorm(${m.normalizedShape})`;
    else if (m instanceof BatchNorm) out[name] = `BatchNorm(${m.numFeatures})`;
  }
  return out;
}

/** max |a − b| / max |b|. */
function maxRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

const NORMS: NormKind[] = ['batch', 'group', 'layer'];

describe('backbones: norm option (batch | group | layer)', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('resnet18: same names and parameter count (11,176,512) for every norm; no running statistics without batch norm', () => {
    const keys: Record<string, string[]> = {};
    for (const norm of NORMS) {
      const net = build('resnet18', norm);
      assert.equal(net.numParameters(), 11_176_512, norm);
      const layers = normLayers(net);
      assert.equal(Object.keys(layers).length, 1 + 8 * 2 + 3, `${norm}: stem + 2 per block + 3 downsamples`);
      const expect = (c: number) => (norm === 'batch' ? `BatchNorm(${c})` : norm === 'group' ? `GroupNorm(32, ${c})` : `GroupNorm(1, ${c})`);
      assert.equal(layers['bn1'], expect(64));
      assert.equal(layers['layer1.0.bn2'], expect(64));
      assert.equal(layers['layer2.0.downsample.1'], expect(128));
      assert.equal(layers['layer4.1.bn2'], expect(512));
      assert.equal(net.namedBuffers().length, norm === 'batch' ? 3 * 20 : 0, norm);
      keys[norm] = net.namedParameters().map(([n]) => n);
      assert.deepEqual(forwardShape(net, 2), [2, 512]);
      net.dispose();
    }
    assert.deepEqual(keys['group'], keys['batch']);
    assert.deepEqual(keys['layer'], keys['batch']);
    assert.ok(keys['group']!.includes('layer3.0.bn2.weight') && keys['group']!.includes('layer2.0.downsample.1.bias'));
  });

  it('resnet50 with group norm: 23,508,032 parameters, 2048 features, 32 groups everywhere', () => {
    const net = build('resnet50', 'group');
    assert.equal(net.numParameters(), 23_508_032);
    const layers = normLayers(net);
    assert.ok(
      Object.values(layers).every((l) => /^GroupNorm\(32, \d+\)$/.test(l)),
      JSON.stringify(layers),
    );
    assert.equal(layers['layer4.2.bn3'], 'GroupNorm(32, 2048)');
    assert.deepEqual(forwardShape(net, 2), [2, 2048]);
    net.dispose();
  });

  it('tiny_resnet: 306,784 parameters (1 channel) for every norm; group = GroupNorm(32, C), layer = GroupNorm(1, C)', () => {
    for (const norm of NORMS) {
      const net = build('tiny_resnet', norm, { inChannels: 1 });
      assert.equal(net.numParameters(), 306_784, norm);
      const layers = normLayers(net);
      assert.equal(Object.keys(layers).length, 1 + 3 * 2 + 2);
      if (norm === 'group') assert.equal(layers['layer3.bn2'], 'GroupNorm(32, 128)');
      if (norm === 'layer') assert.equal(layers['bn1'], 'GroupNorm(1, 32)');
      assert.deepEqual(forwardShape(net, 2, 1), [2, 128]);
      net.dispose();
    }
  });

  it('mlp: group = GroupNorm over [B, C] with ≥ 2 features per group, layer = LayerNorm; same names and counts', () => {
    for (const norm of NORMS) {
      const net = build('mlp', norm, { inChannels: 1, mlpHidden: [256, 32, 100] });
      assert.equal(net.numParameters(), 64 * 256 + 256 + 512 + 256 * 32 + 32 + 64 + 32 * 100 + 100 + 200);
      const expected = {
        batch: { bn1: 'BatchNorm(256)', bn2: 'BatchNorm(32)', bn3: 'BatchNorm(100)' },
        group: { bn1: 'GroupNorm(32, 256)', bn2: 'GroupNorm(16, 32)', bn3: 'GroupNorm(25, 100)' },
        layer: { bn1: 'LayerNorm(256)', bn2: 'LayerNorm(32)', bn3: 'LayerNorm(100)' },
      }[norm];
      assert.deepEqual(normLayers(net), expected);
      assert.deepEqual(
        net
          .namedParameters()
          .map(([n]) => n)
          .filter((n) => n.startsWith('bn')),
        ['bn1.weight', 'bn1.bias', 'bn2.weight', 'bn2.bias', 'bn3.weight', 'bn3.bias'],
      );
      assert.deepEqual(forwardShape(net, 3, 1), [3, 100]);
      net.dispose();
    }
  });

  it('default is batch norm; a bad norm is a UserError naming the field, the value and the choices', () => {
    const net = createBackbone('tiny_resnet', { inChannels: 1, imageSize: 8, rng: new Rng(1) });
    assert.equal(normLayers(net)['bn1'], 'BatchNorm(32)');
    net.dispose();
    assert.throws(
      () => build('resnet18', 'instance' as NormKind),
      (e: unknown) => e instanceof UserError && e.message === 'norm: "instance" is not allowed; expected batch | group | layer',
    );
  });

  it('hasBatchNorm: true with batch norm in training mode, false in eval mode and with group or layer norm', () => {
    for (const name of ['tiny_resnet', 'mlp']) {
      const nets = NORMS.map((norm) => build(name, norm));
      assert.deepEqual(
        nets.map((n) => hasBatchNorm(n)),
        [true, false, false],
        name,
      );
      assert.equal(hasBatchNorm(nets[0]!.eval()), false);
      for (const n of nets) n.dispose();
    }
  });

  describe('gradient cache precondition: the batch in chunks gives the same outputs and gradients', function () {
    this.timeout(120_000);
    const B = 6;
    // Uneven chunks, down to one sample (batch norm needs two per chunk in training mode).
    const chunksFor = (norm: NormKind) => (norm === 'batch' ? [4, 2] : [2, 3, 1]);

    /** Outputs and parameter gradients of Σ out · up on the whole batch, and summed over chunks. */
    function wholeAndChunked(net: Backbone, x: Tensor, up: Tensor, chunks: number[]) {
      const params = net.parameters();
      const run = (xs: Tensor, us: Tensor) => {
        const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(net.forward(xs), us)) as tf.Scalar, params);
        value.dispose();
        return grads;
      };
      const whole = { out: net.forward(x).dataSync(), grads: run(x, up) };
      const outs: number[] = [];
      const summed: Record<string, Tensor> = {};
      let start = 0;
      for (const size of chunks) {
        const xc = tf.slice(x, start, size);
        const uc = tf.slice(up, start, size);
        const y = net.forward(xc);
        outs.push(...y.dataSync());
        const grads = run(xc, uc);
        for (const [k, g] of Object.entries(grads)) {
          const prev = summed[k];
          summed[k] = prev ? tf.add(prev, g) : tf.clone(g);
          tf.dispose([prev, g] as Tensor[]);
        }
        tf.dispose([xc, uc, y]);
        start += size;
      }
      const outError = maxRelative(outs, whole.out);
      let gradError = 0;
      for (const [k, g] of Object.entries(whole.grads)) gradError = Math.max(gradError, maxRelative(summed[k]!.dataSync(), g.dataSync()));
      tf.dispose([...Object.values(whole.grads), ...Object.values(summed)]);
      return { outError, gradError };
    }

    // resnet18 (the slowest) with group norm only: the same code paths as tiny_resnet otherwise.
    const cases: Array<[string, Partial<BackboneOptions>, NormKind[]]> = [
      ['tiny_resnet', { inChannels: 1, imageSize: 8 }, NORMS],
      ['resnet18', { inChannels: 3, imageSize: 8, cifarStem: true }, ['group']],
      ['mlp', { inChannels: 3, imageSize: 4, mlpHidden: [64, 32] }, NORMS],
    ];
    for (const [name, options, norms] of cases) {
      for (const norm of norms) {
        it(`${name}, ${norm} norm: ${norm === 'batch' ? 'chunks DIFFER (negative control)' : 'chunks equal the batch (relative 1e-5)'}`, () => {
          const net = build(name, norm, options);
          const x = randn([B, options.imageSize!, options.imageSize!, options.inChannels!], 11);
          const up = randn([B, net.featureDim], 12);
          const { outError, gradError } = wholeAndChunked(net, x, up, chunksFor(norm));
          if (norm === 'batch') {
            assert.ok(outError > 1e-2 && gradError > 1e-2, `batch norm should couple samples: ${outError}, ${gradError}`);
          } else {
            assert.ok(outError <= 1e-5, `outputs: ${outError}`);
            assert.ok(gradError <= 1e-5, `parameter gradients: ${gradError}`);
          }
          tf.dispose([x, up]);
          net.dispose();
        });
      }
    }
  });
});

function forwardShape(net: Backbone, batch: number, channels = 3): number[] {
  const x = randn([batch, 8, 8, channels], 3);
  const y = net.forward(x);
  const shape = y.shape;
  assert.ok(y.dataSync().every(Number.isFinite));
  tf.dispose([x, y]);
  return shape;
}
