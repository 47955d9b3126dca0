/**
 * GroupNorm and LayerNorm (src/core/layers.ts): closed forms, PyTorch parity
 * (tests/fixtures/core/norm-torch.json, float64, written by scripts/gen_norm_fixtures.py),
 * finite-difference gradient checks, per-sample independence, the default group count and
 * `normLayer`.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { initEngine } from '../../src/core/engine.js';
import { BatchNorm, DEFAULT_NORM_GROUPS, defaultNumGroups, GroupNorm, LayerNorm, NORM_KINDS, normLayer } from '../../src/core/layers.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { gradientCheck, maxAbsDiff, randn } from './helpers.js';

interface NormCase {
  kind: 'group' | 'layer';
  groups: number | null;
  shape: number[];
  eps: number;
  input: number[];
  weight: number[];
  bias: number[];
  upstream: number[];
  output: number[];
  gradInput: number[];
  gradWeight: number[];
  gradBias: number[];
}

const fixture = JSON.parse(readFileSync(new URL('../../../tests/fixtures/core/norm-torch.json', import.meta.url), 'utf8')) as {
  torch: string;
  cases: NormCase[];
};

/** max |a − b| / max |b|. */
function maxRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]!));
  return maxAbsDiff(a, b) / scale;
}

describe('core/layers: GroupNorm and LayerNorm', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('GroupNorm matches the closed form: per sample and group, biased variance, per-channel affine', () => {
    // One sample, one pixel, 4 channels in 2 groups: [1, 3 | 2, 6].
    // Group 0: mean 2, variance 1; group 1: mean 4, variance 4.
    const eps = 1e-5;
    const gn = new GroupNorm(2, 4, { eps });
    gn.weight!.assign(tf.tensor1d([1, 2, 3, 4]));
    gn.bias!.assign(tf.tensor1d([0, 0, 1, -1]));
    const x = tf.tensor4d([1, 3, 2, 6], [1, 1, 1, 4]);
    const y = gn.forward(x);
    const a = 1 / Math.sqrt(1 + eps);
    const b = 2 / Math.sqrt(4 + eps);
    const expected = [-a * 1, a * 2, -b * 3 + 1, b * 4 - 1];
    assert.ok(maxAbsDiff(y.dataSync(), expected) < 1e-6, `${Array.from(y.dataSync())} vs ${expected}`);
    // [B, H, W, C] with spatial extent: statistics over (H, W, C/G) of each sample.
    const x2 = randn([3, 2, 5, 6], 7, 2);
    const gn2 = new GroupNorm(3, 6);
    const y2 = gn2.forward(x2);
    const xs = x2.dataSync();
    const ref = new Float64Array(xs.length);
    for (let s = 0; s < 3; s++) {
      for (let g = 0; g < 3; g++) {
        const idx: number[] = [];
        for (let p = 0; p < 10; p++) for (let c = 2 * g; c < 2 * g + 2; c++) idx.push(s * 60 + p * 6 + c);
        const mean = idx.reduce((acc, i) => acc + xs[i]!, 0) / idx.length;
        const variance = idx.reduce((acc, i) => acc + (xs[i]! - mean) ** 2, 0) / idx.length;
        for (const i of idx) ref[i] = (xs[i]! - mean) / Math.sqrt(variance + 1e-5);
      }
    }
    assert.ok(maxAbsDiff(y2.dataSync(), ref) < 1e-5);
    tf.dispose([x, y, x2, y2]);
    gn.dispose();
    gn2.dispose();
  });

  it('LayerNorm normalises each row over the last axis; on [B, C] it equals GroupNorm(1, C)', () => {
    const x = randn([5, 8], 3, 3);
    const ln = new LayerNorm(8);
    const gn = new GroupNorm(1, 8);
    const y = ln.forward(x);
    const rows = (y as tf.Tensor2D).arraySync();
    for (const row of rows) {
      const mean = row.reduce((a, v) => a + v, 0) / 8;
      const variance = row.reduce((a, v) => a + (v - mean) ** 2, 0) / 8;
      assert.ok(Math.abs(mean) < 1e-6 && Math.abs(variance - 1) < 1e-3, `${mean} ${variance}`);
    }
    const z = gn.forward(x);
    assert.ok(maxAbsDiff(y.dataSync(), z.dataSync()) < 1e-6);
    // [B, H, W, C]: per pixel (ConvNeXt's channels-last layer norm).
    const x4 = randn([2, 3, 3, 8], 4);
    const y4 = ln.forward(x4);
    const perPixel = ln.forward(tf.reshape(x4, [-1, 8]));
    assert.ok(maxAbsDiff(y4.dataSync(), perPixel.dataSync()) === 0);
    tf.dispose([x, y, z, x4, y4, perPixel]);
    ln.dispose();
    gn.dispose();
  });

  describe(`PyTorch ${fixture.torch} parity (float64 reference, relative 1e-5 of the largest entry)`, () => {
    for (const c of fixture.cases) {
      const label = c.kind === 'group' ? `GroupNorm(${c.groups}, ${c.shape.at(-1)})` : `LayerNorm(${c.shape.at(-1)})`;
      it(`${label} on [${c.shape}] (eps ${c.eps}): output and gradients w.r.t. input, weight, bias`, () => {
        const channels = c.shape.at(-1)!;
        const layer = c.kind === 'group' ? new GroupNorm(c.groups!, channels, { eps: c.eps }) : new LayerNorm(channels, { eps: c.eps });
        layer.weight!.assign(tf.tensor1d(c.weight));
        layer.bias!.assign(tf.tensor1d(c.bias));
        const x = tf.tensor(c.input, c.shape);
        const up = tf.tensor(c.upstream, c.shape);
        const y = layer.forward(x);
        const { grads } = tf.variableGrads(() => tf.sum(tf.mul(layer.forward(x), up)) as tf.Scalar, [layer.weight!, layer.bias!]);
        const gx = tf.grad((input: Tensor) => tf.sum(tf.mul(layer.forward(input), up)))(x);
        assert.ok(maxRelative(y.dataSync(), c.output) < 1e-5, `output ${maxRelative(y.dataSync(), c.output)}`);
        assert.ok(maxRelative(gx.dataSync(), c.gradInput) < 1e-5, `input grad ${maxRelative(gx.dataSync(), c.gradInput)}`);
        const gw = grads[layer.weight!.name]!.dataSync();
        const gb = grads[layer.bias!.name]!.dataSync();
        assert.ok(maxRelative(gw, c.gradWeight) < 1e-5, `weight grad ${maxRelative(gw, c.gradWeight)}`);
        assert.ok(maxRelative(gb, c.gradBias) < 1e-5, `bias grad ${maxRelative(gb, c.gradBias)}`);
        tf.dispose([x, up, y, gx, ...Object.values(grads)]);
        layer.dispose();
      });
    }
  });

  for (const [label, make, shape] of [
    ['GroupNorm(2, 6) on [B, H, W, C]', () => new GroupNorm(2, 6), [3, 2, 3, 6]],
    // (groups of 3 features: with 2, the normalised pair is ±1 up to eps, a near-zero gradient)
    ['GroupNorm(2, 6) on [B, C]', () => new GroupNorm(2, 6), [4, 6]],
    ['GroupNorm(1, 4) (layer norm of conv nets) on [B, H, W, C]', () => new GroupNorm(1, 4), [2, 3, 2, 4]],
    ['GroupNorm(2, 4), no affine', () => new GroupNorm(2, 4, { affine: false }), [2, 2, 2, 4]],
    ['LayerNorm(5) on [B, C]', () => new LayerNorm(5), [4, 5]],
    ['LayerNorm(3) on [B, H, W, C]', () => new LayerNorm(3), [2, 2, 2, 3]],
  ] as const) {
    it(`gradients match finite differences: ${label}`, () => {
      const layer = make();
      if (layer.weight) {
        const c = layer.weight.shape[0]!;
        layer.weight.assign(tf.add(tf.ones([c]), randn([c], 31, 0.5)));
        layer.bias!.assign(randn([c], 32, 0.5));
      }
      const x = tf.variable(randn([...shape], 33, 2));
      const r = randn([...shape], 34);
      const loss = () => tf.sum(tf.mul(layer.forward(x), r)) as tf.Scalar;
      const vars = layer.weight ? [x, layer.weight, layer.bias!] : [x];
      for (const { error, norm } of gradientCheck(loss, vars)) {
        assert.ok(norm > 1e-2, 'gradient should not vanish');
        assert.ok(error < 1e-3, `relative error ${error}`);
      }
      tf.dispose([x, r]);
      layer.dispose();
    });
  }

  it('each sample is normalised on its own (GroupNorm, LayerNorm), unlike batch norm in training mode', () => {
    const x = randn([4, 3, 3, 8], 9, 2);
    const other = tf.concat([tf.slice(x, [0, 0, 0, 0], [2, -1, -1, -1]), randn([2, 3, 3, 8], 10, 5)], 0);
    for (const layer of [new GroupNorm(4, 8), new GroupNorm(1, 8), new LayerNorm(8), new BatchNorm(8)]) {
      const a = tf.slice(layer.forward(x), [0, 0, 0, 0], [2, -1, -1, -1]);
      const b = tf.slice(layer.forward(other), [0, 0, 0, 0], [2, -1, -1, -1]);
      const diff = maxAbsDiff(a.dataSync(), b.dataSync());
      if (layer instanceof BatchNorm) assert.ok(diff > 1e-2, `batch norm couples samples: ${diff}`);
      else assert.equal(diff, 0, `${layer.constructor.name}: samples 0, 1 changed with samples 2, 3 (${diff})`);
      tf.dispose([a, b]);
      layer.dispose();
    }
    tf.dispose([x, other]);
  });

  it('has PyTorch-named parameters weight = 1, bias = 0 [C], no buffers, no train/eval difference', () => {
    const gn = new GroupNorm(4, 8);
    assert.deepEqual(
      gn.namedParameters().map(([n, v]) => [n, v.shape]),
      [
        ['weight', [8]],
        ['bias', [8]],
      ],
    );
    assert.deepEqual(Array.from(gn.weight!.dataSync()), new Array(8).fill(1));
    assert.deepEqual(Array.from(gn.bias!.dataSync()), new Array(8).fill(0));
    assert.equal(gn.namedBuffers().length, 0);
    assert.equal(new GroupNorm(2, 4, { affine: false }).numParameters(), 0);
    assert.equal(new LayerNorm(6).numParameters(), 12);
    const x = randn([2, 2, 2, 8], 5);
    const train = gn.forward(x);
    gn.eval();
    const evalOut = gn.forward(x);
    assert.equal(maxAbsDiff(train.dataSync(), evalOut.dataSync()), 0);
    tf.dispose([x, train, evalOut]);
    gn.dispose();
  });

  it('rejects indivisible channels, wrong channel counts and ranks', () => {
    assert.throws(() => new GroupNorm(3, 8), /divisible/);
    assert.throws(() => new GroupNorm(0, 8), /positive/);
    assert.throws(() => new LayerNorm(0), /positive/);
    const gn = new GroupNorm(2, 4);
    const wrong = tf.zeros([2, 6]);
    assert.throws(() => gn.forward(wrong), /GroupNorm expects 4 features/);
    const flat = tf.zeros([4]);
    assert.throws(() => gn.forward(flat), /GroupNorm expects \[B, C\]/);
    assert.throws(() => new LayerNorm(4).forward(wrong), /LayerNorm expects 4 features/);
    tf.dispose([wrong, flat]);
    gn.dispose();
  });

  it('frees its intermediates', () => {
    const x = randn([2, 3, 3, 8], 1);
    const layers = [new GroupNorm(4, 8), new LayerNorm(8)];
    const before = tf.memory().numTensors;
    for (const layer of layers) {
      const { value, grads } = tf.variableGrads(() => tf.sum(layer.forward(x)) as tf.Scalar, layer.parameters());
      tf.dispose([value, ...Object.values(grads)]);
      layer.forward(x).dispose();
    }
    assert.equal(tf.memory().numTensors, before);
    tf.dispose(x);
  });

  it('defaultNumGroups: 32 when it divides C, else the largest divisor up to 32 (≥ 2 channels per group for vectors)', () => {
    assert.equal(DEFAULT_NORM_GROUPS, 32);
    const cases: Array<[number, number, number]> = [
      // [channels, minChannelsPerGroup, groups]
      [64, 1, 32],
      [2048, 1, 32],
      [32, 1, 32],
      [48, 1, 24],
      [100, 1, 25],
      [16, 1, 16],
      [37, 1, 1],
      [1, 1, 1],
      [256, 2, 32],
      [32, 2, 16],
      [16, 2, 8],
      [3, 2, 1],
    ];
    for (const [c, min, g] of cases) assert.equal(defaultNumGroups(c, min), g, `C=${c} min=${min}`);
  });

  it('normLayer builds batch, group and layer norms for feature maps and vectors', () => {
    assert.deepEqual([...NORM_KINDS], ['batch', 'group', 'layer']);
    const describe = (l: unknown) =>
      l instanceof GroupNorm
        ? `GroupNorm(${l.numGroups}, ${l.numChannels})`
        : l instanceof LayerNorm
          ? `LayerNorm(${l.normalizedShape})`
          : l instanceof BatchNorm
            ? `BatchNorm(${l.numFeatures})`
            : 'other';
    const built = [
      normLayer('batch', 64, true),
      normLayer('group', 64, true),
      normLayer('layer', 64, true),
      normLayer('batch', 32, false),
      normLayer('group', 32, false),
      normLayer('layer', 32, false),
    ];
    assert.deepEqual(built.map(describe), ['BatchNorm(64)', 'GroupNorm(32, 64)', 'GroupNorm(1, 64)', 'BatchNorm(32)', 'GroupNorm(16, 32)', 'LayerNorm(32)']);
    for (const l of built) l.dispose();
    assert.throws(() => normLayer('instance' as never, 8, true), /unknown normalisation 'instance'/);
  });
});
