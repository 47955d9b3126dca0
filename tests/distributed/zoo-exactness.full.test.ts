/**
 * Every built-in method (src/methods/registry.ts) trained on W real ranks over Gloo, each rank
 * with its own samples, against one process on the global batch: `ssl-train verify` (loss,
 * gradients, parameters, buffers and queue/memory state per step, within verify's measured
 * round-off bound) at 3 ranks for every method, plus the variants that take another code path
 * (extra flags and arguments, mostly at 2 ranks) and the negative controls that verify must
 * fail; then 2-rank training runs whose checkpoints (queues, support sets, prototypes) equal
 * one process's, and runs stopped and resumed that end bit-identical to uninterrupted ones.
 *
 * The table below is keyed by method; a built-in method without an entry fails the first test,
 * naming itself, and every test title and failure message names its method. The verify runs
 * of one world size share one launch (tests/distributed/cli-batch.ts): W processes run every
 * command line in turn through the CLI's own `main`, each over its own rendezvous.
 *
 * Small settings: mlp backbone (batch norm everywhere, synchronised), synthetic 16x16 data,
 * global batch 24, small heads, 2 steps (a queue of 40 rows wraps around at the second step);
 * tiny_resnet with 2 global and 2 local crops for the multi-crop runs of SwAV and DINO (their
 * other runs: the mlp on the global crops); vit_tiny for MAE (batch 12).
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';
import { runCliBatch, type CliBatchResult } from './cli-batch.js';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';

const STEPS = 2;
/** A queue or support set of 40 rows: the 24-sample global batch wraps it around at step 2. */
const QUEUE = 40;
const ARG = (...pairs: string[]) => pairs.flatMap((p) => ['--method-arg', p]);
const HEADS = [...SMALL_PROJECTOR, ...SMALL_PREDICTOR];
const QUEUED = [...HEADS, ...ARG(`queueSize=${QUEUE}`)];
/** tiny_resnet on 2 global 16 px and 2 local 8 px crops (the multi-crop runs of SwAV and DINO). */
const MULTI_CROP = ['--backbone', 'tiny_resnet', '--crops', '2x16:0.2-1,2x8:0.05-0.3'];
/** The mlp on the 2 global crops alone: the SwAV and DINO runs whose claim is not about multi-crop. */
const GLOBAL_CROPS = ['--crops', '2x16:0.2-1'];
/** SwAV with the queue from the first step and the prototypes never frozen. */
const SWAV = ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=30', `queueSize=${QUEUE}`, 'epochQueueStarts=0', 'freezePrototypesEpochs=0');
/** DINO with the last layer trained from the first step, gradients clipped, the teacher temperature warming up. */
const DINO = ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=64', 'freezeLastLayerEpochs=0', 'clipGrad=0.3', 'warmupTeacherTemperatureEpochs=3');
/** W-MSE: D = 6, sub-batches of 12 rows (two per view, each mixing the ranks' rows), two whitening iterations. */
const WMSE = ARG('projHiddenDim=32', 'projOutputDim=6', 'whiteningSize=12', 'whiteningIters=2');
/** VIbCReg: a projector 32-32-16 ending with IterNorm in 4 groups of 4. */
const VIBCREG = ARG('projHiddenDim=32', 'projOutputDim=16', 'iternormGroups=4');
/** vit_tiny on 4x4 patches of 16 px images (4 kept), a small decoder, global batch 12. */
const MAE = ['--backbone', 'vit_tiny', '--batch-size', '12', ...ARG('decoderEmbedDim=32', 'decoderDepth=1', 'decoderNumHeads=4')];
/** DeepCluster v2 on 48 samples, two steps an epoch: 3 steps cross an epoch boundary (k-means at epochs 0 and 1). */
const DEEPCLUSTER = [...SMALL_PROJECTOR, ...ARG('numPrototypes=8'), '--synthetic-size', '48', '--steps', '3'];

