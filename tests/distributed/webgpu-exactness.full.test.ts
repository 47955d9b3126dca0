/**
 * The distributed contract on the WebGPU engine: `ssl-train verify --backend webgpu --devices 2`
 * (2 ranks, each on the WebGPU engine, against one process on the global batch, loss,
 * gradients, parameters and state within verify's round-off bound), and one negative control
 * that must fail. CI runs one method per kind of cross-rank traffic ({@link CI_METHODS}: 20 to
 * 90 s a run on SwiftShader); `WEBGPU_EXACTNESS=all` runs every built-in method (each method's
 * own WebGPU kernels are checked against the CPU engine by engine-against.full.test.ts). Both ranks run on SwiftShader (tests/helpers/webgpu.ts),
 * so the collectives cross ranks through synchronous device reads (src/core/webgpu-backend.ts).
 * The settings are the CPU exactness test's first row per method (tests/distributed/zoo-table.ts),
 * at 2 ranks; one launch of 2 processes runs them all (tests/distributed/cli-batch.ts).
 */
import { strict as assert } from 'node:assert';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { SWIFTSHADER_ICD } from '../helpers/webgpu.js';
import { runCliBatch, type CliBatchResult } from './cli-batch.js';
import { TABLE, verifyArgv, type VerifyRow } from './zoo-table.js';

/** The WebGPU engine, one step (SwiftShader is slow; the first step holds the claim: queues are written, the state moves). */
const ENGINE = ['--backend', 'webgpu', '--steps', '1'];
/** SwAV's multi-crop tiny_resnet row at a global batch of 8 (4 a rank): 87 s on SwiftShader, where the table's 24 took 182 s. */
const SMALLER: Record<string, string[]> = { swav: ['--batch-size', '8'] };

/** Per method, its first claim (not a control), at 2 ranks. */
function firstRow(method: string): VerifyRow {
  const row = TABLE[method]!.find((r) => !r.control)!;
  return { ...row, devices: 2 };
}
/**
 * One method per kind of traffic between ranks inside a step: a gathered contrastive batch
 * with its gradient (simclr; W-MSE's whitening and MoCo v3 gather the same way), a queue with
 * nearest-neighbour decisions (nnclr; MoCo v2+'s queue is written the same way), all-reduced
 * statistics on multi-crop tiny_resnet (swav's Sinkhorn-Knopp; DINO's centre is an all-reduce
 * too), k-means over a memory bank (deepclusterv2); synchronised batch norm and a momentum
 * target run in the `--gpus 2` row (byol).
 */
const CI_METHODS = ['simclr', 'nnclr', 'swav', 'deepclusterv2'];
const METHODS = process.env.WEBGPU_EXACTNESS === 'all' ? BUILT_IN_METHODS : CI_METHODS;

/** The negative control: SwAV with a per-rank Sinkhorn-Knopp. */
const CONTROL = { method: 'swav', row: TABLE.swav!.find((r) => r.control)! };

describe(`${METHODS === BUILT_IN_METHODS ? 'every method' : `${METHODS.length} methods`} on the WebGPU engine: 2 ranks equal one process (ssl-train verify --backend webgpu --devices 2)`, function () {
  this.timeout(2_400_000);
  let runs = new Map<string, CliBatchResult>();

  before(async () => {
    process.env.VK_ICD_FILENAMES ??= SWIFTSHADER_ICD;
    const entries: Record<string, string[]> = {};
    for (const method of METHODS) entries[method] = [...verifyArgv(method, firstRow(method)), ...ENGINE, ...(SMALLER[method] ?? [])];
    entries.control = [...verifyArgv(CONTROL.method, { ...CONTROL.row, devices: 2 }), ...ENGINE];
    // `--gpus 2` rather than `--devices 2`: each rank takes its adapter, here both the one
    // software adapter (shared, as --allow-software-adapter allows).
    entries.gpus = [...verifyArgv('byol', { ...firstRow('byol') }), '--steps', '1', '--gpus', '2', '--allow-software-adapter'];
    const started = Date.now();
    runs = await runCliBatch(2, entries, 2_200_000);
    console.log(`      ${runs.size} verify runs on 2 WebGPU ranks: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  });

  for (const method of [...METHODS, 'control', 'gpus']) {
    const control = method === 'control';
    const title = {
      control: `${CONTROL.row.claim}: fails`,
      gpus: 'byol with --gpus 2 --allow-software-adapter (2 ranks on one software adapter): passes',
    };
    it(title[method as keyof typeof title] ?? `${method}: ${firstRow(method).claim}: passes`, () => {
      const run = runs.get(method);
      assert.ok(run, `${method} was not run`);
      const output = `${run.stdout}\n${run.stderr.join('\n')}`;
      assert.equal(run.codes[0], control ? 1 : 0, `${method}: exit codes ${run.codes.join(', ')}\n${output}`);
      const verdict = new RegExp(`${control ? 'FAILED' : 'PASSED'}: the worst difference is [0-9.]+ of its bound`).exec(run.stdout);
      assert.ok(verdict, `${method}: verify did not say ${control ? 'FAILED' : 'PASSED'}\n${output}`);
      console.log(`      ${verdict[0]}`);
    });
  }
});
