/**
 * Slow tier: `ssl-train verify --backend webgpu --engine-against cpu` for every method of the
 * registry (the WebGPU engine on SwiftShader here, tests/helpers/webgpu.ts), on small shapes
 * (mlp on 16x16 synthetic images, or vit_micro for the ViT methods, tests/helpers/vit-micro.ts; batch 8; 2 steps; small heads; queues
 * of 16 rows), in one process in turn: the same initial state, and every step's loss,
 * gradients, parameters, buffers and queues within the round-off bound of verify, each webgpu
 * step run with synchronous reads of the device refused (src/core/sync-reads.ts: a method whose
 * step reads one fails here). And plain `verify --backend webgpu` (one rank against the
 * one-process reference, both on webgpu).
 */
import { strict as assert } from 'node:assert';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { runCliBatch, type CliBatchResult } from '../distributed/cli-batch.js';
import { SMALL_PROJECTOR } from '../helpers/run.js';
import { VIT_MICRO } from '../helpers/vit-micro.js';
import { webgpuEnv } from '../helpers/webgpu.js';

const ARG = (...pairs: string[]) => pairs.flatMap((p) => ['--method-arg', p]);
/** Small shapes: mlp on 16x16 synthetic images, batch 8, 2 steps. */
const SMALL = [
  ...['--steps', '2', '--backbone', 'mlp', '--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '32'],
  ...['--batch-size', '8', '--workers', '0', '--val-every', '0'],
];
const BASE = ['verify', '--backend', 'webgpu', '--engine-against', 'cpu', ...SMALL];
const HEADS = [...SMALL_PROJECTOR, ...ARG('predHiddenDim=32')];
const QUEUED = [...HEADS, ...ARG('queueSize=16')];
/** The two global crops alone (the mlp takes one input size). */
const GLOBAL_CROPS = ['--crops', '2x16:0.2-1'];

/** Per method, the flags beyond {@link BASE} (later flags win); a method not listed runs with {@link SMALL_PROJECTOR}. */
const ARGS: Record<string, string[]> = {
  byol: HEADS,
  mocov3: HEADS,
  simsiam: HEADS,
  mocov2plus: [...SMALL_PROJECTOR, ...ARG('queueSize=16')],
  ressl: [...SMALL_PROJECTOR, ...ARG('queueSize=16')],
  nnclr: QUEUED,
  nnbyol: QUEUED,
  nnsiam: QUEUED,
  all4one: QUEUED,
  wmse: ARG('projHiddenDim=32', 'projOutputDim=4', 'whiteningSize=8'),
  vibcreg: ARG('projHiddenDim=32', 'projOutputDim=16', 'iternormGroups=4'),
  deepclusterv2: [...SMALL_PROJECTOR, ...ARG('numPrototypes=8'), '--synthetic-size', '16'],
  swav: [...GLOBAL_CROPS, ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=30', 'queueSize=16', 'epochQueueStarts=0', 'freezePrototypesEpochs=0')],
  dino: [...GLOBAL_CROPS, ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=64', 'freezeLastLayerEpochs=0', 'clipGrad=0.3')],
  mae: ['--backbone', VIT_MICRO, ...ARG('decoderEmbedDim=32', 'decoderDepth=1', 'decoderNumHeads=4')],
  fastsiam: HEADS,
  tico: SMALL_PROJECTOR,
  mmcr: SMALL_PROJECTOR,
  simdino: [...GLOBAL_CROPS, ...ARG('projHiddenDim=32', 'projOutputDim=16')],
  lejepa: ['--crops', '4x16:0.2-1', ...ARG('projHiddenDim=32', 'projOutputDim=8', 'numSlices=16')],
  ijepa: ['--backbone', VIT_MICRO, ...ARG('predictorEmbedDim=12', 'predictorDepth=1', 'contextPatches=4')],
  msn: ['--backbone', VIT_MICRO, '--crops', '2x16:0.3-1', ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=20')],
  vicregl: [
    '--backbone',
    'tiny_resnet',
    ...GLOBAL_CROPS,
    ...ARG('projHiddenDim=32', 'projOutputDim=16', 'mapsHiddenDim=16', 'mapsOutputDim=8', 'matchesThere=6', 'matchesBack=2'),
  ],
  ibot: ['--backbone', VIT_MICRO, ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=32', 'freezeLastLayerEpochs=0', 'maskProbability=1')],
  dinov2: ['--backbone', VIT_MICRO, ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=32', 'freezeLastLayerEpochs=0', 'maskProbability=1')],
};

describe('verify --engine-against: every method on webgpu against cpu (small shapes, 2 steps)', function () {
  this.timeout(1_200_000);
  let runs = new Map<string, CliBatchResult>();

  // Every command line in one process, in turn (tests/distributed/cli-batch.ts): each run's
  // WebGPU start-up and shader compilation cost more than its two small steps.
  before(async () => {
    const entries: Record<string, string[]> = { 'one-rank': ['verify', '--backend', 'webgpu', ...SMALL, '--method', 'simclr', ...SMALL_PROJECTOR] };
    for (const method of BUILT_IN_METHODS) entries[method] = [...BASE, '--method', method, ...(ARGS[method] ?? SMALL_PROJECTOR)];
    const started = Date.now();
    runs = await runCliBatch(1, entries, 1_100_000, webgpuEnv());
    console.log(`      ${runs.size} verify runs in one process: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  });

  /** Asserts that `id`'s run printed `header` (and `lines`) and PASSED, and exited 0. */
  function assertPassed(id: string, header: RegExp, lines: RegExp[] = []): void {
    const run = runs.get(id);
    assert.ok(run, `${id}: not run`);
    const output = `${id}: exit ${run.codes[0] ?? 'none (killed)'}\n${run.stdout}${run.stderr[0]}`;
    assert.match(run.stdout, header, output);
    for (const line of lines) assert.match(run.stdout, line, output);
    assert.match(run.stdout, /^PASSED: the worst difference is [0-9.]+ of its bound$/m, output);
    assert.equal(run.codes[0], 0, output);
  }

  it('every method with its own flags is registered', () => {
    assert.deepEqual(
      Object.keys(ARGS).filter((m) => !BUILT_IN_METHODS.includes(m)),
      [],
    );
  });

  it('verify --backend webgpu with one rank (simclr, 2 steps): the one-rank run equals the one-process reference on webgpu', () => {
    assertPassed('one-rank', /^verify simclr: 1 rank\(s\) vs one process on the same global batch$/m);
  });

  for (const method of BUILT_IN_METHODS) {
    it(`${method}: passes, with no synchronous read of the device in a step`, () =>
      assertPassed(method, new RegExp(`^verify ${method}: engine webgpu against cpu on the same steps`, 'm'), [
        /^no synchronous read of the device in any webgpu step \(each step ran with them refused\)$/m,
      ]));
  }
});
