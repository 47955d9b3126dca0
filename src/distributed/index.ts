/** Everything multi-process: process groups (Gloo) and differentiable collectives. */
export * from '../core/process-group.js';
export * from './gloo.js';
export * from './collectives.js';
