/**
 * verify's discrete decisions (src/methods/decisions.ts, src/verify/decisions.ts): recording
 * leaves a step bit for bit as it was, a replayed near-tie gives the W-rank run's loss while the
 * reference's own choice would not, a wrong pick is a decision failure, and a wrong neighbour
 * lookup fails `verify` (2 real ranks) as a decision failure.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { nnclrLoss } from '../../src/losses/index.js';
import { sphericalKMeans } from '../../src/losses/kmeans.js';
import { DecisionRecorder, type DecisionCall } from '../../src/methods/decisions.js';
import type { BaseMethod } from '../../src/methods/base.js';
import { FeatureQueue } from '../../src/methods/queue.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { attachRecorder, compareDecisions, replayOf } from '../../src/verify/decisions.js';
import { formatVerifyResult } from '../../src/verify/report.js';
import { oneStepResult } from './results.js';
import { SMALL_RUN } from '../distributed/helpers.js';

const B = 6;

function build(name: string): BaseMethod {
  const small: Record<string, Record<string, number>> = {
    nnclr: { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8, queueSize: 10 },
    all4one: { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8, queueSize: 10, neighbours: 3, transformerLayers: 1, transformerHeads: 2 },
  };
  return new (getMethodClass(name))({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'batch' }),
    numClasses: 3,
    rng: new Rng(5),
    args: resolveMethodArgs(name, small[name]!),
    norm: 'batch',
  });
}

/** One step's loss and gradients (by parameter name) of `m` on a fixed batch, read back. */
function stepOf(m: BaseMethod): { loss: number; grads: Record<string, Float32Array> } {
  const rng = new Rng(11);
  const views = [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1]));
  const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
  const { value, grads } = tf.variableGrads(() => {
    const out = m.trainingStep(views, labels);
    tf.dispose(Object.values(out.metrics));
    return out.loss;
  }, m.trainableParameters());
  const named = m.namedParameters().filter(([, v]) => grads[v.name]);
  const out = { loss: value.dataSync()[0]!, grads: Object.fromEntries(named.map(([name, v]) => [name, grads[v.name]!.dataSync() as Float32Array])) };
  tf.dispose([value, ...Object.values(grads), ...views, labels]);
  return out;
}

/** A support set holding `rows` (written at slots 0, 1, ...). */
function queueWith(rows: number[][]): FeatureQueue {
  const q = new FeatureQueue(rows.length, rows[0]!.length, { rng: new Rng(1) });
  const t = tf.tensor2d(rows);
  q.push([t]);
  q.flush();
  t.dispose();
  return q;
}

/** The neighbours of `queries` in `q` with `recorder` attached (replaying `replay` when given), and the recorded call. */
async function lookup(
  q: FeatureQueue,
  queries: number[][],
  recorder: DecisionRecorder,
  replay?: DecisionCall[],
): Promise<{ rows: Tensor2D; call: DecisionCall }> {
  q.decisions = recorder;
  if (replay) recorder.replayNext(replayOf(replay));
  const z = tf.tensor2d(queries);
  const { index, rows } = q.nearest(z);
  const [call] = await recorder.takeStep();
  tf.dispose([z, index]);
  return { rows, call: call! };
}

