import { strict as assert } from 'node:assert';
import { SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { runCli } from '../helpers/run.js';

/**
 * `ssl-train verify` for VICReg, SupCon and DCL (both variants) on 2 and 3 ranks: each rank's
 * loss, the gradients and the parameters over 3 steps equal one process on the global batch.
 * The small setting of training.test.ts: mlp backbone (batch norm everywhere), synthetic
 * 16x16 data, global batch 24, small heads.
 */
const HEADS = SMALL_PROJECTOR;

const CASES: Array<{ title: string; args: string[] }> = [
  { title: 'vicreg', args: ['--method', 'vicreg'] },
  { title: 'supcon (labels gathered with the embeddings)', args: ['--method', 'supcon'] },
  { title: 'dcl', args: ['--method', 'dcl'] },
  { title: 'dcl with sigma 0.5 (DCLW, weights from the global batch)', args: ['--method', 'dcl', '--method-arg', 'sigma=0.5'] },
];

describe('vicreg, supcon, dcl: data-parallel training equals one process on the global batch', function () {
  this.timeout(300_000);

  for (const c of CASES) {
    for (const devices of [2, 3]) {
      it(`${c.title}: ssl-train verify --devices ${devices} passes (loss, gradients and parameters over 3 steps)`, () => {
        const { status, stdout, stderr } = runCli(
          ['verify', ...SMALL_RUN, ...HEADS, ...c.args, '--devices', String(devices), '--batch-size', '24', '--steps', '3'],
          120_000,
        );
        assert.equal(status, 0, stdout + stderr);
        const verdict = /PASSED: the worst difference is [0-9.]+ of its bound/.exec(stdout);
        assert.ok(verdict, stdout);
        assert.equal(
          stdout
            .trim()
            .split('\n')
            .filter((l) => /^\d+\s/.test(l)).length,
          3,
        );
        console.log(`      ${verdict[0]}`);
      });
    }
  }
});
