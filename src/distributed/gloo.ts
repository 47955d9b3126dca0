/**
 * The Gloo-backed {@link ProcessGroup}: real processes exchanging Float32Arrays over Gloo's
 * TCP transport, through the Node-API addon in `native/gloo` (built from `libgloo-dev`).
 *
 * Rendezvous (how the ranks find each other), given as a URL:
 * - `file:///abs/dir`            a directory shared by all ranks (one host, or a shared FS);
 *                                use a fresh directory per run.
 * - `tcp://host:port`            rank 0 serves a small key-value store on `port` (every
 *                                interface); the others connect to `host:port`.
 * - `env://`                     as `tcp://$MASTER_ADDR:$MASTER_PORT`.
 * - `redis://host:port[/prefix]` a Redis server; keys live under `prefix` (default
 *                                `ssl-zoo`), so use a new prefix or an empty database per run.
 *
 * The transport binds to `iface` (or `$GLOO_SOCKET_IFNAME`) when given, else to `hostname`,
 * else to 127.0.0.1 when the rendezvous is a file or a loopback host, else to the local
 * address of the route to the rendezvous host (the address the other hosts reach this one
 * by when they share a network with rank 0), else, if that cannot be found, to this
 * machine's host name (PyTorch's default). The host name alone is not enough: it often
 * resolves to 127.0.x.1 (Debian's /etc/hosts) or, inside a network namespace or container,
 * to an address of another network.
 */
import { createSocket } from 'node:dgram';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { hostname as osHostname } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { invalidValue, TrainingFailure, UserError } from '../core/errors.js';
import { packageRoot } from '../core/package-root.js';
import { recordJobSize, type ProcessGroup, SingleProcessGroup } from '../core/process-group.js';

/** Default per-collective timeout: a dead or stuck peer becomes an error after this long. */
export const DEFAULT_TIMEOUT_MS = 300_000;
/** Lower bound of the default rendezvous timeout (ranks may start seconds apart). */
export const MIN_DEFAULT_CONNECT_TIMEOUT_MS = 60_000;
/** Where the addon lands after `npm run build:native`, relative to the package root. */
export const GLOO_ADDON_RELATIVE_PATH = 'native/gloo/build/Release/ssl_zoo_gloo.node';
/** Environment variable that overrides the addon path (tests, unusual installs). */
export const GLOO_ADDON_ENV = 'SSL_ZOO_GLOO_ADDON';

/** Options of {@link createProcessGroup}. */
export interface ProcessGroupOptions {
  /** This process's rank, an integer in [0, worldSize). */
  rank: number;
  /** Number of processes, an integer >= 1. */
  worldSize: number;
  /**
   * Where the ranks meet: `file:///abs/dir`, `tcp://host:port`, `env://` or
   * `redis://host:port[/prefix]` (see the module comment). Ignored when worldSize is 1.
   */
  rendezvous: string;
  /** Per-collective timeout in ms (default {@link DEFAULT_TIMEOUT_MS}). */
  timeoutMs?: number;
  /** Rendezvous timeout in ms (default max(timeoutMs, {@link MIN_DEFAULT_CONNECT_TIMEOUT_MS})). */
  connectTimeoutMs?: number;
  /** Network interface for the transport (default `$GLOO_SOCKET_IFNAME`). */
  iface?: string;
  /** Address or host name the transport binds to (used when no interface is given). */
  hostname?: string;
}

/** A parsed rendezvous URL. */
export type RendezvousSpec =
  { store: 'file'; path: string } | { store: 'tcp'; host: string; port: number } | { store: 'redis'; host: string; port: number; prefix: string };

/** Options the addon's `connect` takes. */
export interface NativeConnectOptions {
  rank: number;
  size: number;
  store: 'file' | 'tcp' | 'redis';
  path?: string;
  host?: string;
  port?: number;
  prefix?: string;
  hostname?: string;
  iface?: string;
  timeoutMs: number;
  connectTimeoutMs: number;
}

