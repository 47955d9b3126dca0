export * from './interfaces.js';
export * from './strategy.js';
export * from './loggers.js';
export * from './callbacks.js';
export * from './checkpoint.js';
export * from './trainer.js';
export { historyRows, parseMetricsJsonl, type HistoryRow, type MetricsRecord } from './run-dir.js';
