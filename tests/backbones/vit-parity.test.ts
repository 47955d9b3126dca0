/**
 * VisionTransformer against PyTorch (float64): tests/fixtures/backbones/vit-torch.json, written
 * by scripts/gen_vit_fixtures.py (an independent PyTorch ViT, D 32, 2 blocks, 2 heads, patch 4,
 * position embeddings for 16 px). Both sides fill weights and inputs from the same integer hash.
 * Errors are `max |ours - torch| / max |torch|` per tensor.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { VisionTransformer, type VitConfig } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { bicubicMatrix } from '../../src/core/interpolate.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { maxAbsDiff } from '../core/helpers.js';
import { hashUniform, nameKey } from '../helpers/hash-values.js';

interface Case {
  size: number;
  output: number[];
  grads: Record<string, number[]>;
}

interface Fixture {
  config: VitConfig;
  imageSize: number;
  channels: number;
  batch: number;
  cases: Case[];
  resizeMatrices: Array<{ in: number; out: number; matrix: number[] }>;
  postNormOutput16: number[];
  bilinearOutput8: number[];
}

const fixture = JSON.parse(readFileSync(new URL('../../../tests/fixtures/backbones/vit-torch.json', import.meta.url), 'utf8')) as Fixture;
const TOLERANCE = 1e-4;

function scaled(values: number[], factor: number): number[] {
  return values.map((v) => v * factor);
}

/** The script's weights (see its `fill`), generated in PyTorch's layout and transposed to ours. */
function fill(net: VisionTransformer): void {
  for (const [name, v] of net.namedParameters()) {
    const u = hashUniform(nameKey(name), v.size);
    const value = tf.tidy(() => {
      if (v.rank === 2) {
        const [inF, outF] = v.shape;
        return tf.transpose(tf.tensor2d(scaled(u, Math.sqrt(3 / inF)), [outF, inF]));
      }
      if (v.rank === 4) {
        const [kh, kw, cin, cout] = v.shape;
        return tf.transpose(tf.tensor4d(scaled(u, Math.sqrt(3 / (cin * kh * kw))), [cout, cin, kh, kw]), [2, 3, 1, 0]);
      }
      if (name === 'cls_token' || name === 'pos_embed') return tf.tensor(scaled(u, 0.5), v.shape);
      if (name.includes('norm'))
        return tf.tensor(
          u.map((x) => (name.endsWith('weight') ? 1 + x / 4 : x / 4)),
          v.shape,
        );
      return tf.tensor(scaled(u, 0.1), v.shape);
    });
    v.assign(value);
    value.dispose();
  }
}

function scaledError(a: ArrayLike<number>, b: number[]): number {
  return maxAbsDiff(a, b) / Math.max(...b.map(Math.abs));
}

function buildNet(): VisionTransformer {
  const net = new VisionTransformer(fixture.config, { inChannels: fixture.channels, imageSize: fixture.imageSize, rng: new Rng(0) });
  fill(net);
  return net;
}

function input(size: number): Tensor {
  const { batch, channels } = fixture;
  return tf.tensor4d(hashUniform(nameKey(`input${size}`), batch * size * size * channels), [batch, size, size, channels]);
}

describe('backbones: ViT agrees with PyTorch (float64 fixture)', () => {
  let net: VisionTransformer;
  before(async () => {
    await initEngine('cpu');
    net = buildNet();
  });
  after(() => net.dispose());

  it("bicubic resize matrices equal F.interpolate(mode='bicubic', align_corners=False)", () => {
    for (const { in: n, out, matrix } of fixture.resizeMatrices) {
      assert.ok(maxAbsDiff(bicubicMatrix(n, out), matrix) < 1e-6, `${n} -> ${out}`);
    }
  });

  for (const c of fixture.cases) {
    it(`${c.size} px: output and the gradient of every parameter and the input to ${TOLERANCE}`, () => {
      const x = tf.variable(input(c.size));
      const r = tf.tensor2d(hashUniform(nameKey('projection'), fixture.batch * net.featureDim), [fixture.batch, net.featureDim]);
      let output: Tensor | undefined;
      const { value, grads } = tf.variableGrads(() => {
        const out = net.forward(x);
        output = tf.keep(tf.clone(out));
        return tf.sum(tf.mul(out, r)) as tf.Scalar;
      }, [x, ...net.parameters()]);
      const outError = scaledError(output!.dataSync(), c.output);
      assert.ok(outError < TOLERANCE, `output: ${outError}`);
      const params = Object.fromEntries(net.namedParameters());
      assert.deepEqual(Object.keys(c.grads).sort(), [...Object.keys(params), 'input'].sort(), 'every parameter has a PyTorch gradient');
      for (const [name, expected] of Object.entries(c.grads)) {
        const grad = grads[name === 'input' ? x.name : params[name].name];
        const error = scaledError(grad.dataSync(), expected);
        assert.ok(error < TOLERANCE, `gradient of ${name}: ${error}`);
      }
      tf.dispose([value, grads, output!, x, r]);
    });
  }

  it('negative controls: a post-norm network and bilinear position-embedding resizing are far off', () => {
    const [post, bilinear] = [16, 8].map((size) => tf.tidy(() => net.forward(input(size))));
    const postError = scaledError(post.dataSync(), fixture.postNormOutput16);
    const bilinearError = scaledError(bilinear.dataSync(), fixture.bilinearOutput8);
    assert.ok(postError > 100 * TOLERANCE, `post-norm output within ${postError}`);
    assert.ok(bilinearError > 100 * TOLERANCE, `bilinear-resized output within ${bilinearError}`);
    tf.dispose([post, bilinear]);
  });
});
