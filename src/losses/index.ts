/**
 * Loss functions of embeddings: pure `(inputs, options, group?) => Scalar`, one per file.
 */
export { ntXentLoss, ntXentMasks, NT_XENT_DEFAULTS, NT_XENT_TILED_THRESHOLD, MASKED_LOGIT, type NtXentOptions } from './nt-xent.js';
export { ntXentLossTiled, NT_XENT_DEFAULT_TILE_SIZE, type NtXentTiledOptions } from './nt-xent-tiled.js';
export {
  barlowTwinsLoss,
  barlowTwinsLossWithTerms,
  standardizeColumns,
  BARLOW_TWINS_DEFAULTS,
  type BarlowTwinsOptions,
  type BarlowTwinsTerms,
} from './barlow-twins.js';
export { byolLoss } from './byol.js';
export { vicregLoss, vicregLossWithTerms, VICREG_DEFAULTS, type VicregOptions, type VicregTerms } from './vicreg.js';
export { mocoLoss, type MocoOptions } from './moco.js';
export { mocov3Loss, type Mocov3Options } from './mocov3.js';
export { negativeCosineLoss } from './simsiam.js';
export { nnclrLoss, type NnclrOptions } from './nnclr.js';
export { supconLoss, type SupconOptions, type SupconVariant } from './supcon.js';
export { resslLoss, type ResslOptions } from './ressl.js';
export { dclLoss, type DclOptions } from './dcl.js';
export { sinkhornKnopp, SINKHORN_DEFAULTS, type SinkhornOptions } from './sinkhorn.js';
export { swavLoss, type SwavOptions } from './swav.js';
export { dinoLoss, DINO_CENTRE_MOMENTUM, type DinoOptions, type DinoResult } from './dino.js';
export { maeLoss, patchify, MAE_NORM_PIX_EPS, type MaeOptions } from './mae.js';
export { wmseLoss, whitenSubBatches, type WmseOptions } from './wmse.js';
export { vibcregLoss, VIBCREG_DEFAULTS, type VibcregOptions } from './vibcreg.js';
export { deepClusterV2Loss, type DeepClusterV2Options } from './deepclusterv2.js';
export { sphericalKMeans, type KMeansResult } from './kmeans.js';
export { all4oneCentroidLoss, all4oneFeatureLoss } from './all4one.js';
export { l2NormalizeRows, rowCosine } from './ops.js';
export { batchLayout, gatherConstantRows, gatherRows, reduceValuesOverRanks, sumOverRanks, sumValuesOverRanksExact, type BatchLayout } from './global-batch.js';
export { fastSiamLoss } from './fastsiam.js';
export { ticoLoss, TICO_DEFAULTS, type TicoOptions, type TicoResult } from './tico.js';
export { mmcrLoss, type MmcrOptions } from './mmcr.js';
export { simdinoLoss, SIMDINO_EPS, type SimDinoOptions, type SimDinoResult } from './simdino.js';
export { lejepaLoss, LEJEPA_DEFAULTS, type LejepaOptions, type LejepaResult } from './lejepa.js';
export { ijepaLoss, IJEPA_TARGET_LAYER_NORM_EPS, type IjepaDistance, type IjepaLossOptions } from './ijepa.js';
export { msnLoss, MSN_DEFAULTS, type MsnOptions, type MsnResult } from './msn.js';
export { vicreglLoss, VICREGL_DEFAULTS, type VicreglOptions, type VicreglResult } from './vicregl.js';
export { ibotLoss, maskedRows, type IbotOptions, type IbotResult } from './ibot.js';
export { koleoLoss, KOLEO_EPS } from './koleo.js';
export { dinov2Loss, DINOV2_DEFAULTS, type Dinov2Options, type Dinov2Result } from './dinov2.js';
