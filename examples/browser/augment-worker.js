/* global self */
/**
 * The training page's augmentation worker: the trainer's keyed augmentation (`augmentBatch`,
 * bundled alone as augment.js, no tfjs) off the page's thread. Messages: `{ type: 'images',
 * source }` (the decoded pixels), `{ type: 'views', views, seed }` (a run's view recipe), and
 * `{ type: 'augment', id, indices, epoch }`, answered with `{ id, views, crops }` (the
 * buffers transferred) or `{ id, error }`.
 */
import { augmentBatch } from './augment.js';

let source;
let recipe;

self.onmessage = ({ data }) => {
  if (data.type === 'images') source = data.source;
  else if (data.type === 'views') recipe = { views: data.views, seed: data.seed };
  else if (data.type === 'augment') {
    try {
      const { views, crops } = augmentBatch(source, recipe.views, recipe.seed, data.epoch, data.indices);
      self.postMessage(
        { id: data.id, views, crops },
        [...views, ...crops].map((v) => v.buffer),
      );
    } catch (e) {
      self.postMessage({ id: data.id, error: e instanceof Error ? e.message : String(e) });
    }
  }
};
self.postMessage({ ready: true });
