/**
 * The worker thread of the uploader (`WandbUploader`): runs the W&B SDK (0.5.1, pinned) for one
 * run, from the messages of the uploader (the protocol is in uploader.ts).
 *
 * The SDK needs three workarounds, all applied here only: its request retry re-awaits the
 * same failed promise instead of re-sending (and can wait for minutes), its file_stream
 * sender ignores HTTP error statuses (history is lost silently), and `wandb.init`
 * forwards neither group nor tags to the server. The worker replaces the two transport
 * methods with bounded retries that re-send and report failures, and adds group, tags
 * and job type to the run's `upsertBucket` call.
 */
import { format } from 'node:util';
import { parentPort, workerData } from 'node:worker_threads';
import type { FromWorker, ToWorker, WorkerInput } from './uploader.js';

/** One HTTP request to W&B may take this long before it counts as failed. */
const REQUEST_TIMEOUT_MS = 30_000;

/** The SDK objects the worker patches (their runtime shape in @wandb/sdk 0.5.1). */
interface SdkInternalApi {
  defaultEntity: string;
  client: { request(options: { document: string; variables: unknown; signal?: AbortSignal }): Promise<unknown> };
}
interface SdkFileStream {
  settings: { baseUrl: string; apiKey?: string };
  runPath: string;
}
interface SdkDocument {
  toString(): string;
}
interface SdkInternalApiClass {
  new (host: string, key?: string, entity?: string): { upsertRun(vars: Record<string, unknown>): Promise<unknown> };
  prototype: unknown;
}

/** An HTTP status worth retrying (or none: a network error or timeout). */
function transient(status: number | undefined): boolean {
  return status === undefined || status === 408 || status === 429 || status >= 500;
}

function describeError(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as Error & { cause?: unknown }).cause;
    const status = (e as { response?: { status?: number } }).response?.status;
    const base = status ? `HTTP ${status}` : e.message.split('\n')[0].slice(0, 200);
    return cause instanceof Error ? `${base} (${cause.message})` : base;
  }
  return String(e).slice(0, 200);
}

/** Wraps config values the way W&B stores them: `{ key: { value, desc } }`. */
function wandbConfig(config: Record<string, unknown>): Record<string, { value: unknown; desc: null }> {
  return Object.fromEntries(
    Object.entries(config)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, { value: v, desc: null }]),
  );
}

