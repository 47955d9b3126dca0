import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A run as the fake server holds it, from the SDK's upsertBucket calls and file_stream posts. */
export interface FakeRun {
  id: string;
  entity: string;
  project: string;
  displayName?: string;
  groupName?: string;
  tags?: string[];
  jobType?: string;
  /** Parsed `config` JSONString of the latest upsert that had one. */
  config?: Record<string, unknown>;
  /** Parsed `summaryMetrics` of the latest upsert that had one. */
  summaryMetrics?: Record<string, unknown>;
  /** Every upsertBucket's variables, in order. */
  upserts: Record<string, unknown>[];
  /** `wandb-history.jsonl` lines by offset, as W&B's file_stream stores them. */
  history: Array<Record<string, unknown>>;
  /** The last `wandb-summary.json` the file stream sent. */
  streamSummary?: Record<string, unknown>;
  complete: boolean;
  exitcode?: number;
}

/** What the server does with requests. */
export type FakeMode =
  | 'ok'
  /** Every request gets HTTP 500. */
  | 'error'
  /** file_stream posts get HTTP 503 (GraphQL works). */
  | 'stream-error'
  /** Requests are read but never answered (until the server closes). */
  | 'stall';

/**
 * A small stand-in for the W&B server on 127.0.0.1, implementing what `@wandb/sdk` 0.5.1
 * calls: `POST /graphql` (the `Viewer` query and the `UpsertBucket` mutation) and
 * `POST /files/<entity>/<project>/<run>/file_stream` (history lines at offsets, summary,
 * `complete`/`exitcode`). Requests must carry `Authorization: Basic base64(api:<key>)`.
 */
export class FakeWandbServer {
  readonly runs = new Map<string, FakeRun>();
  /** Every request: path and (GraphQL) operation name. */
  readonly requests: Array<{ path: string; operation?: string; status: number }> = [];
  mode: FakeMode = 'ok';
  /** Fail this many of the next file_stream posts with HTTP 503, then accept them. */
  failNextStreamPosts = 0;
  private server: Server | undefined;

  constructor(
    readonly apiKey = 'k'.repeat(40),
    readonly entity = 'test-entity',
  ) {}

  /** The base URL (WANDB_BASE_URL) once listening. */
  get url(): string {
    const address = this.server?.address() as AddressInfo | null;
    if (!address) throw new Error('fake W&B server is not listening');
    return `http://127.0.0.1:${address.port}`;
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => this.handle(req, res, Buffer.concat(chunks).toString('utf8')));
    });
    this.server.requestTimeout = 10_000;
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    return this.url;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    this.server = undefined;
  }

  /** The run with this id (throws when the server never heard of it). */
  run(id: string): FakeRun {
    const run = this.runs.get(id);
    if (!run) throw new Error(`fake W&B server has no run ${id} (runs: ${[...this.runs.keys()].join(', ') || 'none'})`);
    return run;
  }

  private reply(res: ServerResponse, status: number, body: unknown, record: { path: string; operation?: string }): void {
    this.requests.push({ ...record, status });
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: string): void {
    const path = req.url ?? '';
    const expected = `Basic ${Buffer.from(`api:${this.apiKey}`).toString('base64')}`;
    if (req.method !== 'POST') return this.reply(res, 405, { error: 'method not allowed' }, { path });
    if (req.headers.authorization !== expected) return this.reply(res, 401, { errors: [{ message: 'unauthorized' }] }, { path });
    if (this.mode === 'stall') {
      this.requests.push({ path, status: 0 });
      return;
    }
    if (this.mode === 'error') return this.reply(res, 500, { error: 'internal server error' }, { path });
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(body) as Record<string, unknown>;
    } catch {
      return this.reply(res, 400, { error: 'bad json' }, { path });
    }
    if (path === '/graphql') return this.graphql(res, json);
    const stream = /^\/files\/([^/]+)\/([^/]+)\/([^/]+)\/file_stream$/.exec(path);
    if (stream) {
      if (this.mode === 'stream-error' || this.failNextStreamPosts > 0) {
        this.failNextStreamPosts = Math.max(0, this.failNextStreamPosts - 1);
        return this.reply(res, 503, { error: 'unavailable' }, { path });
      }
      return this.fileStream(res, path, stream[1], stream[2], stream[3], json);
    }
    return this.reply(res, 404, { error: 'not found' }, { path });
  }

  private graphql(res: ServerResponse, json: Record<string, unknown>): void {
    const operation = String(json.operationName ?? /(query|mutation)\s+(\w+)/.exec(String(json.query))?.[2] ?? '');
    const variables = (json.variables ?? {}) as Record<string, unknown>;
    const record = { path: '/graphql', operation };
    if (operation === 'Viewer') {
      return this.reply(res, 200, { data: { viewer: { id: 'viewer-1', entity: this.entity, flags: '{}', teams: { edges: [] } } } }, record);
    }
    if (operation === 'UpsertBucket') {
      const id = String(variables.name ?? '');
      const entity = String(variables.entity || this.entity);
      const project = String(variables.project || 'uncategorized');
      const run = this.runs.get(id) ?? { id, entity, project, upserts: [], history: [], complete: false };
      this.runs.set(id, run);
      run.upserts.push(variables);
      if (typeof variables.displayName === 'string') run.displayName = variables.displayName;
      if (typeof variables.groupName === 'string') run.groupName = variables.groupName;
      if (Array.isArray(variables.tags)) run.tags = variables.tags as string[];
      if (typeof variables.jobType === 'string') run.jobType = variables.jobType;
      if (typeof variables.config === 'string') run.config = JSON.parse(variables.config) as Record<string, unknown>;
      if (typeof variables.summaryMetrics === 'string') run.summaryMetrics = JSON.parse(variables.summaryMetrics) as Record<string, unknown>;
      const bucket = {
        id: `bucket-${id}`,
        name: id,
        displayName: run.displayName ?? id,
        description: null,
        config: typeof variables.config === 'string' ? variables.config : null,
        sweepName: null,
        project: { id: `project-${project}`, name: project, entity: { id: `entity-${entity}`, name: entity } },
      };
      return this.reply(res, 200, { data: { upsertBucket: { bucket, inserted: run.upserts.length === 1 } } }, record);
    }
    return this.reply(res, 400, { errors: [{ message: `unknown operation ${operation}` }] }, record);
  }

  private fileStream(res: ServerResponse, path: string, entity: string, project: string, id: string, json: Record<string, unknown>): void {
    const run = this.runs.get(id);
    const record = { path };
    if (!run || run.entity !== entity || run.project !== project) return this.reply(res, 404, { error: `no run ${entity}/${project}/${id}` }, record);
    const files = (json.files ?? {}) as Record<string, { offset?: number; content: string[] }>;
    for (const [name, chunk] of Object.entries(files)) {
      if (name === 'wandb-history.jsonl') {
        chunk.content.forEach((line, i) => (run.history[(chunk.offset ?? 0) + i] = JSON.parse(line) as Record<string, unknown>));
      } else if (name === 'wandb-summary.json') {
        run.streamSummary = JSON.parse(chunk.content[chunk.content.length - 1]) as Record<string, unknown>;
      }
    }
    if (json.complete === true) {
      run.complete = true;
      run.exitcode = Number(json.exitcode);
    }
    return this.reply(res, 200, { exitcode: null, limits: {} }, record);
  }
}
