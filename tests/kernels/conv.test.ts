import assert from 'node:assert/strict';
import { nativeAddon, oneDnnCpuIsa, setWinogradConvolutions, winogradConvolutions } from '../../src/core/native-kernels.js';
import { tf, type Tensor, type Tensor4D } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, Pick, randn, requireNativeKernels } from './helpers.js';

type Pad = 'same' | 'valid' | number | [[number, number], [number, number], [number, number], [number, number]];

interface ConvCase {
  n: number;
  h: number;
  w: number;
  c: number;
  oc: number;
  kh: number;
  kw: number;
  strides: [number, number];
  dilations: [number, number];
  pad: Pad;
}

function describeCase(k: ConvCase): string {
  return `x=[${k.n},${k.h},${k.w},${k.c}] f=[${k.kh},${k.kw},${k.c},${k.oc}] s=${k.strides} d=${k.dilations} pad=${JSON.stringify(k.pad)}`;
}

/** Random convolution problems; `gradients` keeps dilation 1 (tfjs has no dilated conv gradient). */
function cases(seed: number, count: number, gradients: boolean): ConvCase[] {
  const pick = new Pick(seed);
  const out: ConvCase[] = [];
  while (out.length < count) {
    const kh = pick.int(1, 5);
    const kw = pick.one([kh, pick.int(1, 4)]);
    const strides: [number, number] = pick.one([
      [1, 1],
      [2, 2],
      [3, 3],
      [1, 2],
      [2, 1],
    ] as Array<[number, number]>);
    const dilations: [number, number] =
      gradients || strides[0] > 1 || strides[1] > 1
        ? [1, 1]
        : pick.one([
            [1, 1],
            [2, 2],
            [1, 3],
          ] as Array<[number, number]>);
    const pads: Pad[] = [
      'same',
      'valid',
      0,
      1,
      2,
      [
        [0, 0],
        [pick.int(0, 2), pick.int(0, 2)],
        [pick.int(0, 2), pick.int(0, 2)],
        [0, 0],
      ],
    ];
    const k: ConvCase = {
      n: pick.int(1, 3),
      h: pick.int(5, 13),
      w: pick.int(5, 13),
      c: pick.one([1, 3, 4, 8, 17]),
      oc: pick.one([1, 5, 8, 16, 32]),
      kh,
      kw,
      strides,
      dilations,
      pad: pick.one(pads),
    };
    // tfjs sizes the output of a numeric pad from the filter height and stride height only
    // (for both dims): keep those square; the non-square case is tested separately.
    if (typeof k.pad === 'number' && (kh !== kw || strides[0] !== strides[1] || dilations[0] !== dilations[1])) continue;
    const effH = (kh - 1) * dilations[0] + 1;
    const effW = (kw - 1) * dilations[1] + 1;
    const [pt, pb, pl, pr] =
      typeof k.pad === 'number' ? [k.pad, k.pad, k.pad, k.pad] : Array.isArray(k.pad) ? [k.pad[1][0], k.pad[1][1], k.pad[2][0], k.pad[2][1]] : [0, 0, 0, 0];
    if (k.pad !== 'same' && (k.h + pt + pb < effH || k.w + pl + pr < effW)) continue;
    out.push(k);
  }
  return out;
}