/** One connected group, as the addon exposes it. All calls block; errors are thrown. */
export interface NativeGlooContext {
  readonly rank: number;
  readonly size: number;
  allreduce(data: Float32Array, op: 'sum' | 'avg' | 'max'): void;
  allgather(input: Float32Array, output: Float32Array): void;
  reduceScatter(input: Float32Array, output: Float32Array): void;
  broadcast(data: Float32Array, root: number): void;
  barrier(): void;
  close(): void;
}

/** The addon module `ssl_zoo_gloo.node`. */
export interface GlooAddon {
  connect(options: NativeConnectOptions): Promise<NativeGlooContext>;
  readonly glooVersion: string;
  readonly hasRedis: boolean;
}

const require = createRequire(import.meta.url);
let cachedAddon: GlooAddon | undefined;

/** The path the addon is loaded from: `$SSL_ZOO_GLOO_ADDON`, else the built one. */
export function glooAddonPath(): string {
  return process.env[GLOO_ADDON_ENV] || join(packageRoot(), GLOO_ADDON_RELATIVE_PATH);
}

/**
 * Loads the Gloo addon once. Throws a {@link UserError} that says how to install it when it
 * is not built or cannot be loaded (e.g. libgloo missing at run time).
 */
export function loadGlooAddon(): GlooAddon {
  if (cachedAddon) return cachedAddon;
  const path = glooAddonPath();
  const howTo =
    'Install Gloo and build the addon: `sudo apt-get install libgloo-dev` (Debian/Ubuntu), ' + 'then `npm run build:native` in the ssl-zoo package directory.';
  if (!existsSync(path)) {
    throw new UserError(`multi-process training needs the Gloo addon, which is not built (${path} is missing). ${howTo}`);
  }
  try {
    cachedAddon = require(path) as GlooAddon;
  } catch (err) {
    throw new UserError(
      `multi-process training needs the Gloo addon, which failed to load from ${path}: ` + `${(err as Error).message.split('\n')[0]}. ${howTo}`,
    );
  }
  return cachedAddon;
}

/** Whether the Gloo addon is built and loads (without throwing). */
export function isGlooAvailable(): boolean {
  try {
    loadGlooAddon();
    return true;
  } catch {
    return false;
  }
}

function parsePort(field: string, value: string, url: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) {
    throw invalidValue(field, url, 'a port number in 1..65535');
  }
  return port;
}

/**
 * Parses a rendezvous URL (`file:///abs/dir`, `tcp://host:port`, `env://`,
 * `redis://host:port[/prefix]`). `env://` reads MASTER_ADDR and MASTER_PORT from `env`.
 * Throws a {@link UserError} naming the field on anything else.
 */
export function parseRendezvous(url: string, env: NodeJS.ProcessEnv = process.env): RendezvousSpec {
  const allowed = "'file:///absolute/dir', 'tcp://host:port', 'env://' (MASTER_ADDR, MASTER_PORT) or 'redis://host:port[/prefix]'";
  if (typeof url !== 'string') throw invalidValue('rendezvous', url, allowed);
  if (url === 'env://') {
    const host = env.MASTER_ADDR;
    const port = env.MASTER_PORT;
    if (!host) throw new UserError('rendezvous env:// needs MASTER_ADDR (the address of rank 0) in the environment');
    if (!port) throw new UserError('rendezvous env:// needs MASTER_PORT (a free TCP port on rank 0) in the environment');
    return { store: 'tcp', host, port: parsePort('MASTER_PORT', port, port) };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidValue('rendezvous', url, allowed);
  }
  switch (parsed.protocol) {
    case 'file:': {
      if (parsed.host !== '') throw invalidValue('rendezvous', url, `${allowed} (file URLs have no host)`);
      const path = fileURLToPath(parsed);
      if (!isAbsolute(path)) throw invalidValue('rendezvous', url, allowed);
      return { store: 'file', path };
    }
    case 'tcp:':
    case 'redis:': {
      const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
      if (!host || !parsed.port) throw invalidValue('rendezvous', url, `${allowed} (host and port are required)`);
      const port = parsePort('rendezvous', parsed.port, url);
      if (parsed.protocol === 'tcp:') return { store: 'tcp', host, port };
      const prefix = decodeURIComponent(parsed.pathname.replace(/^\/+/, '')) || 'ssl-zoo';
      return { store: 'redis', host, port, prefix };
    }
    default:
      throw invalidValue('rendezvous', url, allowed);
  }
}

