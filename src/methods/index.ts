export * from './args.js';
export * from './base.js';
export { DinoHead, mlpHead, WeightNormLinear, type DinoHeadOptions, type MlpHeadOptions } from './heads.js';
export { forwardCrops } from './forward-crops.js';
export * from './queue.js';
export * from './momentum.js';
export * from './simclr.js';
export * from './barlow-twins.js';
export * from './byol.js';
export * from './mocov2plus.js';
export * from './mocov3.js';
export * from './ressl.js';
export * from './simsiam.js';
export * from './nearest-neighbour.js';
export * from './nnclr.js';
export * from './nnbyol.js';
export * from './nnsiam.js';
export * from './all4one.js';
export * from './vicreg.js';
export * from './supcon.js';
export * from './dcl.js';
export * from './wmse.js';
export * from './vibcreg.js';
export * from './cluster-memory.js';
export * from './deepclusterv2.js';
export * from './swav.js';
export * from './dino.js';
export * from './mae.js';
export { MaeDecoder, sinCosPositionEmbedding, type MaeDecoderOptions } from './mae-decoder.js';
export * from './mae-masking.js';
export * from './fastsiam.js';
export * from './tico.js';
export * from './mmcr.js';
export * from './registry.js';
export * from './simdino.js';
export * from './lejepa.js';
export * from './ijepa.js';
export {
  blockSize as ijepaBlockSize,
  checkMultiBlockOptions,
  IJEPA_MASK_STREAM,
  multiBlockMasks,
  type MultiBlockMasks,
  type MultiBlockOptions,
} from './ijepa-masking.js';
export { IjepaPredictor, type IjepaPredictorOptions } from './ijepa-predictor.js';
export * from './msn.js';
export * from './vicregl.js';
export * from './ibot.js';
export * from './dinov2.js';
export * from './masked-tokens.js';
export * from './block-masking.js';
