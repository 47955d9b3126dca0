/**
 * Real multi-host data parallelism on one machine: two "hosts" are two Linux network
 * namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24; the traffic never leaves
 * this machine), each running `ssl-train --num-nodes 2 --node-rank i --devices 2` through
 * `ip netns exec`, with a `tcp://` rendezvous on the first host's address. The ranks of the
 * second host reach the first only over the veth pair, so this checks the rendezvous and the
 * choice of the transport's address (src/distributed/gloo.ts) as on separate machines.
 *
 * Needs root and `ip` (iproute2, installed by scripts/setup.sh). Without the permission to
 * create namespaces the tests are skipped with a message saying so; any other setup failure
 * fails them. The namespaces (named after this process's pid) are always deleted afterwards.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { CLI, runCli, SMALL_PROJECTOR, tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';
import { SMALL_RUN } from './helpers.js';

const ID = `sslz${process.pid}`;
/** The two hosts: namespace, veth end inside it, its address. */
const HOSTS = [
  { ns: `${ID}a`, dev: `${ID}x`, addr: '10.77.0.1' },
  { ns: `${ID}b`, dev: `${ID}y`, addr: '10.77.0.2' },
] as const;
const PORT = 29500;
const RENDEZVOUS = `tcp://${HOSTS[0].addr}:${PORT}`;
/** Per-collective timeout of the ranks (s), and the hard limit of one node's process (ms). */
const RANK_TIMEOUT_S = 60;
const NODE_KILL_MS = 150_000;

/** Small setup with batch norm everywhere (mlp backbone, BN heads), as tests/distributed/training.full.test.ts. */
const SMALL = [...SMALL_RUN, ...SMALL_PROJECTOR];

function ip(args: string[]): { status: number | null; stderr: string; error?: Error } {
  const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 10_000 });
  return { status: r.status, stderr: (r.stderr ?? '').trim(), error: r.error };
}

function ipOrThrow(args: string[]): void {
  const r = ip(args);
  if (r.error) throw new Error(`ip ${args.join(' ')}: ${r.error.message} (install iproute2: scripts/setup.sh)`);
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
}

/** Kills what still runs in our namespaces, then deletes them (the veth pair goes with them). */
function teardown(): void {
  for (const { ns } of HOSTS) {
    const pids = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8', timeout: 10_000 }).stdout ?? '';
    for (const pid of pids
      .split('\n')
      .map(Number)
      .filter((p) => Number.isInteger(p) && p > 0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    ip(['netns', 'del', ns]);
  }
  // An end of the pair not yet moved into its namespace is still here.
  for (const { dev } of HOSTS) ip(['link', 'del', dev]);
}

interface NodeOutcome {
  node: number;
  code: number | null;
  stdout: string;
  stderr: string;
  killed: boolean;
}

/** Runs `ssl-train args` inside host `node`'s namespace; killed after NODE_KILL_MS. */
function runNode(node: number, args: string[], env: NodeJS.ProcessEnv = {}): Promise<NodeOutcome> {
  return new Promise((resolve) => {
    const child = spawn('ip', ['netns', 'exec', HOSTS[node].ns, process.execPath, CLI, ...args], {
      env: { ...process.env, FORCE_COLOR: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let killed = false;
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const guard = setTimeout(() => {
      killed = true;
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 5000).unref();
    }, NODE_KILL_MS);
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ node, code, stdout, stderr, killed });
    });
  });
}

/** Both nodes of a 2 x 2 job with the same arguments (plus --node-rank); both must exit 0. */
async function runJob(args: string[], envFor: (node: number) => NodeJS.ProcessEnv = () => ({})): Promise<NodeOutcome[]> {
  const common = [...args, '--num-nodes', '2', '--devices', '2', '--rendezvous', RENDEZVOUS, '--timeout', String(RANK_TIMEOUT_S)];
  const outcomes = await Promise.all([0, 1].map((node) => runNode(node, [...common, '--node-rank', String(node)], envFor(node))));
  for (const o of outcomes) {
    assert.ok(!o.killed, `node ${o.node} was killed after ${NODE_KILL_MS} ms:\n${o.stdout}${o.stderr}`);
    assert.equal(o.code, 0, `node ${o.node} exited ${o.code}:\n${o.stdout}${o.stderr}`);
  }
  return outcomes;
}

