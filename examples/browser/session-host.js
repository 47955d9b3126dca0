/**
 * Where the training page's run lives: the engine, one TrainingSession (session.ts) and the
 * linear probe, answering requests `{ type, ...args }` (see HANDLERS). train-worker.js hosts it
 * in a Web Worker, so that the tfjs step, the augmentation and the probe's training never hold
 * the page's thread; with the worker box unticked the page hosts it itself.
 * session-client.js is the page's side of both.
 */
import * as zoo from './ssl-zoo.js';
import { TrainingSession } from './session.js';
import { linearProbe } from './linear-probe.js';

/** What the page mirrors of the run after every request (`SessionClient`'s getters). */
function summary(session) {
  return session ? { step: session.step, totalSteps: session.totalSteps, finished: session.finished, settings: session.settings } : undefined;
}

/** The request handlers by type: each gets the host (`{ session, backend }`) and the request; returns `{ value, transfer? }`. */
const HANDLERS = {
  /** Starts tfjs's engine `name` (auto, webgpu or cpu) once; the backend in use. */
  async engine(host, { name }) {
    host.backend ??= (await zoo.initEngine(name)).backend;
    return { value: host.backend };
  },
  /** A fresh run of `settings` on `images` (PixelImages), replacing any other. */
  create(host, { settings, images }) {
    const next = TrainingSession.create(zoo, settings, images);
    host.session?.dispose();
    host.session = next;
    return { value: undefined };
  },
  /** The run of checkpoint bytes `checkpoint` continued on `images`, replacing any other. */
  async resume(host, { checkpoint, images }) {
    const next = await TrainingSession.resume(zoo, checkpoint, images);
    host.session?.dispose();
    host.session = next;
    return { value: undefined };
  },
  /** One optimizer step (the views augmented here): its StepResult. */
  async step(host) {
    return { value: await run(host).trainStep() };
  },
  async checkpoint(host) {
    const bytes = await run(host).checkpoint();
    return { value: bytes, transfer: [bytes.buffer] };
  },
  async exportTfjs(host) {
    return { value: await run(host).exportTfjs() };
  },
  /** The backbone's eval-mode features of dataset rows `rows`: `{ values: [rows.length * dim], dim }`. */
  async features(host, { rows }) {
    const features = await run(host).features(rows);
    return { value: features, transfer: [features.values.buffer] };
  },
  /** linear-probe.ts's probe of `features` (`{ values, dim }`) with `labels` of `classes` classes. */
  async linearProbe(_host, { features, labels, classes, settings }) {
    return { value: await linearProbe(zoo, features, labels, classes, settings) };
  },
  nodeCommand(host, { checkpointPath, dataDir }) {
    return { value: run(host).nodeCommand(checkpointPath, dataDir) };
  },
  /** tfjs's memory counters here (`numBytesInGPU` on WebGPU). */
  memory() {
    return { value: zoo.tf.memory() };
  },
  dispose(host) {
    host.session?.dispose();
    host.session = undefined;
    return { value: undefined };
  },
};

function run(host) {
  if (!host.session) throw new Error('no run: pick images and press Start, or load a checkpoint');
  return host.session;
}

/**
 * A host: `handle(request)` answers `{ value, transfer, summary }` (the run's {@link summary}
 * after it) or `{ error }` (the one-line message a user reads).
 */
export function createSessionHost() {
  const host = { session: undefined, backend: undefined };
  return {
    async handle(request) {
      const handler = HANDLERS[request.type];
      try {
        if (!handler) throw new Error(`unknown request ${request.type}`);
        const { value, transfer = [] } = await handler(host, request);
        return { value, transfer, summary: summary(host.session) };
      } catch (e) {
        return { error: e instanceof Error ? e.message : String(e), summary: summary(host.session) };
      }
    },
  };
}
