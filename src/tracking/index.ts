/**
 * Weights & Biases tracking for the trainer: the run's W&B identity and `wandb.json`
 * (identity.ts), the uploader that runs the SDK in a worker thread (uploader.ts,
 * uploader-worker.ts) and the trainer's logger (logger.ts). It builds on src/trainer (the
 * Logger interface, the run directory); the trainer knows nothing about it.
 */
export * from './identity.js';
export { summarizeHistory, WandbUploader, type UploaderOptions, type UploadOutcome, type WandbRunStart } from './uploader.js';
export * from './logger.js';
