/**
 * The small settings of every built-in method for its `ssl-train verify` runs (W ranks
 * against one process), shared by the CPU exactness tests (zoo-exactness.full.test.ts) and
 * the WebGPU engine's (webgpu-exactness.full.test.ts): per method, its rows (what each
 * claims, its flags, its world size, a negative control where one exists).
 */
import { strict as assert } from 'node:assert';
import type { CliBatchResult } from './cli-batch.js';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { VIT_MICRO } from '../helpers/vit-micro.js';

const STEPS = 2;
/** A queue or support set of 40 rows: the 24-sample global batch wraps it around at step 2. */
export const QUEUE = 40;
export const ARG = (...pairs: string[]) => pairs.flatMap((p) => ['--method-arg', p]);
const HEADS = [...SMALL_PROJECTOR, ...SMALL_PREDICTOR];
export const QUEUED = [...HEADS, ...ARG(`queueSize=${QUEUE}`)];
/** tiny_resnet on 2 global 16 px and 2 local 8 px crops (the multi-crop runs of SwAV and DINO). */
const MULTI_CROP = ['--backbone', 'tiny_resnet', '--crops', '2x16:0.2-1,2x8:0.05-0.3'];
/** The mlp on the 2 global crops alone: the SwAV and DINO runs whose claim is not about multi-crop. */
export const GLOBAL_CROPS = ['--crops', '2x16:0.2-1'];
/** SwAV with the queue from the first step and the prototypes never frozen. */
const SWAV = ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=30', `queueSize=${QUEUE}`, 'epochQueueStarts=0', 'freezePrototypesEpochs=0');
/** DINO with the last layer trained from the first step, gradients clipped, the teacher temperature warming up. */
export const DINO = ARG(
  'projHiddenDim=32',
  'projOutputDim=16',
  'numPrototypes=64',
  'freezeLastLayerEpochs=0',
  'clipGrad=0.3',
  'warmupTeacherTemperatureEpochs=3',
);
/** W-MSE: D = 6, sub-batches of 12 rows (two per view, each mixing the ranks' rows), two whitening iterations. */
const WMSE = ARG('projHiddenDim=32', 'projOutputDim=6', 'whiteningSize=12', 'whiteningIters=2');
/** VIbCReg: a projector 32-32-16 ending with IterNorm in 4 groups of 4. */
const VIBCREG = ARG('projHiddenDim=32', 'projOutputDim=16', 'iternormGroups=4');
/** The ViT methods' backbone here: vit_micro (2 blocks of width 48, tests/helpers/vit-micro.ts), vit_tiny's code at a fraction of its cost. */
const VIT = ['--backbone', VIT_MICRO];
/** vit_micro on 4x4 patches of 16 px images (4 kept), a small decoder, global batch 12. */
const MAE = [...VIT, '--batch-size', '12', ...ARG('decoderEmbedDim=32', 'decoderDepth=1', 'decoderNumHeads=4')];
/** DeepCluster v2 on 48 samples, two steps an epoch: 3 steps cross an epoch boundary (k-means at epochs 0 and 1). */
const DEEPCLUSTER = [...SMALL_PROJECTOR, ...ARG('numPrototypes=8'), '--synthetic-size', '48', '--steps', '3'];

