export * from './knn.js';
export * from './features.js';
