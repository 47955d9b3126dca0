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
export { l2NormalizeRows, rowCosine } from './ops.js';
export { batchLayout, gatherRows, sumOverRanks, type BatchLayout } from './global-batch.js';
