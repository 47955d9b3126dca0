/**
 * tiny_resnet against PyTorch (float64): tests/fixtures/backbones/tiny-resnet-torch.json,
 * written by scripts/gen_backbone_fixtures.py. Both sides fill the weights and inputs from
 * the same integer hash, so the fixture holds only PyTorch's results.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { TinyResNet } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { maxAbsDiff } from '../core/helpers.js';
import { hashUniform, nameKey } from '../helpers/hash-values.js';

interface Fixture {
  input: [number, number, number, number];
  trainOutput: number[];
  evalOutputAfterStep: number[];
  bn1RunningMean: number[];
  bn1RunningVar: number[];
  grads: Record<string, number[]>;
}

const fixture = JSON.parse(readFileSync(new URL('../../../tests/fixtures/backbones/tiny-resnet-torch.json', import.meta.url), 'utf8')) as Fixture;

/** The script's weights: convolutions u·sqrt(6 / fanOut) in PyTorch's [out, in, kh, kw] order; γ = 1 + u/4, β = u/4. */
function fill(net: TinyResNet): void {
  for (const [name, v] of net.namedParameters()) {
    const u = hashUniform(nameKey(name), v.size);
    const value = tf.tidy(() => {
      if (v.rank === 4) {
        const [kh, kw, cin, cout] = v.shape;
        const scale = Math.sqrt(6 / (cout * kh * kw));
        return tf.transpose(
          tf.tensor4d(
            u.map((x) => x * scale),
            [cout, cin, kh, kw],
          ),
          [2, 3, 1, 0],
        );
      }
      return tf.tensor(
        u.map((x) => (name.endsWith('weight') ? 1 + x / 4 : x / 4)),
        v.shape,
      );
    });
    v.assign(value);
    value.dispose();
  }
}

/** `max |a - b| / max |b|`. */
function scaledError(a: ArrayLike<number>, b: number[]): number {
  return maxAbsDiff(a, b) / Math.max(...b.map(Math.abs));
}

describe('backbones: tiny_resnet agrees with PyTorch', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('forward (train and eval), gradients and running statistics', () => {
    const [B, H, W, C] = fixture.input;
    const net = new TinyResNet({ inChannels: C, imageSize: H, rng: new Rng(0) });
    fill(net);
    const x = tf.variable(
      tf.tensor4d(
        hashUniform(nameKey('input'), B * H * W * C).map((v) => v * 2),
        [B, H, W, C],
      ),
    );
    const r = tf.tensor2d(hashUniform(nameKey('projection'), B * 128), [B, 128]);
    const params = Object.fromEntries(net.namedParameters());

    let trainOutput: Tensor | undefined;
    const { value, grads } = tf.variableGrads(() => {
      const out = net.forward(x);
      trainOutput = tf.keep(tf.clone(out));
      return tf.sum(tf.mul(out, r)) as tf.Scalar;
    }, [x, ...net.parameters()]);
    assert.ok(scaledError(trainOutput!.dataSync(), fixture.trainOutput) < 1e-5, 'train-mode output');
    const gradOf: Record<string, Tensor> = { input: grads[x.name] };
    for (const name of Object.keys(fixture.grads)) {
      if (name !== 'input') gradOf[name] = grads[params[name].name];
      const error = scaledError(gradOf[name].dataSync(), fixture.grads[name]);
      assert.ok(error < 1e-5, `gradient of ${name}: ${error}`);
    }
    const state = net.stateDict();
    assert.ok(maxAbsDiff(state['bn1.runningMean'].dataSync(), fixture.bn1RunningMean) < 1e-5);
    assert.ok(maxAbsDiff(state['bn1.runningVar'].dataSync(), fixture.bn1RunningVar) < 1e-5);

    const evalOutput = net.eval().forward(x);
    assert.ok(scaledError(evalOutput.dataSync(), fixture.evalOutputAfterStep) < 1e-5, 'eval-mode output');
    tf.dispose([value, grads, trainOutput!, evalOutput, x, r]);
    net.dispose();
  });
});
