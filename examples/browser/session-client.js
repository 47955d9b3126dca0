/* global Worker */
/**
 * The page's side of the training run (session-host.js): the same requests whether the run
 * lives in the training worker (train-worker.js) or on the page's thread, and a mirror of the
 * run's progress (`step`, `totalSteps`, `finished`, `settings`) updated by every answer.
 */
export class SessionClient {
  /**
   * @param send answers a request `{ type, ...args }` with `{ value, summary }` or `{ error, summary }`
   * @param thread where the run lives: `'worker'` or `'page'`
   */
  constructor(send, thread) {
    this.send = send;
    this.thread = thread;
    /** The run's progress after the last answer, undefined before a run exists. */
    this.summary = undefined;
  }

  /** A client of a new training worker, once it has loaded the library; rejects where no module worker starts. */
  static inWorker() {
    const worker = new Worker(new URL('./train-worker.js', import.meta.url), { type: 'module' });
    const pending = new Map();
    let nextId = 0;
    return new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => {
        if (data.ready) {
          resolve(
            new SessionClient((request) => {
              const id = nextId++;
              return new Promise((answer) => {
                pending.set(id, answer);
                worker.postMessage({ id, ...request });
              });
            }, 'worker'),
          );
          return;
        }
        pending.get(data.id)?.(data);
        pending.delete(data.id);
      };
      worker.onerror = (event) => {
        const message = `the training worker stopped: ${event.message ?? 'no module workers here'}`;
        for (const answer of pending.values()) answer({ error: message });
        pending.clear();
        reject(new Error(message));
      };
    });
  }

  /** A client of a host on the page's own thread (`createSessionHost()` of session-host.js). */
  static onPage(host) {
    return new SessionClient((request) => host.handle(request), 'page');
  }

  /** Sends a request; resolves with its value, or rejects with the host's one-line message. */
  async request(type, args = {}) {
    const answer = await this.send({ type, ...args });
    if ('summary' in answer) this.summary = answer.summary;
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer.value;
  }

  get step() {
    return this.summary?.step ?? 0;
  }

  get totalSteps() {
    return this.summary?.totalSteps;
  }

  get finished() {
    return Boolean(this.summary?.finished);
  }

  get settings() {
    return this.summary?.settings;
  }

  /** Starts tfjs's engine `name` where the run lives; the backend in use. */
  engine(name) {
    return this.request('engine', { name });
  }

  create(settings, images) {
    return this.request('create', { settings, images });
  }

  resume(checkpoint, images) {
    return this.request('resume', { checkpoint, images });
  }

  /** One optimizer step: its StepResult (`{ step, epoch, loss, imagesPerSecond }`). */
  trainStep() {
    return this.request('step');
  }

  checkpoint() {
    return this.request('checkpoint');
  }

  exportTfjs() {
    return this.request('exportTfjs');
  }

  features(rows) {
    return this.request('features', { rows });
  }

  linearProbe(features, labels, classes, settings) {
    return this.request('linearProbe', { features, labels, classes, settings });
  }

  nodeCommand(checkpointPath, dataDir) {
    return this.request('nodeCommand', { checkpointPath, dataDir });
  }

  memory() {
    return this.request('memory');
  }

  dispose() {
    return this.request('dispose');
  }
}