async function workerMain(input: WorkerInput): Promise<void> {
  const port = parentPort;
  if (!port) return;
  const problems: string[] = [];
  let failInit: ((e: Error) => void) | undefined;
  const report = (message: string): void => {
    if (problems.includes(message)) return;
    problems.push(message);
    port.postMessage({ type: 'problem', message } satisfies FromWorker);
    failInit?.(new Error(message));
  };
  // The SDK prints progress and errors on the console; errors become problems, the rest is dropped.
  console.log = console.info = console.debug = console.warn = () => undefined;
  console.error = (...args: unknown[]) =>
    report(
      format(...args)
        .split('\n')[0]
        .slice(0, 300),
    );
  // An SDK listener throws on a failed run instead of rejecting; keep it from ending the worker.
  process.on('uncaughtException', (e) => report(describeError(e)));
  process.on('unhandledRejection', (e) => report(describeError(e)));

  const inbox: ToWorker[] = [];
  let wake: (() => void) | undefined;
  port.on('message', (m: ToWorker) => {
    inbox.push(m);
    wake?.();
  });
  const next = async (): Promise<ToWorker> => {
    while (inbox.length === 0) await new Promise<void>((resolve) => (wake = resolve));
    return inbox.shift() as ToWorker;
  };

  const retrying = async <T>(what: string, attempt: () => Promise<T>, status: (e: unknown) => number | undefined): Promise<T | null> => {
    const delays = input.retryDelaysMs;
    for (let i = 0; ; i++) {
      try {
        return await attempt();
      } catch (e) {
        if (i >= delays.length || !transient(status(e))) {
          report(`${what} failed: ${describeError(e)}`);
          return null;
        }
        await new Promise((resolve) => setTimeout(resolve, delays[i]));
      }
    }
  };

  const { default: wandb } = await import('@wandb/sdk');
  // The SDK's internal modules (not in its exports map), the very instances its entry point loads.
  const sdkRoot = import.meta.resolve('@wandb/sdk');
  const { InternalApi } = (await import(new URL('./dist/internal/api.js', sdkRoot).href)) as { InternalApi: SdkInternalApiClass };
  const { FileStream } = (await import(new URL('./dist/internal/filestream.js', sdkRoot).href)) as { FileStream: { prototype: unknown } };
  const { start } = input;
  const apiProto = InternalApi.prototype as {
    execute(this: SdkInternalApi, query: SdkDocument, vars: Record<string, unknown>): Promise<unknown>;
    upsertRun(this: SdkInternalApi, vars: Record<string, unknown>): Promise<unknown>;
  };
  apiProto.execute = function (query, vars) {
    if (vars.entity === '') vars.entity = this.defaultEntity;
    const operation = /(query|mutation)\s+(\w+)/.exec(query.toString())?.[2] ?? 'GraphQL request';
    return retrying(
      `W&B ${operation}`,
      () => this.client.request({ document: query.toString(), variables: vars, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }),
      (e) => (e as { response?: { status?: number } }).response?.status,
    );
  };
  const upsertRun = apiProto.upsertRun;
  apiProto.upsertRun = function (vars) {
    // wandb.init drops these; W&B sets them through the same upsertBucket mutation.
    // (In place: the SDK reads the entity that execute() fills in back from this object.)
    if (vars.name === start.id) Object.assign(vars, { groupName: start.group, tags: start.tags, jobType: start.jobType });
    return upsertRun.call(this, vars);
  };
  (FileStream.prototype as unknown as { send(this: SdkFileStream, data: unknown): Promise<unknown> }).send = function (data) {
    const body = JSON.stringify(data);
    return retrying(
      'W&B file_stream upload',
      async () => {
        const res = await fetch(this.settings.baseUrl + this.runPath, {
          method: 'POST',
          body,
          headers: {
            'Content-Type': 'application/json',
            Authorization: `Basic ${Buffer.from(`api:${this.settings.apiKey ?? ''}`).toString('base64')}`,
          },
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        await res.arrayBuffer();
        if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status}`), { response: { status: res.status } });
        return res;
      },
      (e) => (e as { response?: { status?: number } }).response?.status,
    );
  };

  type SdkRun = Awaited<ReturnType<typeof wandb.init>>;
  let run: SdkRun | undefined;
  try {
    if (problems.length > 0) throw new Error(problems[0]);
    const failed = new Promise<never>((_, reject) => (failInit = reject));
    run = await Promise.race([
      wandb.init({
        id: start.id,
        project: start.project,
        entity: start.entity,
        name: start.name,
        config: wandbConfig(start.config),
        settings: { ...input.settings, offline: false, silent: true },
      }),
      failed,
    ]);
    failInit = undefined;
    port.postMessage({ type: 'started', entity: run.entity, url: run.url() } satisfies FromWorker);
  } catch (e) {
    failInit = undefined;
    report(`cannot start the run: ${describeError(e)}`);
    run = undefined;
  }

  for (;;) {
    const message = await next();
    if (message.type === 'log') {
      run?.log({ ...message.row }, message.step);
      continue;
    }
    if (run) {
      try {
        await run.finish(message.exitCode);
        // The summary goes last, so the file stream's running summary does not replace it.
        const api = new InternalApi(input.settings.baseUrl, input.settings.apiKey, run.entity);
        const done = await api.upsertRun({ name: start.id, project: start.project, entity: run.entity, summaryMetrics: JSON.stringify(message.summary) });
        if (!done) report('W&B summary upload failed');
      } catch (e) {
        report(`cannot finish the run: ${describeError(e)}`);
      }
    }
    port.postMessage({ type: 'finished', ok: run !== undefined && problems.length === 0, problems } satisfies FromWorker);
    return;
  }
}

void workerMain(workerData as WorkerInput);
