/**
 * SimSiam, NNCLR, NNBYOL and NNSiam with W real processes: `ssl-train verify` on 2 and 3
 * ranks (loss, gradients, parameters and, for the support-set methods, the queue, against one
 * process on the global batch) with a support set small enough to wrap around within the 3
 * steps, and an NNCLR training run on 2 ranks that ends with the one-process checkpoint,
 * support set included.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { runCli, tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';

const HEADS = [...SMALL_PROJECTOR, ...SMALL_PREDICTOR];
/** 40 rows: a batch of 24 fills slots 0-23, then 24-39 and 0-7 (wrapping around), then 8-31. */
const QUEUE = ['--method-arg', 'queueSize=40'];
const METHODS: Record<string, string[]> = {
  simsiam: HEADS,
  nnclr: [...HEADS, ...QUEUE],
  nnbyol: [...HEADS, ...QUEUE],
  nnsiam: [...HEADS, ...QUEUE],
};

function train(method: string, devices: number): string {
  const runDir = join(tempDir(), 'run');
  const args = [...SMALL_RUN, ...METHODS[method], '--method', method, '--devices', String(devices), '--batch-size', '24'];
  const { status, stderr } = runCli([...args, '--max-steps', '3', '--epochs', '2', '--warmup-epochs', '0', '--run-dir', runDir], 120_000);
  assert.equal(status, 0, stderr);
  return runDir;
}

describe('SimSiam and the nearest-neighbour methods: W ranks equal one process on the global batch', function () {
  this.timeout(300_000);

  for (const [method, args] of Object.entries(METHODS)) {
    for (const devices of [2, 3]) {
      it(`${method}: ssl-train verify --devices ${devices} passes (loss, gradients, parameters${method === 'simsiam' ? '' : ', queue'} over 3 steps)`, () => {
        const { status, stdout, stderr } = runCli(
          ['verify', ...SMALL_RUN, ...args, '--method', method, '--devices', String(devices), '--batch-size', '24', '--steps', '3'],
          240_000,
        );
        assert.equal(status, 0, stdout + stderr);
        const verdict = /PASSED: the worst difference is ([0-9.]+) of its bound/.exec(stdout);
        assert.ok(verdict, stdout);
        const lines = stdout.trim().split('\n');
        const header = lines.find((l) => l.startsWith('step '));
        assert.ok(header, stdout);
        assert.equal(/\bqueues\b/.test(header), method !== 'simsiam', header);
        assert.equal(lines.filter((l) => /^\d+\s/.test(l)).length, 3, stdout);
        console.log(`      ${method}, ${devices} ranks: ${verdict[0]}`);
      });
    }
  }

  it("verify runs the trainer's own step: nnclr with the gradient cache, nnbyol with gradient accumulation (two pushes a step), 2 ranks pass", () => {
    for (const [method, extra] of [
      ['nnclr', ['--norm', 'group', '--grad-cache-chunk', '5']],
      ['nnbyol', ['--accumulate-grad-batches', '2']],
    ] as const) {
      const { status, stdout, stderr } = runCli(
        ['verify', ...SMALL_RUN, ...METHODS[method], '--method', method, '--devices', '2', '--batch-size', '24', '--steps', '3', ...extra],
        240_000,
      );
      assert.equal(status, 0, stdout + stderr);
      assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
    }
  });

  it('nnclr: a 2-rank training run ends 3 steps with the one-process parameters, buffers and support set', () => {
    const single = checkpointTensors(train('nnclr', 1));
    const ddp = checkpointTensors(train('nnclr', 2));
    assert.ok(
      Object.keys(single).some((n) => n.includes('queue.bank')),
      'the support set is in the checkpoint',
    );
    // The shift of the projector's last batch norm has a gradient of exactly 0 in exact
    // arithmetic (a shift common to all samples, which the predictor's first Linear turns into a
    // shift its batch norm removes): it starts at 0 and holds float32 round-off only (~1e-9), so a
    // difference relative to its own size means nothing; it must stay at round-off level instead.
    const roundoffOnly = 'model/projector.7.bias';
    const maxAbs = (x: Float32Array) => x.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    assert.ok(maxAbs(single[roundoffOnly]) < 1e-7 && maxAbs(ddp[roundoffOnly]) < 1e-7, 'the zero-gradient shift holds round-off only');
    const without = (t: Record<string, Float32Array>) => Object.fromEntries(Object.entries(t).filter(([n]) => n !== roundoffOnly));
    const worst = worstRelative(without(ddp), without(single));
    assert.ok(worst < 1e-5, `worst relative difference ${worst}`);
    const queueOnly = (t: Record<string, Float32Array>) => Object.fromEntries(Object.entries(t).filter(([n]) => n.includes('queue.')));
    console.log(`      nnclr, 2 ranks vs 1 process: worst relative difference ${worst} (support set: ${worstRelative(queueOnly(ddp), queueOnly(single))})`);
  });
});