/** One `ssl-train verify` run: what it claims, its flags, its world size and what it must say. */
interface VerifyRow {
  devices: 2 | 3;
  claim: string;
  args: string[];
  /** A negative control registered by the batch worker (tests/methods/*): verify must fail it. */
  control?: string;
  /** Whether verify's table has a `queues` column (state written from data: queues, memory banks). */
  queues?: boolean;
  /** A further check of the run's output. */
  check?: (run: CliBatchResult) => void;
}

/** Per built-in method: its verify runs (only what must differ from the small defaults). */
const TABLE: Record<string, VerifyRow[]> = {
  simclr: [{ devices: 3, claim: 'NT-Xent over the gathered batch', args: SMALL_PROJECTOR }],
  barlow_twins: [{ devices: 3, claim: 'cross-correlation from global statistics', args: SMALL_PROJECTOR }],
  byol: [{ devices: 3, claim: 'EMA target and predictor', args: HEADS }],
  mocov2plus: [
    { devices: 3, claim: 'a wrapping queue of keys per view', args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`)], queues: true },
    {
      devices: 2,
      claim: 'batch norm in the projector and its EMA copy (useBnInProjector=true)',
      args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`, 'useBnInProjector=true')],
      queues: true,
    },
  ],
  mocov3: [{ devices: 3, claim: 'EMA target, predictor, contrastive loss over the gathered keys', args: HEADS }],
  ressl: [
    { devices: 3, claim: 'a wrapping queue of weak-view keys', args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`)], queues: true },
    {
      devices: 2,
      claim: 'batch norm in the projector and its EMA copy (useBnInProjector=true)',
      args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`, 'useBnInProjector=true')],
      queues: true,
    },
  ],
  vicreg: [{ devices: 3, claim: 'variance and covariance over the global batch', args: SMALL_PROJECTOR }],
  supcon: [
    { devices: 3, claim: 'L_in (variant in, the default): labels gathered with the embeddings', args: SMALL_PROJECTOR },
    {
      devices: 2,
      claim: 'L_out (variant=out): the mean of per-positive log-probabilities over the gathered batch',
      args: [...SMALL_PROJECTOR, ...ARG('variant=out')],
    },
  ],
  dcl: [
    { devices: 3, claim: 'decoupled contrastive loss (sigma 0)', args: SMALL_PROJECTOR },
    { devices: 2, claim: 'DCLW (sigma=0.5, weights from the global batch)', args: [...SMALL_PROJECTOR, ...ARG('sigma=0.5')] },
  ],
  simsiam: [{ devices: 3, claim: 'predictor with a static lr group', args: HEADS }],
  nnclr: [
    { devices: 3, claim: 'a wrapping support set of nearest neighbours', args: QUEUED, queues: true },
    {
      devices: 2,
      claim: "the trainer's gradient cache (--norm group, chunks of 5)",
      args: [...QUEUED, '--norm', 'group', '--grad-cache-chunk', '5'],
      queues: true,
    },
  ],
  nnbyol: [
    { devices: 3, claim: 'a wrapping support set and the EMA target', args: QUEUED, queues: true },
    { devices: 2, claim: 'gradient accumulation (two support-set pushes a step)', args: [...QUEUED, '--accumulate-grad-batches', '2'], queues: true },
  ],
  nnsiam: [{ devices: 3, claim: 'a wrapping support set and the predictor', args: QUEUED, queues: true }],
  all4one: [
    { devices: 3, claim: 'a wrapping support set and the transformer heads', args: QUEUED, queues: true },
    { devices: 2, claim: 'negative control: a per-rank support set (rows not gathered)', args: QUEUED, control: 'all4one_local_queue', queues: true },
  ],
  wmse: [
    { devices: 2, claim: "whitened sub-batches mix every rank's rows", args: WMSE },
    {
      devices: 3,
      claim: 'a whitening size that does not divide the global batch (10 of 24): sub-batches of 8, said once',
      args: [...WMSE, ...ARG('whiteningSize=10')],
      check: (run) => {
        const note = "ssl-train: note: wmse's whitening size 10 does not divide the global batch of 24; whitening sub-batches of 8 rows instead";
        const said = run.stderr.flatMap((text) => text.split('\n')).filter((l) => l === note);
        // Once by rank 0 (for its W-rank method, the one-process reference and the twins alike), never by the other ranks.
        assert.equal(said.length, 1, `wmse: the note was said ${said.length} times\n${run.stderr.join('\n')}`);
      },
    },
    { devices: 2, claim: "negative control: whitening each rank's batch on its own", args: WMSE, control: 'wmse_local' },
  ],
  vibcreg: [
    { devices: 3, claim: 'IterNorm converted to SyncIterNorm with the batch norms', args: VIBCREG },
    { devices: 2, claim: 'with per-sample norms elsewhere (--norm layer), IterNorm alone couples the samples', args: [...VIBCREG, '--norm', 'layer'] },
    {
      devices: 2,
      claim: 'negative control: IterNorm with per-rank statistics (--norm layer --sync-batchnorm false)',
      args: [...VIBCREG, '--norm', 'layer', '--sync-batchnorm', 'false'],
      control: 'vibcreg',
    },
  ],
  deepclusterv2: [{ devices: 3, claim: 'memory bank and k-means at two epoch starts (3 steps)', args: DEEPCLUSTER, queues: true }],
  swav: [
    {
      devices: 3,
      claim: 'multi-crop (tiny_resnet), prototypes trained, Sinkhorn-Knopp over the global batch, a wrapping queue',
      args: [...MULTI_CROP, ...SWAV],
      queues: true,
    },
    {
      devices: 2,
      claim: 'negative control: a per-rank Sinkhorn-Knopp (no queue)',
      args: [...GLOBAL_CROPS, ...SWAV, ...ARG('queueSize=0')],
      control: 'swav_local_sinkhorn',
    },
  ],
  dino: [
    { devices: 3, claim: 'multi-crop (tiny_resnet), last layer trained, gradients clipped, the centre from the global batch', args: [...MULTI_CROP, ...DINO] },
    { devices: 2, claim: 'batch norm in the student and teacher heads (useBnInHead=true)', args: [...GLOBAL_CROPS, ...DINO, ...ARG('useBnInHead=true')] },
    { devices: 2, claim: "negative control: a centre moved by each rank's own teacher mean", args: [...GLOBAL_CROPS, ...DINO], control: 'dino_local_centre' },
  ],
  mae: [{ devices: 3, claim: 'masks keyed by the global sample index, the masked count all-reduced', args: MAE }],
};