/** The rendezvous URLs `--rendezvous` takes, for messages. */
export const RENDEZVOUS_FORMS = 'file:///shared/dir, tcp://host:port, redis://host:port[/prefix] or env:// (MASTER_ADDR, MASTER_PORT)';

/**
 * Checks a `--rendezvous` flag value (whatever the number of devices): an unknown scheme
 * or a malformed URL is a {@link UserError} naming the flag, the value and the accepted
 * forms. `env://` is resolved later, by each worker, from MASTER_ADDR and MASTER_PORT.
 */
export function checkRendezvousFlag(url: string): void {
  if (url === 'env://') return;
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url)?.[1]?.toLowerCase();
  if (!scheme || !['file', 'tcp', 'redis'].includes(scheme)) throw invalidValue('--rendezvous', url, RENDEZVOUS_FORMS);
  try {
    parseRendezvous(url, {});
  } catch (err) {
    if (err instanceof UserError) throw new UserError(err.message.replace(/^rendezvous:/, '--rendezvous:'));
    throw err;
  }
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/**
 * The local address the kernel's routing table picks to reach `host:port` (the source address
 * of a connected UDP socket: no packet is sent), or undefined when `host` does not resolve or
 * is unreachable. On rank 0's host, whose own address is the rendezvous host, this is that
 * address.
 */
export function routeSourceAddress(host: string, port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const done = (address: string | undefined) => {
      try {
        socket.close();
      } catch {
        // already closed
      }
      resolve(address);
    };
    socket.on('error', () => done(undefined));
    try {
      socket.connect(port, host, (err?: Error) => {
        if (err) return done(undefined);
        try {
          done(socket.address().address);
        } catch {
          done(undefined);
        }
      });
    } catch {
      done(undefined);
    }
  });
}

/**
 * The address the Gloo transport binds to when neither an interface nor a host name is given
 * (see the module comment).
 */
export async function defaultTransportHostname(spec: RendezvousSpec): Promise<string> {
  if (spec.store === 'file' || isLoopback(spec.host)) return '127.0.0.1';
  const routed = await routeSourceAddress(spec.host, spec.port);
  return routed && routed !== '0.0.0.0' && routed !== '::' ? routed : osHostname();
}

function checkInteger(field: string, value: unknown, min: number, max: number, allowed: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidValue(field, value, allowed);
  }
  return value;
}

/** A {@link ProcessGroup} over Gloo; made by {@link createProcessGroup}. */
export class GlooProcessGroup implements ProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  /** Per-collective timeout in ms. */
  readonly timeoutMs: number;
  private native: NativeGlooContext | undefined;

  /** Wraps a connected addon context (use {@link createProcessGroup}). */
  constructor(native: NativeGlooContext, timeoutMs: number) {
    this.native = native;
    this.rank = native.rank;
    this.worldSize = native.size;
    this.timeoutMs = timeoutMs;
    recordJobSize(this.worldSize);
  }

  private ctx(op: string): NativeGlooContext {
    if (!this.native) throw new Error(`ssl-zoo gloo: ${op} on rank ${this.rank}: the process group is closed`);
    return this.native;
  }

  /** Element-wise sum / mean / max over ranks of `data` (same length on every rank), in place. */
  allReduce(data: Float32Array, op: 'sum' | 'avg' | 'max' = 'sum'): void {
    this.ctx('allReduce').allreduce(data, op);
  }

  /** [W·n] concatenation of every rank's `data` ([n], same n on every rank), ordered by rank. */
  allGather(data: Float32Array): Float32Array {
    const out = new Float32Array(data.length * this.worldSize);
    this.ctx('allGather').allgather(data, out);
    return out;
  }

  /** Sum over ranks of `data` ([W·n]), then this rank's slice [rank·n, (rank+1)·n) as [n]. */
  reduceScatter(data: Float32Array): Float32Array {
    if (data.length % this.worldSize !== 0) {
      throw new RangeError(`ssl-zoo gloo: reduceScatter: data length ${data.length} is not a multiple of the world size ${this.worldSize}`);
    }
    const out = new Float32Array(data.length / this.worldSize);
    this.ctx('reduceScatter').reduceScatter(data, out);
    return out;
  }

  /** Copies rank `root`'s `data` into every rank's `data` (same length everywhere), in place. */
  broadcast(data: Float32Array, root = 0): void {
    if (!Number.isInteger(root) || root < 0 || root >= this.worldSize) {
      throw new RangeError(`ssl-zoo gloo: broadcast: root ${root} is not a rank in [0, ${this.worldSize})`);
    }
    this.ctx('broadcast').broadcast(data, root);
  }

  /** Returns when every rank has called it (or throws after the timeout). */
  barrier(): void {
    this.ctx('barrier').barrier();
  }

  /** Closes the connections; further collectives throw. Idempotent. */
  close(): void {
    if (this.native) recordJobSize(1);
    this.native?.close();
    this.native = undefined;
  }
}

