/**
 * The Gloo process group with real processes on loopback: every collective for W = 2, 3, 4
 * with different data per rank, the file, tcp and Redis rendezvous, dead and stalled ranks,
 * option checking and the missing-addon message.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TrainingFailure, UserError } from '../../src/core/errors.js';
import { createProcessGroup, defaultTransportHostname, GLOO_ADDON_ENV, loadGlooAddon, parseRendezvous } from '../../src/distributed/gloo.js';
import { type ProcessGroup, SingleProcessGroup } from '../../src/core/process-group.js';
import { expectAllOk, freePort, freshDir, relativeError, runProcess, runRanks } from './helpers.js';
import { readF32, seededFloats, writeF32 } from './io.js';

/** Input lengths per collective (W-dependent ones are per-rank chunk lengths). */
const LENGTHS = { sum: 37, avg: 37, max: 37, big: 300_001, empty: 0, gather: 5, bcast: 11, bcast0: 11 };
const RS_CHUNK = 7;
const RSBIG_CHUNK = 70_001;

function writeInputs(dir: string, worldSize: number): Record<string, Float32Array[]> {
  const names = { ...LENGTHS, rs: RS_CHUNK * worldSize, rsbig: RSBIG_CHUNK * worldSize };
  const inputs: Record<string, Float32Array[]> = {};
  let seed = 1;
  for (const [name, length] of Object.entries(names)) {
    inputs[name] = [];
    for (let r = 0; r < worldSize; r++) {
      const data = seededFloats(1000 * seed + r, length).map((v) => v * (r + 1) + r);
      inputs[name]!.push(data);
      writeF32(join(dir, `in-${r}-${name}.bin`), data);
    }
    seed++;
  }
  return inputs;
}

function elementwise(arrays: Float32Array[], f: (values: number[]) => number): Float64Array {
  const out = new Float64Array(arrays[0]!.length);
  for (let i = 0; i < out.length; i++) out[i] = f(arrays.map((a) => a[i]!));
  return out;
}

const sum = (v: number[]) => v.reduce((a, b) => a + b, 0);

/** Checks every rank's outputs against results computed here from all inputs. */
function checkOutputs(dir: string, inputs: Record<string, Float32Array[]>, worldSize: number): void {
  const W = worldSize;
  const expectedSum = (name: string) => elementwise(inputs[name]!, sum);
  for (let r = 0; r < W; r++) {
    const out = (name: string) => readF32(join(dir, `out-${r}-${name}.bin`));
    const where = (name: string) => `rank ${r} of ${W}, ${name}`;
    assert.ok(relativeError(out('sum'), expectedSum('sum')) < 1e-6, where('allReduce sum'));
    assert.ok(relativeError(out('big'), expectedSum('big')) < 1e-6, where('allReduce sum (300001)'));
    assert.ok(
      relativeError(
        out('avg'),
        elementwise(inputs.avg!, (v) => sum(v) / W),
      ) < 1e-6,
      where('allReduce avg'),
    );
    assert.deepEqual(Array.from(out('max')), Array.from(elementwise(inputs.max!, (v) => Math.max(...v))), where('max'));
    assert.equal(out('empty').length, 0, where('empty'));
    const gathered = new Float32Array(W * LENGTHS.gather);
    inputs.gather!.forEach((a, q) => gathered.set(a, q * LENGTHS.gather));
    assert.deepEqual(Array.from(out('gather')), Array.from(gathered), where('allGather'));
    for (const [name, chunk] of [
      ['rs', RS_CHUNK],
      ['rsbig', RSBIG_CHUNK],
    ] as const) {
      const slice = expectedSum(name).slice(r * chunk, (r + 1) * chunk);
      assert.equal(out(name).length, chunk, where(name));
      assert.ok(relativeError(out(name), slice) < 1e-6, where(`reduceScatter ${name}`));
    }
    assert.deepEqual(Array.from(out('bcast')), Array.from(inputs.bcast![W - 1]!), where('broadcast root W-1'));
    assert.deepEqual(Array.from(out('bcast0')), Array.from(inputs.bcast0![0]!), where('broadcast root 0'));
  }
}