describe('kernels/native conv2d', () => {
  before(requireNativeKernels);

  it('Conv2D matches the JS kernel: random shapes, strides, paddings, dilations', () => {
    cases(21, 40, false).forEach((k, i) => {
      const what = `conv2d ${describeCase(k)}`;
      const r = bothEngines(() =>
        tf.conv2d(
          randn([k.n, k.h, k.w, k.c], 1000 + i) as Tensor4D,
          randn([k.kh, k.kw, k.c, k.oc], 2000 + i) as Tensor4D,
          k.strides,
          k.pad,
          'NHWC',
          k.dilations,
        ),
      );
      assertClose(r, what);
      assertRanNatively(r.stats, 'Conv2D', what);
    });
  });

  it('Conv2D with numeric padding and dimRoundingMode', () => {
    for (const mode of ['floor', 'ceil', 'round'] as const) {
      const what = `conv2d dimRoundingMode=${mode}`;
      const r = bothEngines(() => tf.conv2d(randn([2, 10, 9, 3], 1) as Tensor4D, randn([3, 3, 3, 4], 2) as Tensor4D, 2, 1, 'NHWC', 1, mode));
      assertClose(r, what);
    }
  });

  it('Conv2D gradients (Conv2DBackpropInput, Conv2DBackpropFilter) match the JS kernels', () => {
    cases(22, 30, true).forEach((k, i) => {
      const what = `grads of conv2d ${describeCase(k)}`;
      const r = bothEngines(() => {
        const x = randn([k.n, k.h, k.w, k.c], 3000 + i);
        const f = randn([k.kh, k.kw, k.c, k.oc], 4000 + i);
        const y = tf.conv2d(x as Tensor4D, f as Tensor4D, k.strides, k.pad);
        const w = randn(y.shape, 5000 + i);
        return tf.grads((a: Tensor, b: Tensor) => tf.sum(tf.mul(tf.conv2d(a as Tensor4D, b as Tensor4D, k.strides, k.pad), w)))([x, f]);
      });
      assertClose(r, what);
      assertRanNatively(r.stats, 'Conv2DBackpropInput', what);
      assertRanNatively(r.stats, 'Conv2DBackpropFilter', what);
    });
  });

  it('FusedConv2D (bias + relu / linear / leakyrelu) and its gradients match the JS kernels', () => {
    cases(23, 12, true).forEach((k, i) => {
      const activation = (['relu', 'linear', 'leakyrelu', 'relu6'] as const)[i % 4];
      const what = `fused conv2d ${activation} ${describeCase(k)}`;
      const r = bothEngines(() => {
        const x = randn([k.n, k.h, k.w, k.c], 6000 + i);
        const f = randn([k.kh, k.kw, k.c, k.oc], 7000 + i);
        const bias = randn([k.oc], 8000 + i);
        const conv = (a: Tensor, b: Tensor, c: Tensor) =>
          tf.fused.conv2d({ x: a as Tensor4D, filter: b as Tensor4D, strides: k.strides, pad: k.pad, bias: c, activation, leakyreluAlpha: 0.3 });
        const y = conv(x, f, bias);
        const w = randn(y.shape, 9000 + i);
        return [y, ...tf.grads((a: Tensor, b: Tensor, c: Tensor) => tf.sum(tf.mul(conv(a, b, c), w)))([x, f, bias])];
      });
      assertClose(r, what);
      assertRanNatively(r.stats, 'FusedConv2D', what);
    });
  });

  it('falls back to JS where tfjs sizes a numeric pad from the height only (non-square stride)', () => {
    const r = bothEngines(() => tf.conv2d(randn([2, 7, 12, 3], 1) as Tensor4D, randn([4, 4, 3, 2], 2) as Tensor4D, [2, 1], 0));
    assertClose(r, 'numeric pad, strides [2, 1]');
    assert.equal(r.stats.Conv2D?.fallback, 1);
  });

  it('3x3 stride-1 convolutions and their input gradient match the JS kernels with Winograd (the default) and without', () => {
    assert.equal(winogradConvolutions(), process.env.SSL_ZOO_WINOGRAD !== '0', 'Winograd is on by default');
    const x = randn([64, 8, 8, 64], 1);
    const f = randn([3, 3, 64, 64], 2, 0.1);
    const dy = randn([64, 8, 8, 64], 3);
    const ops = [
      () => tf.conv2d(x as Tensor4D, f as Tensor4D, 1, 1),
      () => tf.engine().runKernel('Conv2DBackpropInput', { dy, filter: f }, { inputShape: x.shape, strides: 1, pad: 1, dataFormat: 'NHWC' }) as Tensor,
    ];
    const run = () => ops.map((op) => op());
    const initial = winogradConvolutions();
    try {
      for (const winograd of [true, false]) {
        setWinogradConvolutions(winograd);
        // oneDNN 2.x has Winograd kernels for its AVX-512 code paths only; under AVX2 (an
        // AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2 on any) it stays direct.
        const avx512 = oneDnnCpuIsa()!.startsWith('avx512');
        const addon = nativeAddon()!;
        addon.clearCache(); // earlier tests may have created these primitives: create them anew
        addon.lastImpl(); // clear
        const impls = ops.map((op) => {
          op().dispose();
          return addon.lastImpl();
        });
        if (winograd && avx512) impls.forEach((impl) => assert.match(impl, /wino/, `expected a Winograd kernel, got ${impl}`));
        if (!winograd) impls.forEach((impl) => assert.doesNotMatch(impl, /wino/, `expected a direct kernel, got ${impl}`));
        const r = bothEngines(run);
        assertClose(r, `conv2d, winograd ${winograd}`, 1e-4);
      }
    } finally {
      setWinogradConvolutions(initial);
      tf.dispose([x, f, dy]);
    }
  });

  it('ResNet-sized convolutions (batch 8, 32x32x64, 3x3 and 1x1 stride 2) match', () => {
    const r = bothEngines(() => {
      const x = randn([8, 16, 16, 32], 1);
      const f3 = randn([3, 3, 32, 32], 2, 0.1);
      const f1 = randn([1, 1, 32, 64], 3, 0.1);
      const w = randn([8, 8, 8, 64], 4);
      return tf.grads((a: Tensor, b: Tensor, c: Tensor) => {
        const h = tf.relu(tf.conv2d(a as Tensor4D, b as Tensor4D, 1, 1));
        return tf.sum(tf.mul(tf.conv2d(h as Tensor4D, c as Tensor4D, 2, 'valid'), w));
      })([x, f3, f1]);
    });
    assertClose(r, 'resnet-sized convolutions');
  });
});
