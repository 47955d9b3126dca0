/**
 * MoCo v2+, MoCo v3 and ReSSL with W ranks: `ssl-train verify` at 2 and 3 ranks (the queue
 * methods with a queue that wraps around within the 3 steps, compared in verify's `queues`
 * column), a 2-rank training run against one process (queue included), and a MoCo v2+ run
 * interrupted and resumed that ends bit-identical to the uninterrupted one.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { runCli, tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';

/** 40 keys: the 24-sample global batch wraps the queue around at step 2. */
const QUEUE = 40;
const HEADS: Record<string, string[]> = {
  mocov2plus: [...SMALL_PROJECTOR, '--method-arg', `queueSize=${QUEUE}`],
  mocov3: [...SMALL_PROJECTOR, ...SMALL_PREDICTOR],
  ressl: [...SMALL_PROJECTOR, '--method-arg', `queueSize=${QUEUE}`],
};
const QUEUED = new Set(['mocov2plus', 'ressl']);

function train(method: string, devices: number, runDir: string, extra: string[] = []): string {
  const args = [
    ...SMALL_RUN,
    ...HEADS[method],
    '--method',
    method,
    '--devices',
    String(devices),
    '--batch-size',
    '24',
    '--warmup-epochs',
    '0',
    '--run-dir',
    runDir,
  ];
  const { status, stdout, stderr } = runCli([...args, ...extra], 180_000);
  assert.equal(status, 0, stdout + stderr);
  return runDir;
}

/** Every tensor of `runDir/checkpoints/<file>` (model and optimizer state), as raw arrays. */
function allTensors(runDir: string, file = 'last.ckpt'): Record<string, Float32Array | Int32Array> {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', file));
  const out: Record<string, Float32Array | Int32Array> = {};
  for (const [name, t] of Object.entries(ckpt.tensors)) out[name] = t.dtype === 'int32' ? Int32Array.from(t.dataSync()) : Float32Array.from(t.dataSync());
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

/** `train/loss` per step from metrics.jsonl. */
function losses(runDir: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n')) {
    const row = JSON.parse(line) as Record<string, number>;
    if (row['train/loss'] !== undefined) out.set(row.step, row['train/loss']);
  }
  return out;
}

describe('MoCo v2+, MoCo v3, ReSSL: data-parallel training equals one process on the global batch', function () {
  this.timeout(600_000);

  for (const method of ['mocov2plus', 'mocov3', 'ressl']) {
    for (const devices of [2, 3]) {
      it(`${method}: ssl-train verify --devices ${devices} passes (loss, gradients, parameters${QUEUED.has(method) ? ' and a wrapping queue' : ''} over 3 steps)`, () => {
        const { status, stdout, stderr } = runCli(
          ['verify', ...SMALL_RUN, ...HEADS[method], '--method', method, '--devices', String(devices), '--batch-size', '24', '--steps', '3'],
          180_000,
        );
        assert.equal(status, 0, stdout + stderr);
        const verdict = /PASSED: the worst difference is [0-9.]+ of its bound/.exec(stdout);
        assert.ok(verdict, stdout);
        const header = stdout.split('\n').find((l) => l.startsWith('step'));
        assert.ok(header, stdout);
        assert.equal(/\squeues\s/.test(header), QUEUED.has(method), header);
        assert.equal(
          stdout
            .trim()
            .split('\n')
            .filter((l) => /^\d+\s/.test(l)).length,
          3,
        );
        console.log(`      ${method}, ${devices} ranks: ${verdict[0]}`);
      });
    }
  }

  for (const method of ['mocov2plus', 'ressl']) {
    it(`${method}: verify --devices 2 passes with batch norm in the projector and its EMA copy (useBnInProjector=1)`, () => {
      const { status, stdout, stderr } = runCli(
        [
          'verify',
          ...SMALL_RUN,
          ...HEADS[method],
          '--method-arg',
          'useBnInProjector=1',
          '--method',
          method,
          '--devices',
          '2',
          '--batch-size',
          '24',
          '--steps',
          '3',
        ],
        180_000,
      );
      assert.equal(status, 0, stdout + stderr);
      assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
    });
  }

  for (const method of ['mocov2plus', 'ressl']) {
    it(`${method}: a 2-rank training run ends 3 steps with the one-process parameters, buffers and queue`, () => {
      const steps = ['--max-steps', '3', '--epochs', '2'];
      const single = checkpointTensors(train(method, 1, join(tempDir(), 'run'), steps));
      const ddp = checkpointTensors(train(method, 2, join(tempDir(), 'run'), steps));
      assert.ok('model/queue.bank' in single && 'model/queue.pointer' in single);
      assert.equal(single['model/queue.pointer'][0], (3 * 24) % QUEUE, 'the queue wrapped around');
      assert.deepEqual(ddp['model/queue.pointer'], single['model/queue.pointer']);
      const worst = worstRelative(ddp, single);
      assert.ok(worst < 1e-5, `worst relative difference ${worst}`);
      console.log(`      ${method}: worst relative difference 2 ranks vs 1 process ${worst.toExponential(2)}`);
    });
  }

  it('mocov2plus: 2 ranks stopped after 7 steps and resumed end 16 steps bit-identical to an uninterrupted run (queue, pointer, optimizer state)', () => {
    const flags = ['--epochs', '2', '--log-every', '1'];
    const straight = train('mocov2plus', 2, join(tempDir(), 'straight'), flags);
    const split = join(tempDir(), 'split');
    train('mocov2plus', 2, split, [...flags, '--max-steps', '7']);
    const atStop = allTensors(split);
    train('mocov2plus', 2, split, [...flags, '--resume', 'auto']);

    const a = allTensors(straight);
    const b = allTensors(split);
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    for (const name of Object.keys(a)) assert.deepEqual(b[name], a[name], name);
    const la = losses(straight);
    const lb = losses(split);
    assert.equal(la.size, 16);
    for (let step = 1; step <= 16; step++) assert.equal(lb.get(step), la.get(step), `loss at step ${step}`);

    // The queue wrapped around: 7 x 24 keys before the stop (pointer 8), 9 x 24 after it, so
    // every slot of both views was rewritten after the resume.
    assert.equal(atStop['model/queue.pointer'][0], (7 * 24) % QUEUE);
    assert.equal(a['model/queue.pointer'][0], (16 * 24) % QUEUE);
    const [before, after] = [atStop['model/queue.bank'], a['model/queue.bank']];
    const dim = 16;
    for (let row = 0; row < 2 * QUEUE; row++) {
      const same = after.subarray(row * dim, (row + 1) * dim).every((v, i) => v === before[row * dim + i]);
      assert.ok(!same, `queue row ${row} was rewritten after the resume`);
    }
  });
});
