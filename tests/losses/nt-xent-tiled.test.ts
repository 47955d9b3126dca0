/**
 * The tiled (memory-bounded) NT-Xent: same values and gradients as the plain `ntXentLoss`
 * (relative 1e-5 of the largest entry) for many shapes, tile sizes and temperatures; a
 * finite-difference check of its own; the automatic switch in `ntXentLoss`; no leaked
 * tensors. Its memory at large N: nt-xent-tiled-memory.full.test.ts. W > 1 with real
 * processes: tests/distributed/nt-xent-tiled.test.ts.
 */
import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { NT_XENT_DEFAULT_TILE_SIZE, NT_XENT_TILED_THRESHOLD, ntXentLoss, ntXentLossTiled } from '../../src/losses/index.js';
import { gradCheck, randn, Rng, useCpuEngine } from './helpers.js';
import { measure, valueAndGrads } from './nt-xent-measure.js';

/** max |a − b| / max |b|. */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  if (Number.isNaN(diff)) return Infinity;
  return diff / Math.max(scale, 1e-30);
}

/** |a − b| ≤ 1e-5 · max(1, |b|): relative, with a floor for losses near 0 (a difference of O(1/τ) logits). */
function valueClose(a: number, b: number): boolean {
  return Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(b));
}

describe('losses/ntXentLossTiled', () => {
  before(useCpuEngine);

  it('equals the plain loss in value and gradients (relative 1e-5) over B, D, tile sizes and temperatures', () => {
    const rng = new Rng(21);
    // tile sizes: 1 (every logit its own tile), ones that do not divide 2B, equal to 2B, larger than 2B
    const cases: Array<[b: number, d: number, tile: number, t: number]> = [
      [1, 4, 1, 0.1],
      [2, 3, 1, 0.5],
      [5, 7, 3, 0.1],
      [5, 7, 4, 0.07],
      [6, 16, 5, 0.2],
      [7, 8, 14, 1.0],
      [8, 32, 100, 0.1],
      [13, 10, 6, 0.05],
      [16, 24, 7, 0.5],
    ];
    for (const [b, d, tile, t] of cases) {
      const z1 = randn(rng, b, d);
      const z2 = randn(rng, b, d, 2, 0.3);
      const plain = valueAndGrads((x, y) => ntXentLoss(x, y, { temperature: t, tiled: false }), z1, z2);
      const tiled = valueAndGrads((x, y) => ntXentLossTiled(x, y, { temperature: t, tileSize: tile }), z1, z2);
      const forced = valueAndGrads((x, y) => ntXentLoss(x, y, { temperature: t, tiled: true, tileSize: tile }), z1, z2);
      const label = `B=${b} D=${d} tile=${tile} t=${t}`;
      assert.ok(valueClose(tiled.value, plain.value), `${label}: value ${tiled.value} vs ${plain.value}`);
      assert.ok(relErr(tiled.g1, plain.g1) <= 1e-5, `${label}: dz1 error ${relErr(tiled.g1, plain.g1)}`);
      assert.ok(relErr(tiled.g2, plain.g2) <= 1e-5, `${label}: dz2 error ${relErr(tiled.g2, plain.g2)}`);
      assert.equal(forced.value, tiled.value, `${label}: ntXentLoss({ tiled: true }) is ntXentLossTiled`);
      assert.deepEqual(forced.g1, tiled.g1);
      tf.dispose([z1, z2]);
    }
  });

  it('is exact where the masks matter: identical views, tiny τ (finite gradients, same as plain)', () => {
    const rng = new Rng(3);
    const z = randn(rng, 6, 5);
    const z2 = tf.clone(z);
    const plain = valueAndGrads((x, y) => ntXentLoss(x, y, { temperature: 0.01, tiled: false }), z, z2);
    const tiled = valueAndGrads((x, y) => ntXentLossTiled(x, y, { temperature: 0.01, tileSize: 4 }), z, z2);
    for (const g of [tiled.g1, tiled.g2]) for (const x of g) assert.ok(Number.isFinite(x));
    // The loss is ~0 here (lse − positive logit, both ~1/τ = 100): float32 round-off of
    // the logits is the natural scale, so relative to max(1, |value|).
    assert.ok(valueClose(tiled.value, plain.value), `${tiled.value} vs ${plain.value}`);
    assert.ok(relErr(tiled.g1, plain.g1) <= 1e-5 && relErr(tiled.g2, plain.g2) <= 1e-5);
    tf.dispose([z, z2]);
  });

  it('treats an all-zero row like the plain loss (normalisation floor ε, gradient g/ε)', () => {
    const rng = new Rng(4);
    const z1 = tf.concat([randn(rng, 3, 4), tf.zeros([1, 4])], 0) as tf.Tensor2D;
    const z2 = randn(rng, 4, 4);
    const plain = valueAndGrads((x, y) => ntXentLoss(x, y, { temperature: 0.2, tiled: false }), z1, z2);
    const tiled = valueAndGrads((x, y) => ntXentLossTiled(x, y, { temperature: 0.2, tileSize: 3 }), z1, z2);
    assert.ok(valueClose(tiled.value, plain.value), `${tiled.value} vs ${plain.value}`);
    assert.ok(relErr(tiled.g1, plain.g1) <= 1e-5 && relErr(tiled.g2, plain.g2) <= 1e-5);
    assert.ok(Math.abs(tiled.g1[12]!) > 1e6, 'the zero row gets the huge g/ε gradient');
    tf.dispose([z1, z2]);
  });

  it('passes a finite-difference gradient check of its own (and rejects a halved gradient)', () => {
    const rng = new Rng(12);
    for (const [t, tile] of [
      [0.1, 3],
      [0.5, 5],
    ] as const) {
      const xs = [randn(rng, 5, 6), randn(rng, 5, 6)];
      const { error, halvedError } = gradCheck((a, c) => ntXentLossTiled(a, c, { temperature: t, tileSize: tile }), xs, rng);
      tf.dispose(xs);
      assert.ok(error < 1e-2, `t=${t}: relative error ${error}`);
      assert.ok(halvedError > 0.3, `t=${t}: a halved gradient was not caught (${halvedError})`);
    }
  });

  it('scales the gradient by the upstream gradient (dy ≠ 1)', () => {
    const rng = new Rng(8);
    const z1 = randn(rng, 4, 3);
    const z2 = randn(rng, 4, 3);
    const f = (tiled: boolean) => valueAndGrads((x, y) => tf.mul(ntXentLoss(x, y, { temperature: 0.2, tiled, tileSize: 3 }), -2.5) as tf.Scalar, z1, z2);
    const [a, b] = [f(true), f(false)];
    assert.ok(relErr(a.g1, b.g1) <= 1e-5 && relErr(a.g2, b.g2) <= 1e-5);
    tf.dispose([z1, z2]);
  });

  it('leaves tf.memory().numTensors unchanged (value, forward + backward)', () => {
    const rng = new Rng(1);
    const z1 = randn(rng, 7, 4);
    const z2 = randn(rng, 7, 4);
    const before = tf.memory().numTensors;
    for (let step = 0; step < 3; step++) {
      valueAndGrads((x, y) => ntXentLossTiled(x, y, { temperature: 0.1, tileSize: 3 }), z1, z2);
      ntXentLossTiled(z1, z2, { temperature: 0.1, tileSize: 5 }).dispose();
    }
    assert.equal(tf.memory().numTensors, before);
    tf.dispose([z1, z2]);
  });

  it('rejects bad temperatures, tile sizes and shapes', () => {
    const rng = new Rng(6);
    tf.tidy(() => {
      const z = randn(rng, 3, 4);
      assert.throws(() => ntXentLossTiled(z, z, { temperature: 0 }), /temperature/);
      for (const tileSize of [0, 2.5, -1, NaN]) {
        assert.throws(() => ntXentLossTiled(z, z, { temperature: 0.1, tileSize }), /tileSize/);
      }
      assert.throws(() => ntXentLossTiled(z, randn(rng, 2, 4), { temperature: 0.1 }), /same shape/);
    });
  });

  it('ntXentLoss switches to tiles above NT_XENT_TILED_THRESHOLD logits (and `tiled` overrides it)', async function () {
    this.timeout(120_000);
    assert.equal(NT_XENT_TILED_THRESHOLD, 4096 * 4096);
    assert.equal(NT_XENT_DEFAULT_TILE_SIZE, 1024);
    const rng = new Rng(5);
    const d = 4;
    // 2B·2N = 4·B² on one process: B = 2049 is just above the threshold, B = 2048 exactly at it.
    const above = 2049;
    const z1 = randn(rng, above, d);
    const z2 = randn(rng, above, d);
    const logits = 2 * above * 2 * above;
    assert.ok(logits > NT_XENT_TILED_THRESHOLD);
    const auto = await measure(() => ntXentLoss(z1, z2, { temperature: 0.1 }).dispose());
    assert.ok(auto.largestOutput < logits * 4, `automatic: largest tensor ${auto.largestOutput} B, logits ${logits * 4} B`);
    assert.ok(auto.largestOutput <= NT_XENT_DEFAULT_TILE_SIZE ** 2 * 4);
    const small = (b: number) => [tf.slice(z1, [0, 0], [b, d]), tf.slice(z2, [0, 0], [b, d])] as tf.Tensor2D[];
    const [a1, a2] = small(2048);
    const atThreshold = await measure(() => ntXentLoss(a1!, a2!, { temperature: 0.1 }).dispose());
    assert.ok(
      atThreshold.shapes.some((s) => s.length === 2 && s[0] === 4096 && s[1] === 4096),
      'at the threshold the plain loss materialises [2B, 2N]',
    );
    const [c1, c2] = small(64);
    const forced = await measure(() => ntXentLoss(c1!, c2!, { temperature: 0.1, tiled: true, tileSize: 16 }).dispose());
    assert.ok(!forced.shapes.some((s) => s.length === 2 && s[0] === 128 && s[1] === 128), 'tiled: true never builds [2B, 2N]');
    assert.ok(
      forced.shapes.some((s) => s.length === 2 && s[0] === 16 && s[1] === 16),
      'tiled: true works in 16 x 16 tiles',
    );
    const plain = await measure(() => ntXentLoss(c1!, c2!, { temperature: 0.1, tiled: false }).dispose());
    assert.ok(
      plain.shapes.some((s) => s.length === 2 && s[0] === 128 && s[1] === 128),
      'tiled: false builds [2B, 2N]',
    );
    tf.dispose([z1, z2, a1!, a2!, c1!, c2!]);
  });
});