describe('multi-host data parallel: 2 hosts (network namespaces) x 2 ranks over tcp://', function () {
  this.timeout(300_000);

  before(function () {
    const why = (reason: string) => {
      console.log(`      SKIPPED multi-host tests: ${reason}`);
      this.skip();
    };
    if (process.platform !== 'linux') return why('network namespaces need Linux');
    if (process.getuid?.() !== 0) return why('creating network namespaces needs root (run the tests as root)');
    const probe = ip(['netns', 'add', HOSTS[0].ns]);
    if (probe.error) throw new Error(`\`ip\` is not available (${probe.error.message}): install iproute2 (scripts/setup.sh)`);
    if (probe.status !== 0) {
      if (/operation not permitted|permission denied/i.test(probe.stderr)) {
        return why(`ip netns add is not permitted here (${probe.stderr})`);
      }
      throw new Error(`ip netns add ${HOSTS[0].ns} failed: ${probe.stderr}`);
    }
    ipOrThrow(['netns', 'add', HOSTS[1].ns]);
    ipOrThrow(['link', 'add', HOSTS[0].dev, 'type', 'veth', 'peer', 'name', HOSTS[1].dev]);
    for (const { ns, dev, addr } of HOSTS) {
      ipOrThrow(['link', 'set', dev, 'netns', ns]);
      ipOrThrow(['-n', ns, 'addr', 'add', `${addr}/24`, 'dev', dev]);
      ipOrThrow(['-n', ns, 'link', 'set', dev, 'up']);
      ipOrThrow(['-n', ns, 'link', 'set', 'lo', 'up']);
    }
  });

  after(teardown);

  it('ssl-train verify on world size 4 (2 nodes x 2 ranks) passes', async () => {
    const [node0, node1] = await runJob(['verify', ...SMALL, '--method', 'simclr', '--batch-size', '24']);
    assert.match(node0.stdout, /verify simclr: 4 rank\(s\)/);
    assert.match(node0.stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
    assert.equal(
      node0.stdout
        .trim()
        .split('\n')
        .filter((l) => /^\d+\s/.test(l)).length,
      3,
      'three steps checked',
    );
    assert.equal(node1.stdout.trim(), '', 'only global rank 0 prints');
  });

  it('a 3-step training run ends with the parameters of one process on the same global batch', async () => {
    const args = [...SMALL, '--method', 'barlow_twins', '--batch-size', '24', '--max-steps', '3', '--epochs', '2', '--warmup-epochs', '0'];
    const multiDir = join(tempDir(), 'run');
    await runJob([...args, '--run-dir', multiDir]);
    const singleDir = join(tempDir(), 'run');
    const single = runCli([...args, '--devices', '1', '--run-dir', singleDir], NODE_KILL_MS);
    assert.equal(single.status, 0, single.stderr);
    const worst = worstRelative(checkpointTensors(multiDir), checkpointTensors(singleDir));
    assert.ok(worst < 1e-5, `worst per-tensor relative difference ${worst}`);
  });

  it('GLOO_SOCKET_IFNAME binds the transport to the named interface', async () => {
    const [node0] = await runJob(
      ['verify', ...SMALL, '--method', 'byol', '--method-arg', 'predHiddenDim=32', '--batch-size', '24', '--steps', '2'],
      (node) => ({
        GLOO_SOCKET_IFNAME: HOSTS[node].dev,
      }),
    );
    assert.match(node0.stdout, /PASSED/);
  });
});