/** Entry id of row `i` of `method`'s rows. */
const rowId = (method: string, i: number) => `${method}-${i}`;
/** The argv of a verify row: verify's small defaults, then the row's flags (later flags win). */
const verifyArgv = (method: string, row: VerifyRow) => [
  'verify',
  ...SMALL_RUN,
  '--batch-size',
  '24',
  '--steps',
  String(STEPS),
  '--timeout',
  '60',
  ...row.args,
  '--method',
  row.control && row.control !== method ? row.control : method,
  '--devices',
  String(row.devices),
];
/** The number of steps a verify row runs (its own `--steps` if it has one). */
const stepsOf = (row: VerifyRow) => Number(row.args[row.args.lastIndexOf('--steps') + 1] ?? STEPS) || STEPS;

/** A training run's flags: the method's small setting, `devices` ranks, into `runDir`. */
function trainArgv(method: string, args: string[], devices: number, runDir: string, extra: string[]): string[] {
  return [
    ...SMALL_RUN,
    '--batch-size',
    '24',
    '--warmup-epochs',
    '0',
    '--timeout',
    '60',
    ...args,
    '--method',
    method,
    '--devices',
    String(devices),
    '--run-dir',
    runDir,
    ...extra,
  ];
}

/** 2-rank training runs compared with one process after their last step (checkpoint tensors). */
const TRAINING: Record<string, { args: string[]; extra: string[] }> = {
  mocov2plus: { args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`)], extra: ['--max-steps', '3', '--epochs', '2'] },
  ressl: { args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`)], extra: ['--max-steps', '3', '--epochs', '2'] },
  nnclr: { args: QUEUED, extra: ['--max-steps', '3', '--epochs', '2'] },
  all4one: { args: QUEUED, extra: ['--max-steps', '3', '--epochs', '2'] },
  // Across an epoch boundary (96 samples: 4 steps an epoch): prototypes frozen for the first
  // epoch, the queue from the second. Softer assignments and predictions (ε 0.5, τ 0.5) and a
  // small lr: with the defaults float32 round-off grows from step to step too fast for a fixed bound.
  swav: {
    args: [
      ...GLOBAL_CROPS,
      ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=30', `queueSize=${QUEUE}`),
      ...ARG('epochQueueStarts=1', 'freezePrototypesEpochs=1', 'skEpsilon=0.5', 'temperature=0.5'),
      '--lr',
      '0.05',
      '--synthetic-size',
      '96',
    ],
    extra: ['--max-steps', '6', '--epochs', '2'],
  },
};