/** How the addon's message begins when the ranks did not all connect in time. */
const RENDEZVOUS_FAILED = 'ssl-zoo gloo: rendezvous failed';

/**
 * Joins (or, with worldSize 1, fakes) a process group. Every rank calls it with the same
 * `worldSize` and `rendezvous` and its own `rank`; it resolves once all ranks are connected.
 * World size 1 gives a {@link SingleProcessGroup} and never loads the addon.
 *
 * Throws a {@link UserError} for bad options or when the addon is missing; rejects with a
 * {@link TrainingFailure} (one line) naming the rank and the rendezvous when the others do not
 * show up in time.
 */
export async function createProcessGroup(options: ProcessGroupOptions): Promise<ProcessGroup> {
  const worldSize = checkInteger('worldSize', options.worldSize, 1, 65536, 'an integer >= 1');
  const rank = checkInteger('rank', options.rank, 0, worldSize - 1, `an integer in [0, ${worldSize - 1}]`);
  const timeoutMs = checkInteger('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS, 1, 2 ** 31 - 1, 'a positive number of milliseconds');
  const connectTimeoutMs = checkInteger(
    'connectTimeoutMs',
    options.connectTimeoutMs ?? Math.max(timeoutMs, MIN_DEFAULT_CONNECT_TIMEOUT_MS),
    1,
    2 ** 31 - 1,
    'a positive number of milliseconds',
  );
  if (worldSize === 1) return new SingleProcessGroup();

  const spec = parseRendezvous(options.rendezvous);
  const addon = loadGlooAddon();
  if (spec.store === 'redis' && !addon.hasRedis) {
    throw new UserError(`rendezvous ${JSON.stringify(options.rendezvous)}: this Gloo build has no Redis support; use file:// or tcp://`);
  }
  if (spec.store === 'file') {
    try {
      mkdirSync(spec.path, { recursive: true });
    } catch (err) {
      throw new UserError(`rendezvous directory ${spec.path} cannot be created: ${(err as Error).message}`);
    }
  }
  const iface = options.iface ?? (process.env.GLOO_SOCKET_IFNAME || undefined);
  const hostname = iface ? undefined : (options.hostname ?? (await defaultTransportHostname(spec)));
  let native: Awaited<ReturnType<typeof addon.connect>>;
  try {
    native = await addon.connect({ rank, size: worldSize, ...spec, ...(iface ? { iface } : { hostname }), timeoutMs, connectTimeoutMs });
  } catch (err) {
    const message = (err as Error).message ?? String(err);
    if (!message.startsWith(RENDEZVOUS_FAILED)) throw err;
    // The other ranks did not come (not started, another rendezvous or world size, a firewall): the environment, not a bug.
    throw new TrainingFailure(`${message.slice('ssl-zoo gloo: '.length)}; check that every rank started with the same rendezvous and world size`);
  }
  return new GlooProcessGroup(native, timeoutMs);
}
