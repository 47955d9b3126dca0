/* global self */
/**
 * The training page's Web Worker: the run (session-host.js: tfjs's engine, the training
 * session, its augmentation and the linear probe) off the page's thread. A request `{ id,
 * type, ...args }` is answered with `{ id, value, summary }` (buffers transferred) or `{ id,
 * error, summary }`; `{ ready: true }` once the library has loaded.
 */
import { createSessionHost } from './session-host.js';

const host = createSessionHost();

self.onmessage = async ({ data }) => {
  const { transfer = [], ...answer } = await host.handle(data);
  self.postMessage({ id: data.id, ...answer }, transfer);
};
self.postMessage({ ready: true });