/** Runs stopped after `stop` steps and resumed (a new launch) against uninterrupted ones: 96 samples, 4 steps an epoch, 2 epochs. */
const RESUME: Record<string, { args: string[]; stop: number }> = {
  mocov2plus: { args: [...SMALL_PROJECTOR, ...ARG(`queueSize=${QUEUE}`), '--synthetic-size', '96'], stop: 3 },
  dino: { args: [...GLOBAL_CROPS, ...DINO, '--synthetic-size', '96'], stop: 3 },
};
const RESUME_FLAGS = ['--epochs', '2', '--log-every', '1'];
const RESUME_STEPS = 8;

/** Every tensor of `runDir/checkpoints/last.ckpt` (model and optimizer state), as raw arrays. */
function allTensors(runDir: string): Record<string, Float32Array | Int32Array> {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
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

/** Asserts that `id`'s command line exited 0 on every rank (the message names `what`). */
function assertRan(runs: Map<string, CliBatchResult>, id: string, what: string): CliBatchResult {
  const run = runs.get(id);
  assert.ok(run, `${what}: not run`);
  assert.ok(
    run.codes.every((c) => c === 0),
    `${what}: exit codes ${JSON.stringify(run.codes)}\n${run.stdout}\n${run.stderr.join('\n')}`,
  );
  return run;
}

describe('every method: W ranks equal one process on the global batch (ssl-train verify, training runs, resume)', function () {
  this.timeout(1_800_000);
  const runs = new Map<string, CliBatchResult>();
  const dirs = { ref: new Map<string, string>(), ddp: new Map<string, string>(), straight: new Map<string, string>(), split: new Map<string, string>() };
  const atStop = new Map<string, Record<string, Float32Array | Int32Array>>();

  before(async function () {
    const batches: Record<number, Record<string, string[]>> = { 1: {}, 2: {}, 3: {} };
    for (const [method, rows] of Object.entries(TABLE)) rows.forEach((row, i) => (batches[row.devices]![rowId(method, i)] = verifyArgv(method, row)));
    for (const [method, { args, extra }] of Object.entries(TRAINING)) {
      dirs.ref.set(method, join(tempDir(), 'run'));
      dirs.ddp.set(method, join(tempDir(), 'run'));
      batches[1]![`train-${method}`] = trainArgv(method, args, 1, dirs.ref.get(method)!, extra);
      batches[2]![`train-${method}`] = trainArgv(method, args, 2, dirs.ddp.get(method)!, extra);
    }
    const uninterrupted: Record<string, string[]> = {};
    for (const [method, { args, stop }] of Object.entries(RESUME)) {
      dirs.straight.set(method, join(tempDir(), 'straight'));
      dirs.split.set(method, join(tempDir(), 'split'));
      uninterrupted[`straight-${method}`] = trainArgv(method, args, 2, dirs.straight.get(method)!, RESUME_FLAGS);
      uninterrupted[`stop-${method}`] = trainArgv(method, args, 2, dirs.split.get(method)!, [...RESUME_FLAGS, '--max-steps', String(stop)]);
    }
    /** The uninterrupted and the stopped runs, then the resumed ones in a new launch (beside the other batches). */
    const resumeRuns = async (): Promise<Map<string, CliBatchResult>> => {
      const first = await runCliBatch(2, uninterrupted, 900_000);
      const resumed: Record<string, string[]> = {};
      for (const [method, { args }] of Object.entries(RESUME)) {
        if (first.get(`stop-${method}`)?.codes.every((c) => c === 0)) atStop.set(method, allTensors(dirs.split.get(method)!));
        resumed[`resume-${method}`] = trainArgv(method, args, 2, dirs.split.get(method)!, [...RESUME_FLAGS, '--resume', 'auto']);
      }
      return new Map([...first, ...(await runCliBatch(2, resumed, 600_000))]);
    };
    const started = Date.now();
    const launched = await Promise.all([
      ...[1, 2, 3].map(async (w) => [w, await runCliBatch(w, batches[w]!, 1_500_000)] as const),
      resumeRuns().then((results) => [2, results] as const),
    ]);
    for (const [w, results] of launched) for (const [id, run] of results) runs.set(`${w}:${id}`, run);
    console.log(`      ${runs.size} command lines in 5 launches: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  });

  it('every built-in method has a verify entry (a method missing from the table fails here, by name)', () => {
    const missing = BUILT_IN_METHODS.filter((m) => !(m in TABLE) || TABLE[m]!.length === 0);
    assert.deepEqual(missing, [], `built-in methods without an entry in the exactness table: ${missing.join(', ')}`);
    const extra = Object.keys(TABLE).filter((m) => !BUILT_IN_METHODS.includes(m));
    assert.deepEqual(extra, [], `table entries for methods that are not registered: ${extra.join(', ')}`);
  });

  for (const method of BUILT_IN_METHODS) {
    (TABLE[method] ?? []).forEach((row, i) => {
      const expected = row.control ? 'FAILED' : 'PASSED';
      it(`${method}: ${row.claim}: verify --devices ${row.devices} ${row.control ? 'fails' : 'passes'}`, () => {
        const run = runs.get(`${row.devices}:${rowId(method, i)}`);
        assert.ok(run, `${method}: row ${i} was not run`);
        const what = `${method} (${row.claim}, ${row.devices} ranks)`;
        const codes = run.codes.map((c) => c ?? 'none').join(', ');
        assert.equal(run.codes[0], row.control ? 1 : 0, `${what}: exit codes ${codes}\n${run.stdout}\n${run.stderr.join('\n')}`);
        const verdict = new RegExp(`${expected}: the worst difference is [0-9.]+ of its bound`).exec(run.stdout);
        assert.ok(verdict, `${what}: verify did not say ${expected}\n${run.stdout}\n${run.stderr.join('\n')}`);
        const lines = run.stdout.trim().split('\n');
        const header = lines.find((l) => l.startsWith('step '));
        assert.ok(header, `${what}: no table\n${run.stdout}`);
        assert.equal(/\squeues\s/.test(header), row.queues === true, `${what}: queues column ${row.queues ? 'missing' : 'unexpected'}: ${header}`);
        assert.equal(lines.filter((l) => /^\d+\s/.test(l)).length, stepsOf(row), `${what}: step rows\n${run.stdout}`);
        row.check?.(run);
        console.log(`      ${verdict[0]}`);
      });
    });
  }

  for (const method of Object.keys(TRAINING)) {
    it(`${method}: a 2-rank training run ends with the one-process parameters, buffers and queue or support set`, () => {
      assertRan(runs, `1:train-${method}`, `${method} (one process)`);
      assertRan(runs, `2:train-${method}`, `${method} (2 ranks)`);
      const single = checkpointTensors(dirs.ref.get(method)!);
      const ddp = checkpointTensors(dirs.ddp.get(method)!);
      const steps = Number(TRAINING[method]!.extra[TRAINING[method]!.extra.indexOf('--max-steps') + 1]);
      assert.equal(single['model/queue.pointer']?.[0], (steps * 24) % QUEUE, `${method}: the queue wrapped around`);
      assert.deepEqual(ddp['model/queue.pointer'], single['model/queue.pointer'], `${method}: queue pointer`);
      // nnclr: the shift of the projector's last batch norm has a gradient of exactly 0 in exact
      // arithmetic (a common shift the predictor's batch norm removes): it holds round-off only
      // (~1e-9), so it must stay at round-off level instead of matching relative to its size.
      const roundoffOnly = method === 'nnclr' ? 'model/projector.7.bias' : undefined;
      if (roundoffOnly) {
        const maxAbs = (x: Float32Array) => x.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        assert.ok(maxAbs(single[roundoffOnly]!) < 1e-7 && maxAbs(ddp[roundoffOnly]!) < 1e-7, `${method}: the zero-gradient shift holds round-off only`);
      }
      const without = (t: Record<string, Float32Array>) => Object.fromEntries(Object.entries(t).filter(([n]) => n !== roundoffOnly));
      const per = Object.keys(without(single)).map((name) => [name, worstRelative({ [name]: ddp[name]! }, { [name]: single[name]! })] as const);
      const [name, worst] = per.reduce((a, b) => (b[1] > a[1] ? b : a));
      const bound = method === 'swav' ? 1e-3 : 1e-5;
      assert.ok(worst < bound, `${method}: worst relative difference ${worst} (${name}), bound ${bound}`);
      console.log(`      ${method}: worst relative difference 2 ranks vs 1 process ${worst.toExponential(2)} (${name})`);
    });
  }

  for (const [method, { stop }] of Object.entries(RESUME)) {
    it(`${method}: 2 ranks stopped after ${stop} steps and resumed in a new launch end ${RESUME_STEPS} steps bit-identical to an uninterrupted run (state, optimizer, loss per step)`, () => {
      assertRan(runs, `2:straight-${method}`, `${method} (uninterrupted)`);
      assertRan(runs, `2:stop-${method}`, `${method} (stopped after ${stop} steps)`);
      assertRan(runs, `2:resume-${method}`, `${method} (resumed)`);
      const [a, b] = [allTensors(dirs.straight.get(method)!), allTensors(dirs.split.get(method)!)];
      assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort(), `${method}: checkpoint tensors`);
      for (const name of Object.keys(a)) assert.deepEqual(b[name], a[name], `${method}: ${name}`);
      const [la, lb] = [losses(dirs.straight.get(method)!), losses(dirs.split.get(method)!)];
      assert.equal(la.size, RESUME_STEPS, `${method}: logged steps`);
      for (let step = 1; step <= RESUME_STEPS; step++) assert.equal(lb.get(step), la.get(step), `${method}: loss at step ${step}`);
      const before = atStop.get(method)!;
      if (method === 'dino') assert.notDeepEqual(a['model/centre'], before['model/centre'], 'dino: the centre moved after the resume');
      if (method === 'mocov2plus') {
        // The queue wrapped around: every slot of both views was rewritten after the resume.
        assert.equal(before['model/queue.pointer']![0], (stop * 24) % QUEUE);
        assert.equal(a['model/queue.pointer']![0], (RESUME_STEPS * 24) % QUEUE);
        const [old, now] = [before['model/queue.bank']!, a['model/queue.bank']!];
        const dim = 16;
        for (let row = 0; row < 2 * QUEUE; row++) {
          const same = now.subarray(row * dim, (row + 1) * dim).every((v, i) => v === old[row * dim + i]);
          assert.ok(!same, `mocov2plus: queue row ${row} was rewritten after the resume`);
        }
      }
    });
  }
});
