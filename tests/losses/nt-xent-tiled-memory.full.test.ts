/**
 * The tiled NT-Xent's memory: the peak of `tf.memory().numBytes` after every kernel of
 * forward + backward (`tf.profile`) stays O(N·D), far below the plain loss's `[2B, 2N]`
 * logits (N up to 2048: slow, hence the full tier). Values and gradients: nt-xent-tiled.test.ts.
 */
import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { ntXentLoss } from '../../src/losses/index.js';
import { randn, Rng, useCpuEngine } from './helpers.js';
import { measure, valueAndGrads } from './nt-xent-measure.js';

describe('losses/ntXentLossTiled: memory', () => {
  before(useCpuEngine);

  describe('memory (peak tf.memory().numBytes after every kernel of forward + backward, via tf.profile)', function () {
    this.timeout(300_000);
    const D = 64;
    const TILE = 256;

    /** Peak bytes above the start and the largest tensor, of value + gradients w.r.t. z1, z2. */
    async function peakOf(n: number, tiled: boolean): Promise<{ peakAbove: number; largestOutput: number }> {
      const rng = new Rng(100 + n);
      const z1 = randn(rng, n, D);
      const z2 = randn(rng, n, D);
      const m = await measure(() => {
        valueAndGrads((x, y) => ntXentLoss(x, y, { temperature: 0.1, tiled, tileSize: TILE }), z1, z2);
      });
      tf.dispose([z1, z2]);
      return m;
    }

    it(`N = 2048, D = ${D}: tiled peak < 1/8 of the plain loss's [2B, 2N] similarity matrix, which the plain peak exceeds`, async () => {
      const n = 2048;
      const simBytes = 2 * n * 2 * n * 4; // 64 MiB
      const plain = await peakOf(n, false);
      const tiled = await peakOf(n, true);
      const mib = (x: number) => `${(x / 2 ** 20).toFixed(2)} MiB`;
      // Negative control: the measurement sees the plain loss materialise its logits (and more).
      assert.ok(plain.peakAbove >= simBytes, `plain peak ${mib(plain.peakAbove)} < similarity matrix ${mib(simBytes)}`);
      assert.equal(plain.largestOutput, simBytes);
      assert.ok(tiled.peakAbove < simBytes / 8, `tiled peak ${mib(tiled.peakAbove)} >= ${mib(simBytes / 8)}`);
      // The largest tensor is an [2N, D] block of rows, not a tile of N²: O(N·D).
      assert.ok(tiled.largestOutput <= 2 * n * D * 4, `largest tensor ${mib(tiled.largestOutput)}`);
    });

    it('the tiled peak grows linearly in N (×2 N: < ×2.5 bytes), the plain one quadratically (> ×3)', async () => {
      const [t1, t2] = [await peakOf(1024, true), await peakOf(2048, true)];
      const [p1, p2] = [await peakOf(512, false), await peakOf(1024, false)];
      assert.ok(t2.peakAbove / t1.peakAbove < 2.5, `tiled: ${t1.peakAbove} -> ${t2.peakAbove}`);
      assert.ok(p2.peakAbove / p1.peakAbove > 3, `plain: ${p1.peakAbove} -> ${p2.peakAbove}`);
    });
  });
});
