export * from './args.js';
export * from './base.js';
export { mlpHead, type MlpHeadOptions } from './heads.js';
export * from './queue.js';
export * from './momentum.js';
export * from './simclr.js';
export * from './barlow-twins.js';
export * from './byol.js';
export * from './registry.js';
