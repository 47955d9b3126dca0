/**
 * The `ssl-loss-oracle/1` loader (clear UserErrors naming the field) and checkLossCase.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { CASE_LOSS_NAMES, checkLossCase, LOSS_CASE_FORMAT, loadLossCase, parseLossCase } from '../../src/verify/index.js';
import { EXAMPLE_CASE, useCpuEngine } from '../losses/helpers.js';

type Obj = Record<string, unknown>;

function example(): Obj {
  return JSON.parse(readFileSync(EXAMPLE_CASE, 'utf8')) as Obj;
}

/** parseLossCase on a modified copy of the example must throw a UserError matching `re`. */
function rejects(edit: (c: Obj) => void, re: RegExp): void {
  const c = example();
  edit(c);
  assert.throws(
    () => parseLossCase(c, 'bad.json'),
    (err: unknown) => {
      assert.ok(err instanceof UserError, `not a UserError: ${String(err)}`);
      assert.match(err.message, /^loss case bad\.json: /);
      assert.match(err.message, re);
      return true;
    },
  );
}

const losses = (c: Obj) => c.losses as Record<string, Obj>;
const grad = (c: Obj, name: string) => losses(c)[name].grad as Record<string, number[][]>;

describe('losses/case: loading ssl-loss-oracle/1 files', () => {
  before(useCpuEngine);

  it('loads the example case with typed data', () => {
    const c = loadLossCase(EXAMPLE_CASE);
    assert.equal(c.format, LOSS_CASE_FORMAT);
    assert.equal(c.N, 6);
    assert.equal(c.D, 5);
    assert.equal(c.hyper.temperature, 0.5);
    assert.equal(c.inputs.z1.length, 6);
    assert.equal(c.inputs.p1?.[0].length, 5);
    assert.deepEqual(Object.keys(c.losses).sort(), [...CASE_LOSS_NAMES].sort());
    assert.equal(c.distributed?.worldSize, 1);
    assert.equal(c.distributed?.perRankLoss.simclr[0], c.losses.simclr.loss);
  });

  it('names the field in every malformed-file error', () => {
    rejects((c) => (c.format = 'ssl-loss-oracle/2'), /format: "ssl-loss-oracle\/2" is not supported; expected "ssl-loss-oracle\/1"/);
    rejects((c) => delete c.N, /N: expected a finite number, got nothing \(missing\)/);
    rejects((c) => (c.D = 2.5), /D: expected a positive integer, got 2.5/);
    rejects((c) => (c.hyper = [1]), /hyper: expected an object, got an array of 1/);
    rejects((c) => delete (c.hyper as Obj).temperature, /hyper\.temperature: missing \(needed by losses\.simclr\)/);
    rejects((c) => ((c.hyper as Obj).lambd = '0.1'), /hyper\.lambd: expected a finite number, got string "0.1"/);
    rejects((c) => delete (c.inputs as Obj).z2, /inputs\.z2: missing/);
    rejects((c) => delete (c.inputs as Obj).p2, /inputs\.p2: missing \(needed by losses\.byol\)/);
    rejects((c) => (c.inputs as Record<string, number[][]>).z1.pop(), /inputs\.z1: expected N = 6 rows, got 5/);
    rejects((c) => (c.inputs as Record<string, number[][]>).z1[3].push(1), /inputs\.z1\[3\]: expected 5 numbers \(D\), got 6/);
    rejects((c) => (grad(c, 'simclr').z2[2][4] = null as unknown as number), /losses\.simclr\.grad\.z2\[2\]\[4\]: expected a finite number, got null/);
    rejects((c) => delete grad(c, 'byol').z1, /losses\.byol\.grad\.z1: missing/);
    rejects((c) => (grad(c, 'barlow').q = grad(c, 'barlow').z1), /losses\.barlow\.grad\.q: no input named "q"/);
    rejects((c) => delete losses(c).vicreg.loss, /losses\.vicreg\.loss: expected a finite number/);
    rejects((c) => (c.losses = {}), /losses: no losses in the case/);
    rejects((c) => ((c.distributed as Obj).world_size = 4), /distributed\.world_size: 4 does not divide N = 6/);
    rejects(
      (c) => (((c.distributed as Obj).per_rank_loss as Obj).simclr = [1, 2]),
      /distributed\.per_rank_loss\.simclr: expected 1 numbers \(one per rank\), got 2/,
    );
    assert.doesNotThrow(() => parseLossCase(example(), 'good.json')); // the edits above, not the example, are bad
  });

  it('reports unreadable and non-JSON files as UserErrors', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-case-'));
    try {
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, '{"format": ');
      assert.throws(
        () => loadLossCase(bad),
        (e: unknown) => e instanceof UserError && /bad\.json: not valid JSON/.test(e.message),
      );
      assert.throws(
        () => loadLossCase(join(dir, 'missing.json')),
        (e: unknown) => e instanceof UserError && /missing\.json: cannot read the file \(ENOENT\)/.test(e.message),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('losses/case: checkLossCase', () => {
  before(useCpuEngine);

  it('passes the example case for every loss at W = 1', () => {
    const report = checkLossCase(loadLossCase(EXAMPLE_CASE));
    assert.equal(report.worldSize, 1);
    assert.equal(report.rank, 0);
    assert.equal(report.tolerance, 1e-4);
    assert.ok(report.passed, JSON.stringify(report.results));
    for (const r of report.results) {
      assert.equal(r.status, 'passed');
      assert.ok(r.gradError !== undefined && r.lossError !== undefined && r.rankLossError !== undefined);
    }
  });

  it('fails a loss whose reference gradient or value is off, and names it', () => {
    const c = example();
    grad(c, 'barlow').z2[4][1] *= 1.01; // 1% of one entry
    losses(c).simclr.loss = (losses(c).simclr.loss as number) * (1 + 1e-3);
    const report = checkLossCase(parseLossCase(c, 'edited'));
    const by = Object.fromEntries(report.results.map((r) => [r.name, r]));
    assert.equal(report.passed, false);
    assert.equal(by.barlow.status, 'failed');
    assert.ok((by.barlow.gradError ?? 0) > 1e-4);
    assert.equal(by.simclr.status, 'failed');
    assert.ok((by.simclr.lossError ?? 0) > 5e-4);
    assert.equal(by.byol.status, 'passed');
    assert.equal(by.vicreg.status, 'passed');
  });

  it('skips losses it does not implement, honours `only` and `gradients: false`', () => {
    const c = example();
    losses(c).mystery = { loss: 1, grad: { z1: grad(c, 'simclr').z1 } };
    const report = checkLossCase(parseLossCase(c, 'with-mystery'), { only: ['mystery', 'byol'], gradients: false });
    assert.deepEqual(
      report.results.map((r) => [r.name, r.status]),
      [
        ['byol', 'passed'],
        ['mystery', 'skipped'],
      ],
    );
    assert.equal(report.results[0].gradError, undefined);
    assert.ok(report.passed);
  });
});
