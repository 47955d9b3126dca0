/* global Worker */
/**
 * The page's side of the augmentation worker (augment-worker.js): it keeps the worker's copy
 * of the images and of the run's view recipe current, and augments a batch there, so that the
 * page's thread is free (to paint, to answer clicks) while the views are made.
 */
export class WorkerAugmenter {
  constructor(worker) {
    this.worker = worker;
    this.pending = new Map();
    this.nextId = 0;
    /** Batches the worker has augmented (the browser test reads it). */
    this.batches = 0;
    this.images = undefined;
    this.session = undefined;
    worker.onmessage = ({ data }) => {
      const request = this.pending.get(data.id);
      if (!request) return;
      this.pending.delete(data.id);
      if (data.error) request.reject(new Error(`augmentation worker: ${data.error}`));
      else {
        this.batches++;
        request.resolve({ views: data.views, crops: data.crops });
      }
    };
  }

  /** Starts the worker (a module worker) and resolves once it has loaded. */
  static start() {
    const worker = new Worker(new URL('./augment-worker.js', import.meta.url), { type: 'module' });
    return new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => (data.ready ? resolve(new WorkerAugmenter(worker)) : undefined);
      worker.onerror = (event) => reject(new Error(`the augmentation worker did not start: ${event.message ?? 'no module workers here'}`));
    });
  }

  /** The views of dataset rows `indices` in `epoch` and their crop boxes, for `session` on `images` (a session's `ViewsMaker`). */
  augment(images, session, indices, epoch) {
    if (images !== this.images) {
      const { pixels, size, channels } = images;
      this.worker.postMessage({ type: 'images', source: { pixels, height: size, width: size, channels } });
      this.images = images;
    }
    if (session !== this.session) {
      this.worker.postMessage({ type: 'views', ...session.augmentation() });
      this.session = session;
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type: 'augment', id, indices, epoch });
    });
  }
}
