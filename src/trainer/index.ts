export * from './interfaces.js';
export * from './strategy.js';
export * from './loggers.js';
export * from './callbacks.js';
export * from './checkpoint.js';
export * from './trainer.js';
export * from './wandb-logger.js';
