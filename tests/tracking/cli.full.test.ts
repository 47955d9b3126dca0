import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readWandbRunInfo } from '../../src/tracking/identity.js';
import { CLI, tempDir } from '../helpers/run.js';
import type { FakeRun } from './fake-wandb.js';
import { localHistory, TINY_FLAGS, useFakeWandb } from './helpers.js';

/**
 * Runs `ssl-train args...` in a child process with `env` (asynchronously: the fake W&B
 * server lives in this process and must keep answering), bounded by `timeoutMs`.
 */
function cli(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 240_000): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...env, FORCE_COLOR: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

function assertSameHistory(run: FakeRun, runDir: string): void {
  const rows = localHistory(runDir);
  assert.equal(run.history.length, rows.length, 'history rows');
  rows.forEach((row, i) => {
    assert.equal(run.history[i]._step, row.step);
    for (const [k, v] of Object.entries(row.values)) assert.equal(run.history[i][k], v, `step ${row.step} ${k}`);
  });
}

describe('ssl-train with W&B flags, wandb-sync and compare from the command line', function () {
  this.timeout(600_000);
  const wandb = useFakeWandb();

  it('--wandb-project streams the run (project, extra tags) while the progress output stays plain', async () => {
    const runDir = join(tempDir(), 'run');
    const { status, stdout, stderr } = await cli(
      [...TINY_FLAGS, '--run-dir', runDir, '--wandb-project', 'cli-project', '--wandb-tags', 'first, second'],
      wandb.env,
    );
    assert.equal(status, 0, stderr);
    assert.equal(stderr, '', 'nothing on stderr');
    assert.ok(!stdout.includes('\r'));
    const info = readWandbRunInfo(runDir);
    assert.equal(info?.state, 'synced');
    const run = wandb.server.run(info.id);
    assert.equal(run.project, 'cli-project');
    assert.deepEqual(run.tags, ['simclr', 'mlp', 'synthetic', 'first', 'second']);
    assert.equal((run.config as Record<string, { value: unknown }>).wandbProject.value, 'cli-project');
    assertSameHistory(run, runDir);
    assert.equal(run.exitcode, 0);
  });

  it('WANDB_MODE=offline trains without network; wandb-sync then uploads all history under WANDB_PROJECT/WANDB_ENTITY', async () => {
    const runDir = join(tempDir(), 'offline');
    const offline = { ...wandb.env, WANDB_MODE: 'offline', WANDB_PROJECT: 'env-project', WANDB_ENTITY: 'env-team' };
    const before = wandb.server.requests.length;
    const trained = await cli([...TINY_FLAGS, '--run-dir', runDir, '--logger', 'wandb'], offline);
    assert.equal(trained.status, 0, trained.stderr);
    assert.equal(wandb.server.requests.length, before, 'no request while offline');
    assert.match(trained.stderr.trim(), /^ssl-train: W&B offline run \w{8} kept in .*; upload it with: ssl-train wandb-sync /);
    const info = readWandbRunInfo(runDir);
    assert.equal(info?.state, 'offline');
    assert.equal(info.project, 'env-project');

    // The shell may still say offline: wandb-sync uploads all the same.
    const synced = await cli(['wandb-sync', runDir], offline);
    assert.equal(synced.status, 0, synced.stderr);
    assert.equal(synced.stdout.trim(), `synced ${runDir} -> ${wandb.server.url}/env-team/env-project/runs/${info.id} (8 history rows)`);
    const run = wandb.server.run(info.id);
    assert.equal(run.entity, 'env-team');
    assert.equal(run.project, 'env-project');
    assert.equal(run.groupName, 'simclr-mlp-synthetic');
    assert.deepEqual(run.tags, ['simclr', 'mlp', 'synthetic']);
    assert.equal((run.config as Record<string, { value: unknown }>).method.value, 'simclr');
    assertSameHistory(run, runDir);
    assert.equal(run.complete, true);
    assert.equal((run.summaryMetrics as Record<string, unknown>).status, undefined);
    assert.equal(typeof (run.summaryMetrics as Record<string, unknown>)['val/knn_acc1'], 'number');
    assert.equal(readWandbRunInfo(runDir)?.state, 'synced');
  });

  it('compare RUN_DIR... --out DIR prints the report and its PNG charts', async () => {
    const dirs = [join(tempDir(), 'a'), join(tempDir(), 'b')];
    for (const [i, runDir] of dirs.entries()) {
      const trained = await cli([...TINY_FLAGS, '--run-dir', runDir, '--epochs', '1', '--seed', String(i)], wandb.env);
      assert.equal(trained.status, 0, trained.stderr);
    }
    const out = join(tempDir(), 'report');
    const { status, stdout, stderr } = await cli(['compare', ...dirs, '--out', out, '--no-embeddings', '--title', 'two seeds'], wandb.env);
    assert.equal(status, 0, stderr);
    assert.deepEqual(
      stdout.trim().split('\n'),
      ['report.html', 'loss.png', 'knn-accuracy.png', 'linear-accuracy.png', 'throughput.png'].map((f) => join(out, f)),
    );
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    assert.match(html, /<title>two seeds<\/title>/);
    assert.match(html, /<h2>Settings that differ<\/h2>[\s\S]*<code>seed<\/code>/, 'the seed is what differs');
  });

  it('with --devices 2 only rank 0 creates the W&B run', async () => {
    const runDir = join(tempDir(), 'ddp');
    const { status, stderr } = await cli([...TINY_FLAGS, '--run-dir', runDir, '--devices', '2', '--wandb-project', 'ddp-project'], wandb.env);
    assert.equal(status, 0, stderr);
    const runs = [...wandb.server.runs.values()].filter((r) => r.project === 'ddp-project');
    assert.equal(runs.length, 1, 'one run');
    assert.equal((runs[0].config as Record<string, { value: unknown }>).worldSize.value, 2);
    assertSameHistory(runs[0], runDir);
  });

  describe('user errors: one line, exit code 2', () => {
    const dir = tempDir();
    const noMetrics = join(dir, 'no-metrics');
    mkdirSync(noMetrics);
    writeFileSync(join(noMetrics, 'config.json'), '{"method": "simclr"}\n');
    const badMetrics = join(dir, 'bad-metrics');
    mkdirSync(badMetrics);
    writeFileSync(join(badMetrics, 'config.json'), '{"method": "simclr"}\n');
    writeFileSync(join(badMetrics, 'metrics.jsonl'), '{"step": 1, "train/loss": 2}\nnot json\n');
    const missing = join(dir, 'nowhere');
    const train = [...TINY_FLAGS, '--max-steps', '1', '--run-dir', join(dir, 'r')];
    const cases: Array<[string, string[], RegExp, NodeJS.ProcessEnv?]> = [
      ['compare: no such run directory', ['compare', missing, '--out', join(dir, 'o1')], /compare: .*nowhere is not a run directory \(it does not exist\)/],
      ['compare: no metrics.jsonl', ['compare', noMetrics, '--out', join(dir, 'o2')], /compare: .*no-metrics has no metrics\.jsonl/],
      ['compare: a malformed metrics line', ['compare', badMetrics, '--out', join(dir, 'o3')], /metrics\.jsonl:2: not a JSON object/],
      ['compare: no --out', ['compare', noMetrics], /--out: required/],
      ['compare: bad --points', ['compare', noMetrics, '--out', join(dir, 'o4'), '--points', '3'], /--points: 3 is not allowed; expected an integer >= 10/],
      ['compare: no run directory', ['compare'], /missing required argument/],
      ['wandb-sync: no such run directory', ['wandb-sync', missing], /wandb-sync: .*nowhere is not a run directory/],
      ['wandb-sync: no metrics.jsonl', ['wandb-sync', noMetrics], /wandb-sync: .*no-metrics has no metrics\.jsonl/],
      ['unknown --logger', [...train, '--logger', 'tensorboard'], /--logger: "tensorboard" is not allowed; expected one of local, wandb/],
      ['unknown --wandb-mode', [...train, '--wandb-mode', 'sometimes'], /--wandb-mode: "sometimes" is not allowed; expected one of online, offline, disabled/],
      [
        'bad WANDB_MODE',
        [...train, '--logger', 'wandb'],
        /WANDB_MODE: "sometimes" is not allowed; expected online, offline or disabled/,
        { WANDB_MODE: 'sometimes' },
      ],
    ];
    for (const [what, args, pattern, extraEnv] of cases) {
      it(what, async () => {
        const { status, stderr } = await cli(args, { ...wandb.env, ...extraEnv }, 60_000);
        const lines = stderr.trim().split('\n');
        assert.equal(status, 2, `exit code (stderr: ${stderr})`);
        assert.equal(lines.length, 1, `one line, got:\n${stderr}`);
        assert.match(lines[0], pattern);
        assert.doesNotMatch(stderr, /\n\s+at /);
      });
    }

    it('wandb-sync without an API key', async () => {
      const run = join(dir, 'run');
      mkdirSync(run);
      writeFileSync(join(run, 'config.json'), '{"method": "simclr"}\n');
      writeFileSync(join(run, 'metrics.jsonl'), '{"step": 1, "train/loss": 2}\n');
      const { status, stderr } = await cli(['wandb-sync', run], { ...wandb.env, WANDB_API_KEY: undefined }, 60_000);
      assert.equal(status, 2, stderr);
      assert.match(
        stderr.trim(),
        /^ssl-train: error: wandb-sync: no W&B API key for http:\/\/127\.0\.0\.1:\d+: set WANDB_API_KEY \(or log in with `wandb login`\)$/,
      );
    });
  });
});