async function runCollectives(worldSize: number, rendezvous: (dir: string) => string): Promise<void> {
  const dir = freshDir(`gloo-w${worldSize}`);
  try {
    const inputs = writeInputs(dir, worldSize);
    const outcomes = await runRanks('collectives', {
      dir,
      worldSize,
      rendezvous: rendezvous(dir),
      timeoutMs: 20_000,
    });
    expectAllOk(outcomes);
    outcomes.forEach((o) => assert.deepEqual(o.result, { rank: o.rank, worldSize, kind: 'GlooProcessGroup' }));
    checkOutputs(dir, inputs, worldSize);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('distributed/gloo: GlooProcessGroup (real processes, loopback)', function () {
  this.timeout(90_000);

  before(() => {
    // Fails (rather than skips) when the addon is not built: these tests exist to run it.
    loadGlooAddon();
  });

  for (const W of [2, 3, 4]) {
    it(`every collective is right for W=${W} (file rendezvous, different data per rank)`, async () => {
      await runCollectives(W, (dir) => pathToFileURL(join(dir, 'store')).href);
    });
  }

  it('tcp:// rendezvous (rank 0 serves the store), W=3', async () => {
    const port = await freePort();
    await runCollectives(3, () => `tcp://127.0.0.1:${port}`);
  });

  it('redis:// rendezvous against a real redis-server, W=2', async () => {
    assert.ok(loadGlooAddon().hasRedis, 'this Gloo build has no Redis support');
    const port = await freePort();
    const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const killTimer = setTimeout(() => redis.kill('SIGKILL'), 80_000);
    try {
      await new Promise<void>((resolve, reject) => {
        let out = '';
        const timer = setTimeout(() => reject(new Error(`redis-server did not start within 10 s:\n${out}`)), 10_000);
        redis.on('error', (err: NodeJS.ErrnoException) => {
          clearTimeout(timer);
          reject(err.code === 'ENOENT' ? new Error('redis-server is not on PATH: install it (apt-get install redis-server); CI does') : err);
        });
        redis.on('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`redis-server exited with code ${code}:\n${out}`));
        });
        redis.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          if (out.includes('Ready to accept connections')) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
      redis.removeAllListeners('exit');
      await runCollectives(2, () => `redis://127.0.0.1:${port}/test-run`);
    } finally {
      clearTimeout(killTimer);
      redis.kill('SIGKILL');
    }
  });

  for (const mode of ['die', 'stall'] as const) {
    it(`a rank that ${mode === 'die' ? 'dies' : 'stalls'} before a collective makes the others fail within the timeout`, async () => {
      const dir = freshDir(`gloo-${mode}`);
      const timeoutMs = 2000;
      try {
        const outcomes = await runRanks(
          'failure',
          {
            dir,
            worldSize: 3,
            rendezvous: pathToFileURL(join(dir, 'store')).href,
            timeoutMs,
            victim: 2,
            mode,
            // The victim wakes after the others failed, and fails at once itself.
            stallMs: timeoutMs + 3000,
          },
          20_000,
        );
        for (const o of outcomes.slice(0, 2)) {
          const context = `rank ${o.rank}: code ${o.code}, stderr:\n${o.stderr}`;
          assert.equal(o.killed, false, `rank ${o.rank} hung until the harness killed it`);
          assert.equal(o.code, 1, context);
          assert.ok(o.error, context);
          assert.match(o.error.error, new RegExp(`ssl-zoo gloo: allreduce failed on rank ${o.rank} of 3 \\(timeout ${timeoutMs} ms\\)`));
          assert.match(o.error.error, /peer process died, stalled/);
          // Dead peer: the connection drops at once. Stalled peer: the timeout fires.
          assert.ok(o.error.elapsedMs < timeoutMs + 1500, `${context}\nerror after ${o.error.elapsedMs} ms`);
          if (mode === 'die') assert.ok(o.error.elapsedMs < 1500, `${context}\nerror after ${o.error.elapsedMs} ms`);
        }
        const victim = outcomes[2]!;
        if (mode === 'die') {
          assert.equal(victim.signal, 'SIGKILL');
        } else {
          assert.equal(victim.code, 1, victim.stderr);
          assert.match(victim.error!.error, /allreduce failed on rank 2 of 3/);
          assert.ok(victim.error!.elapsedMs < 1500, victim.stderr);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  it('rendezvous fails with a clear error when a rank never shows up', async () => {
    const dir = freshDir('gloo-alone');
    try {
      const started = Date.now();
      await assert.rejects(
        createProcessGroup({
          rank: 0,
          worldSize: 2,
          rendezvous: pathToFileURL(join(dir, 'store')).href,
          timeoutMs: 1000,
          connectTimeoutMs: 1000,
        }),
        (e: Error) =>
          e instanceof TrainingFailure &&
          /^rendezvous failed on rank 0 of 2 via file:\/\/.*connect timeout 1000 ms.*Wait timeout.*; check that every rank started with the same rendezvous and world size$/.test(
            e.message,
          ),
      );
      assert.ok(Date.now() - started < 5000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('world size 1 is a SingleProcessGroup without the addon', async () => {
    const group: ProcessGroup = await createProcessGroup({ rank: 0, worldSize: 1, rendezvous: 'ignored' });
    const data = new Float32Array([1, 2]);
    group.allReduce(data);
    assert.deepEqual(Array.from(group.allGather(data)), [1, 2]);
    assert.ok(group instanceof SingleProcessGroup);
  });

  it('bad options are UserErrors naming the field', async () => {
    const base = { rank: 0, worldSize: 2, rendezvous: 'file:///tmp/x' };
    await assert.rejects(createProcessGroup({ ...base, rank: 2 }), (e: Error) => e instanceof UserError && /^rank: 2/.test(e.message));
    await assert.rejects(createProcessGroup({ ...base, worldSize: 0 }), (e: Error) => e instanceof UserError && /^worldSize/.test(e.message));
    await assert.rejects(createProcessGroup({ ...base, timeoutMs: -5 }), (e: Error) => e instanceof UserError && /^timeoutMs/.test(e.message));
    await assert.rejects(createProcessGroup({ ...base, rendezvous: 'nfs://x' }), (e: Error) => e instanceof UserError && /^rendezvous/.test(e.message));
  });

  it('parses rendezvous URLs', () => {
    assert.deepEqual(parseRendezvous('file:///tmp/a%20b'), { store: 'file', path: '/tmp/a b' });
    assert.deepEqual(parseRendezvous('tcp://10.0.0.1:29500'), { store: 'tcp', host: '10.0.0.1', port: 29500 });
    assert.deepEqual(parseRendezvous('redis://h:6379'), { store: 'redis', host: 'h', port: 6379, prefix: 'ssl-zoo' });
    assert.deepEqual(parseRendezvous('redis://h:6379/job-7'), { store: 'redis', host: 'h', port: 6379, prefix: 'job-7' });
    assert.deepEqual(parseRendezvous('env://', { MASTER_ADDR: 'node0', MASTER_PORT: '29500' }), {
      store: 'tcp',
      host: 'node0',
      port: 29500,
    });
    assert.throws(() => parseRendezvous('env://', { MASTER_ADDR: 'node0' }), /MASTER_PORT/);
    assert.throws(() => parseRendezvous('tcp://host'), UserError);
    assert.throws(() => parseRendezvous('tcp://host:99999'), UserError);
    assert.throws(() => parseRendezvous('/tmp/dir'), UserError);
  });

  it('the transport binds to the local address of the route to the rendezvous host', async () => {
    assert.equal(await defaultTransportHostname({ store: 'file', path: '/tmp/x' }), '127.0.0.1');
    assert.equal(await defaultTransportHostname({ store: 'tcp', host: 'localhost', port: 29500 }), '127.0.0.1');
    // Rank 0's view: the rendezvous host is one of this machine's own addresses.
    const own = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal);
    if (own) assert.equal(await defaultTransportHostname({ store: 'tcp', host: own.address, port: 29500 }), own.address);
    // Unresolvable: the host name, as before.
    assert.equal(await defaultTransportHostname({ store: 'redis', host: 'no-such-host.invalid', port: 6379, prefix: 'p' }), hostname());
  });

  it('without the addon, W>1 says how to install it', async () => {
    const dir = freshDir('gloo-noaddon');
    try {
      const outcome = await runProcess(
        [
          '--input-type=module',
          '-e',
          `import { createProcessGroup } from ${JSON.stringify(new URL('../../src/distributed/gloo.js', import.meta.url).href)};
           createProcessGroup({ rank: 0, worldSize: 2, rendezvous: ${JSON.stringify(pathToFileURL(dir).href)} })
             .then(() => process.exit(0), (e) => { console.error(e.name + ': ' + e.message); process.exit(2); });`,
        ],
        { killAfterMs: 20_000, env: { [GLOO_ADDON_ENV]: join(dir, 'missing.node') } },
      );
      assert.equal(outcome.code, 2, outcome.stderr);
      assert.match(outcome.stderr, /UserError: multi-process training needs the Gloo addon, which is not built/);
      assert.match(outcome.stderr, /apt-get install libgloo-dev/);
      assert.match(outcome.stderr, /npm run build:native/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