/** One `ssl-train verify` run: what it claims, its flags, its world size and what it must say. */
export interface VerifyRow {
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

/**
 * The ViT negative controls run one step: their per-rank statistic already differs at the first step, where verify
 * fails them by 100 to 7000 times its bound.
 */
const ONE_STEP = ['--steps', '1'];

/** SimDINO: a head 32-16 (K = 16 < the global batch of 24), the mlp on the 2 global crops. */
const SIMDINO = [...GLOBAL_CROPS, ...ARG('projHiddenDim=32', 'projOutputDim=16')];
/** LeJEPA: the 4 global views of the mlp, a projector 32-8, 16 directions. */
const LEJEPA = ['--crops', '4x16:0.2-1', ...ARG('projHiddenDim=32', 'projOutputDim=8', 'numSlices=16')];
/**
 * iBOT: vit_micro on 16 px crops (4x4 patches), a head 32-16 -> 32 on every token, every global crop block-masked, the
 * last layer trained from the first step, the teacher temperatures warming up, the [CLS] centre still (centreMomentum 1
 * in both rows: the control then differs in the patch centre alone).
 */
const IBOT = [
  ...VIT,
  '--batch-size',
  '12',
  ...ARG(
    'projHiddenDim=32',
    'projOutputDim=16',
    'numPrototypes=32',
    'freezeLastLayerEpochs=0',
    'maskProbability=1',
    'warmupTeacherTemperatureEpochs=3',
    'centreMomentum=1',
  ),
];

/**
 * DINOv2: iBOT's small setting (vit_micro on 16 px crops, 4x4 patches, a head 32-16 -> 32, every global crop
 * block-masked, so the ranks hold different numbers of masked patches; the last layer trained from the first step, the
 * teacher temperature warming up).
 */
const DINOV2 = [
  ...VIT,
  '--batch-size',
  '12',
  ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=32', 'freezeLastLayerEpochs=0', 'maskProbability=1', 'warmupTeacherTemperatureEpochs=3'),
];

/**
 * I-JEPA: vit_micro on 4x4 patches of 16 px images, a predictor 12 x 1, contexts of 4 patches,
 * target blocks of 0.1-0.4 of the grid (1 to 6 patches: the ranks predict different numbers of
 * target patches), global batch 12.
 */
const IJEPA = [
  ...VIT,
  '--batch-size',
  '12',
  ...ARG('predictorEmbedDim=12', 'predictorDepth=1', 'contextPatches=4', 'targetScaleMin=0.1', 'targetScaleMax=0.4'),
];

/** MSN: vit_micro, the target and one anchor at 16 px and a focal anchor at 8 px, a head 32-16, 20 prototypes, global batch 12. */
const MSN = [...VIT, '--batch-size', '12', '--crops', '2x16:0.3-1,1x8:0.05-0.3', ...ARG('projHiddenDim=32', 'projOutputDim=16', 'numPrototypes=20')];

/** VICRegL: tiny_resnet on 2 global 16 px crops (4x4 maps) and a local 8 px one (2x2), small heads, 6 and 2 matches. */
const VICREGL = [
  '--backbone',
  'tiny_resnet',
  '--crops',
  '2x16:0.2-1,1x8:0.05-0.3',
  ...ARG('projHiddenDim=32', 'projOutputDim=16', 'mapsHiddenDim=16', 'mapsOutputDim=8', 'matchesThere=6', 'matchesBack=2'),
];

/** Per built-in method: its verify runs (only what must differ from the small defaults). */
export const TABLE: Record<string, VerifyRow[]> = {
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
        // Once by rank 0 (for its W-rank method and its one-process runs alike), never by the other ranks (their one-process runs included).
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
      claim: "gradient accumulation (Sinkhorn-Knopp per micro-batch, against the step's starting queue, written once a step)",
      args: [...GLOBAL_CROPS, ...SWAV, '--accumulate-grad-batches', '2'],
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
    {
      devices: 2,
      claim: 'gradient accumulation (the centre moved once a step, from both micro-batches: tests/methods/accumulation-state.test.ts)',
      args: [...GLOBAL_CROPS, ...DINO, '--accumulate-grad-batches', '2'],
    },
    { devices: 2, claim: "negative control: a centre moved by each rank's own teacher mean", args: [...GLOBAL_CROPS, ...DINO], control: 'dino_local_centre' },
  ],
  mae: [{ devices: 3, claim: 'masks keyed by the global sample index, the masked count all-reduced', args: MAE }],
  fastsiam: [{ devices: 3, claim: '4 views, each prediction against the mean of the other views (per sample)', args: HEADS }],
  tico: [
    {
      devices: 3,
      claim: 'the running covariance from the global batch, moved once a step under gradient accumulation (2 micro-batches), EMA target',
      args: [...SMALL_PROJECTOR, '--accumulate-grad-batches', '2'],
    },
    { devices: 2, claim: "negative control: each rank's covariance of its own batch", args: SMALL_PROJECTOR, control: 'tico_local' },
  ],
  mmcr: [
    { devices: 3, claim: 'the nuclear norm of the global batch’s centroid matrix (8 views)', args: SMALL_PROJECTOR },
    { devices: 2, claim: "negative control: each rank's nuclear norm of its own centroids", args: SMALL_PROJECTOR, control: 'mmcr_local' },
  ],
  simdino: [
    { devices: 3, claim: 'the coding rate of the global batch (Gram matrices all-reduced), the EMA teacher', args: SIMDINO },
    { devices: 2, claim: "negative control: each rank's own coding rate (the reference's reduce_cov=0)", args: SIMDINO, control: 'simdino_local' },
  ],
  lejepa: [
    {
      devices: 3,
      claim: "SIGReg's characteristic function over the global batch (sums all-reduced with their gradient), directions keyed by the step",
      args: LEJEPA,
    },
    { devices: 2, claim: "negative control: SIGReg of each rank's own batch", args: LEJEPA, control: 'lejepa_local' },
  ],
  ijepa: [{ devices: 3, claim: 'multi-block masks keyed by the global sample index, the target-patch count all-reduced, the EMA target encoder', args: IJEPA }],
  msn: [
    {
      devices: 3,
      claim: 'ME-MAX of the global batch (anchor probabilities all-reduced), Sinkhorn-Knopp targets over the global batch, keyed patch masks, the EMA target',
      args: MSN,
    },
    {
      devices: 2,
      claim: "negative control: ME-MAX of each rank's own mean (lightly's MSNLoss)",
      args: [...MSN, ...ARG('sinkhornIterations=0'), ...ONE_STEP],
      control: 'msn_local',
    },
  ],
  vicregl: [
    {
      devices: 3,
      claim: 'variance and covariance of the embeddings and of every matched feature-map location over the global batch',
      args: VICREGL,
    },
    { devices: 2, claim: "negative control: the feature maps' variance and covariance of each rank's own batch", args: VICREGL, control: 'vicregl_local' },
  ],
  ibot: [
    {
      devices: 3,
      claim:
        'the patch centre from the global batch, moved once a step under gradient accumulation (2 micro-batches), block masks keyed per sample, the mask token',
      args: [...IBOT, '--accumulate-grad-batches', '2'],
    },
    {
      devices: 2,
      claim: "negative control: a patch centre moved by each rank's own teacher patch means",
      args: [...IBOT, ...ONE_STEP],
      control: 'ibot_local_patch_centre',
    },
  ],
  dinov2: [
    {
      devices: 3,
      claim:
        'Sinkhorn-Knopp of the [CLS] and of the masked patches (different counts per rank) and KoLeo over the global batch, the EMA teacher once a step under gradient accumulation (2 micro-batches)',
      args: [...DINOV2, '--accumulate-grad-batches', '2'],
    },
    {
      devices: 2,
      claim: "negative control: both Sinkhorn-Knopp balancings of each rank's own rows (KoLeo off)",
      args: [...DINOV2, ...ARG('koleoWeight=0'), ...ONE_STEP],
      control: 'dinov2_local_sinkhorn',
    },
    {
      devices: 2,
      claim: "negative control: KoLeo's nearest neighbours among each rank's own rows (the reference's per-GPU KoLeo)",
      args: [...DINOV2, ...ONE_STEP],
      control: 'dinov2_local_koleo',
    },
  ],
};

/** Entry id of row `i` of `method`'s rows. */
export const rowId = (method: string, i: number) => `${method}-${i}`;
/** The argv of a verify row: verify's small defaults, then the row's flags (later flags win). */
export const verifyArgv = (method: string, row: VerifyRow) => [
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
export const stepsOf = (row: VerifyRow) => Number(row.args[row.args.lastIndexOf('--steps') + 1] ?? STEPS) || STEPS;