describe('verify: decisions', () => {
  before(async () => {
    await initEngine('cpu');
  });

  for (const name of ['nnclr', 'all4one']) {
    it(`${name}: a step with its decisions recorded (or replayed) is bit for bit the step without a recorder`, async () => {
      const [idle, recording, replaying] = [build(name), build(name), build(name)];
      const plain = stepOf(idle);
      const recorder = attachRecorder(recording);
      const recorded = stepOf(recording);
      const calls = await recorder.takeStep();
      assert.equal(calls.length, name === 'nnclr' ? 2 : 4, 'every lookup went through the recorder');
      for (const c of calls) assert.deepEqual(c.used, c.free, 'recording uses its own choices');
      const replayer = attachRecorder(replaying);
      replayer.replayNext(replayOf(calls));
      const replayed = stepOf(replaying);
      assert.equal(replayer.unmatched, false);
      assert.ok(Object.keys(plain.grads).length > 10);
      for (const out of [recorded, replayed]) {
        assert.equal(out.loss, plain.loss);
        for (const [k, g] of Object.entries(plain.grads)) assert.deepEqual(out.grads[k], g, k);
      }
      for (const m of [idle, recording, replaying]) m.dispose();
    });
  }

  it('k-means: recording its E steps leaves the clustering as it was; replaying another assignment moves the centroids to it', async () => {
    const rng = new Rng(3);
    const [n, dim, k] = [12, 3, 2];
    const rows = Float32Array.from(rng.normalArray(n * dim));
    const initial = rows.slice(0, k * dim);
    const plain = sphericalKMeans(rows, dim, initial, 2);
    const recorder = new DecisionRecorder();
    const assignWith = (scores: Tensor2D) => tf.reshape(recorder.choose('k-means', scores, 1, false), [-1]) as tf.Tensor1D;
    const recorded = sphericalKMeans(rows, dim, initial, 2, undefined, assignWith);
    assert.deepEqual(recorded, plain);
    const calls = await recorder.takeStep();
    assert.equal(calls.length, 3, 'an E step per iteration and the last');
    assert.deepEqual(calls.at(-1)!.free, plain.assignments);
    // Replay every row into cluster 0: the centroid becomes the normalised mean of all rows.
    const forced = calls.map((c) => ({ ...c, used: new Int32Array(n), free: new Int32Array(n) }));
    recorder.replayNext(forced.map((c) => ({ used: c.used, rows: c.rows, k: c.k })));
    const replayed = sphericalKMeans(rows, dim, initial, 2, undefined, assignWith);
    assert.deepEqual([...replayed.assignments], new Array(n).fill(0));
    const mean = [0, 1, 2].map((d) => rows.filter((_, i) => i % dim === d).reduce((a, b) => a + b, 0) / n);
    const norm = Math.hypot(...mean);
    mean.forEach((m, d) => assert.ok(Math.abs(replayed.centroids[d]! - m / norm) < 1e-6, `centroid 0, ${d}`));
    assert.equal(recorder.unmatched, false);
    const replayedCalls = await recorder.takeStep();
    assert.ok(replayedCalls.every((c) => !c.batchRows && c.kind === 'k-means'));
  });

  it("a near-tie switch: the reference replaying the W-rank run's neighbour gets its loss; its own choice would not; the switch is within round-off", async () => {
    // Rows a and b score 0.6 against the query (b 4 float32 ulps lower) but lie far apart.
    const queue = queueWith([
      [0.6, 0.8, 0],
      [0.6 - 2.4e-7, 0, 0.8],
      [-1, 0, 0],
      [0, 0, 1],
    ]);
    const predictions = tf.tensor2d([
      [0.3, 0.9, 0.1],
      [0.2, -0.5, 0.8],
    ]);
    const loss = (rows: Tensor) => nnclrLoss(rows as Tensor2D, predictions, { temperature: 0.2 }).dataSync()[0]!;
    // The W-rank run's query, and the reference's and a twin's, moved by round-off (6e-7, 5e-7): b wins there.
    const ranks = await lookup(
      queue,
      [
        [1, 0, 0],
        [0, 0.1, 1],
      ],
      new DecisionRecorder(),
    );
    const moved = [
      [1, -6e-7, 0],
      [0, 0.1, 1],
    ];
    const free = await lookup(queue, moved, new DecisionRecorder());
    const replayed = await lookup(queue, moved, new DecisionRecorder(), [ranks.call]);
    const twin = await lookup(
      queue,
      [
        [1, -5e-7, 0],
        [0, 0.1, 1],
      ],
      new DecisionRecorder(),
      [ranks.call],
    );
    assert.deepEqual([...ranks.call.free], [0, 3]);
    assert.deepEqual([...free.call.free], [1, 3], 'the moved query switches to the near-tie');
    assert.deepEqual([...replayed.call.used], [0, 3]);
    assert.equal(loss(replayed.rows), loss(ranks.rows), 'the replay gives the W-rank loss');
    assert.ok(Math.abs(loss(free.rows) - loss(ranks.rows)) > 1e-2, `without the replay the loss moves by ${Math.abs(loss(free.rows) - loss(ranks.rows))}`);
    const step = compareDecisions([ranks.call], [replayed.call], [{ calls: [twin.call], orders: [Int32Array.from([0, 1])] }], 4, 1e-5, true)!;
    assert.equal(step.differ, 1);
    assert.equal(step.beyond, 0);
    assert.ok(step.largestMargin > 0 && step.largestMargin < 1e-6, `margin ${step.largestMargin}`);
    assert.deepEqual(step.switches[0], { call: 0, row: 0, position: 0, ranks: 0, reference: 1, margin: step.largestMargin });
    tf.dispose([predictions, ranks.rows, free.rows, replayed.rows, twin.rows]);
    queue.dispose();
  });

  it('a pick far from the best (margin of order 1) is a decision failure, and the verdict says so', async () => {
    const queue = queueWith([
      [1, 0, 0],
      [0, 1, 0],
      [-1, 0, 0],
    ]);
    const wrong = await lookup(queue, [[-1, 0.1, 0]], new DecisionRecorder()); // picks row 2 for the query (1, -0.1, 0)
    const reference = await lookup(queue, [[1, -0.1, 0]], new DecisionRecorder(), [wrong.call]);
    const twin = await lookup(queue, [[1, -0.1, 1e-7]], new DecisionRecorder(), [wrong.call]);
    const decisions = compareDecisions([wrong.call], [reference.call], [{ calls: [twin.call], orders: [Int32Array.from([0])] }], 4, 1e-5, true)!;
    assert.equal(decisions.differ, 1);
    assert.equal(decisions.beyond, 1);
    assert.ok(Math.abs(decisions.largestMargin - 2) < 1e-5, `margin ${decisions.largestMargin}`);
    const result = oneStepResult({ decisions }, decisions.largestMargin / decisions.bound);
    const text = formatVerifyResult(result, 'nnclr');
    assert.match(text, /^1 .* 1 differ, largest margin 2\.00e\+0 \/ 1\.00e-5 /m);
    assert.match(
      text.split('\n').at(-1)!,
      /^FAILED: the worst difference is [0-9.]+ of its bound: 1 nearest-neighbour decision\(s\) differ by up to 2\.0e\+0, beyond round-off 1\.0e-5$/,
    );
    tf.dispose([wrong.rows, reference.rows, twin.rows]);
    queue.dispose();
  });

  it('verify --devices 2 fails a wrong neighbour lookup (the farthest row) as a decision failure, its continuous columns within their bounds', () => {
    const script = join(process.cwd(), 'dist', 'tests', 'verify', 'wrong-neighbour-cli.js');
    const small = [
      '--method-arg',
      'projHiddenDim=32',
      '--method-arg',
      'predHiddenDim=32',
      '--method-arg',
      'queueSize=64',
      '--batch-size',
      '24',
      '--steps',
      '2',
    ];
    const out = spawnSync(process.execPath, [script, 'verify', '--method', 'nnclr_wrong_neighbour', '--devices', '2', ...SMALL_RUN, ...small], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.equal(out.status, 1, out.stdout + out.stderr);
    const last = out.stdout.trim().split('\n').at(-1)!;
    const failure =
      /^FAILED: the worst difference is [0-9.]+ of its bound: (\d+) nearest-neighbour decision\(s\) differ by up to ([0-9.e+-]+), beyond round-off ([0-9.e+-]+)$/.exec(
        last,
      );
    assert.ok(failure, out.stdout);
    assert.ok(Number(failure[1]) >= 24 && Number(failure[2]) > 0.1, last);
    // Given the same (wrong) neighbours, the loss, gradients and parameters agree: only the decisions show the bug.
    const cells = out.stdout
      .split('\n')
      .filter((l) => /^\d+\s/.test(l))
      .flatMap((l) => [...l.matchAll(/([0-9.]+e[+-]\d+) \/ ([0-9.]+e[+-]\d+)/g)].slice(0, 3));
    assert.equal(cells.length, 6, out.stdout);
    for (const c of cells) assert.ok(Number(c[1]) <= Number(c[2]), `${c[0]}\n${out.stdout}`);
  });
});
