/**
 * The loss-reference format (`ssl-loss-oracle/2`, docs/loss-case.md) and `verify --case`, fast
 * tier: the loader (one clear UserError naming the file and the field for every malformed
 * file, `/1` read backward, directories), checkLossCases on every case in one process (passes;
 * fails and names a case whose reference is off; skips unknown losses), the report, and the
 * CLI: every case with 2 ranks in one launch, and a bad file as one line and exit code 1. The
 * W = 1, 2, 3 runs of every case are in ./loss-cases.full.test.ts.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import {
  CASE_LOSS_NAMES,
  checkLossCases,
  formatLossCaseReport,
  LOSS_CASE_FORMAT,
  loadLossCases,
  parseLossCaseFile,
  runLossCaseOnRank,
} from '../../src/verify/index.js';
import { runCli, tempDir } from '../helpers/run.js';
import { CASES_FILE, EXAMPLE_CASE, REPO_ROOT, useCpuEngine } from '../losses/helpers.js';

/** The ```json example of docs/loss-case.md. */
function docExample(): string {
  const doc = readFileSync(join(REPO_ROOT, 'docs/loss-case.md'), 'utf8');
  const m = /```json\n([\s\S]*?)```/.exec(doc);
  assert.ok(m, 'docs/loss-case.md has a ```json example');
  return m[1]!;
}

type Obj = Record<string, unknown>;
type CaseJson = Obj & { inputs: Record<string, Obj & { data: number[] }>; expected: Obj & { grad: Record<string, number[]> } };

const text = readFileSync(CASES_FILE, 'utf8');
const fresh = (): Obj & { cases: CaseJson[] } => JSON.parse(text) as Obj & { cases: CaseJson[] };
const byName = (f: { cases: CaseJson[] }, name: string) => f.cases.find((c) => c.name === name)!;

/** parseLossCaseFile on an edited copy of `base` must throw a UserError matching `re`. */
function rejects(edit: (f: Obj & { cases: CaseJson[] }) => void, re: RegExp, base: () => Obj = fresh): void {
  const f = base() as Obj & { cases: CaseJson[] };
  edit(f);
  assert.throws(
    () => parseLossCaseFile(f, 'bad.json'),
    (err: unknown) => {
      assert.ok(err instanceof UserError, `not a UserError: ${String(err)}`);
      assert.match(err.message, /^loss case bad\.json: /);
      assert.match(err.message, re);
      return true;
    },
  );
}

describe('verify/loss-case: reading ssl-loss-oracle/2 (and /1) files', () => {
  it('loads the committed cases: one per loss (and state variant), typed', () => {
    const file = loadLossCases(CASES_FILE);
    assert.equal(file.format, LOSS_CASE_FORMAT);
    assert.equal(file.cases.length, 34);
    assert.deepEqual([...new Set(file.cases.map((c) => c.loss))].sort(), [...CASE_LOSS_NAMES].sort());
    const moco = file.cases.find((c) => c.name === 'moco')!;
    assert.deepEqual(moco.inputs.query!.shape, [12, 8]);
    assert.equal(moco.inputs.query!.batchAxis, 0);
    assert.equal(moco.state.queue!.batchAxis, null);
    const dc = file.cases.find((c) => c.name === 'deepclusterv2')!;
    assert.deepEqual([dc.inputs.scores0!.shape, dc.inputs.scores0!.batchAxis, dc.inputs.targets!.dtype], [[2, 12, 5], 1, 'int32']);
  });

  it('names the field in every malformed-file error', () => {
    rejects((f) => (f.format = 'ssl-loss-oracle/3'), /format: "ssl-loss-oracle\/3" is not supported; expected "ssl-loss-oracle\/2"/);
    rejects((f) => (f.cases = []), /cases: no cases in the file/);
    rejects((f) => delete byName(f, 'moco').N, /cases\[4\] \(moco\)\.N: expected a finite number, got nothing/);
    rejects((f) => (byName(f, 'moco').name = 'simclr'), /cases\[4\]\.name: "simclr" is used by an earlier case/);
    rejects((f) => byName(f, 'moco').inputs.query!.data.pop(), /cases\[4\] \(moco\)\.inputs\.query\.data: expected 96 numbers \(\[12, 8\] row-major\), got 95/);
    rejects((f) => (byName(f, 'moco').inputs.query!.batch_axis = 1), /inputs\.query\.shape\[1\]: the batch axis must have N = 12 entries, got 8/);
    rejects((f) => (byName(f, 'moco').inputs.query!.dtype = 'float16'), /inputs\.query\.dtype: "float16" is not allowed/);
    rejects((f) => (byName(f, 'supcon').inputs.labels!.data[3] = 1.5), /\(supcon\)\.inputs\.labels\.data\[3\]: expected an integer \(int32\), got 1\.5/);
    rejects(
      (f) => ((byName(f, 'dino').state as Obj).centre = { ...(byName(f, 'dino').inputs.teacher0 as Obj) }),
      /\(dino\)\.state\.centre\.batch_axis: state is the same on every rank/,
    );
    rejects((f) => delete byName(f, 'simclr').expected.grad.z2, /\(simclr\)\.expected\.grad\.z2: missing \(every float32 input needs one\)/);
    rejects((f) => (byName(f, 'supcon').expected.grad.labels = []), /\(supcon\)\.expected\.grad\.labels: an int32 input has no gradient/);
    rejects((f) => (byName(f, 'simclr').expected.grad.z1![7] = NaN), /\(simclr\)\.expected\.grad\.z1\[7\]: expected a finite number, got number NaN/);
    rejects((f) => ((byName(f, 'simclr').expected.per_rank as Obj)['5'] = [1, 2, 3, 4, 5]), /expected\.per_rank\.5: 5 does not divide N = 12/);
    rejects((f) => ((byName(f, 'simclr').expected.per_rank as Obj)['3'] = [1, 2]), /expected\.per_rank\.3: expected 3 numbers \(one per rank\), got 2/);
    rejects(
      (f) => ((byName(f, 'dino').expected.state_after as Obj).queue = { shape: [1], data: [0] }),
      /\(dino\)\.expected\.state_after\.queue: no state named "queue"/,
    );
    assert.doesNotThrow(() => parseLossCaseFile(fresh(), 'good.json')); // the edits above, not the file, are bad
  });

  it('reads ssl-loss-oracle/1 files backward, with /1 field names in its errors', () => {
    const file = loadLossCases(EXAMPLE_CASE);
    assert.deepEqual(
      file.cases.map((c) => [c.name, c.N, Object.keys(c.inputs).join()]),
      [
        ['simclr', 6, 'z1,z2'],
        ['barlow', 6, 'z1,z2'],
        ['byol', 6, 'p1,p2,z1,z2'],
        ['vicreg', 6, 'z1,z2'],
      ],
    );
    assert.deepEqual(file.cases[1]!.hyper, { lambd: 0.0051, scale: 1, eps: 1e-5 });
    assert.equal(file.cases[0]!.expected.perRank[1]![0], file.cases[0]!.expected.loss);
    const v1 = () => JSON.parse(readFileSync(EXAMPLE_CASE, 'utf8')) as Obj;
    const losses = (f: Obj) => f.losses as Record<string, Obj & { grad: Record<string, number[][]> }>;
    rejects((f) => delete (f.hyper as Obj).temperature, /hyper\.temperature: missing \(needed by losses\.simclr\)/, v1);
    rejects((f) => delete (f.inputs as Obj).p2, /inputs\.p2: missing \(needed by losses\.byol\)/, v1);
    rejects(
      (f) => (losses(f).simclr!.grad.z2![2]![4] = null as unknown as number),
      /losses\.simclr\.grad\.z2\[2\]\[4\]: expected a finite number, got null/,
      v1,
    );
    rejects((f) => ((f.distributed as Obj).world_size = 4), /distributed\.world_size: 4 does not divide N = 6/, v1);
  });

  it('reads a directory of case files; unreadable, non-JSON and duplicate cases are UserErrors', () => {
    const dir = tempDir('ssl-zoo-cases-');
    mkdirSync(join(dir, 'cases'));
    copyFileSync(CASES_FILE, join(dir, 'cases', 'a.json'));
    copyFileSync(EXAMPLE_CASE, join(dir, 'cases', 'b.json'));
    const fails = (path: string, re: RegExp) =>
      assert.throws(
        () => loadLossCases(path),
        (e: unknown) => e instanceof UserError && re.test(e.message),
      );
    fails(join(dir, 'cases'), /b\.json: case "simclr" is also in .*a\.json/);
    const f = fresh();
    f.cases = f.cases.filter((c) => !['simclr', 'barlow', 'byol', 'vicreg'].includes(c.name as string));
    writeFileSync(join(dir, 'cases', 'a.json'), JSON.stringify(f));
    assert.equal(loadLossCases(join(dir, 'cases')).cases.length, 30 + 4);
    writeFileSync(join(dir, 'bad.json'), '{"format": ');
    fails(join(dir, 'bad.json'), /bad\.json: not valid JSON/);
    fails(join(dir, 'missing.json'), /missing\.json: cannot read the file \(ENOENT\)/);
    mkdirSync(join(dir, 'empty'));
    fails(join(dir, 'empty'), /a directory without \*\.json case files/);
  });
});

describe('verify/loss-case: checkLossCases', () => {
  before(useCpuEngine);

  it('passes every case at W = 1 and prints one line per case', () => {
    const report = checkLossCases(loadLossCases(CASES_FILE));
    assert.equal(report.tolerance, 1e-4);
    const out = formatLossCaseReport(report);
    assert.ok(report.passed, out);
    assert.equal(report.results.length, 34);
    for (const r of report.results) assert.ok(r.status === 'passed' && r.errors?.rankLoss === undefined, out);
    const lines = out.split('\n');
    assert.equal(lines.length, 34 + 2, out);
    assert.match(lines[0]!, /W = 1 process \(the whole batch\), tolerance 0\.0001/);
    assert.match(
      lines.find((l) => l.trim().startsWith('dino '))!,
      /passed .*state-after error/,
    );
    assert.match(
      lines.find((l) => l.trim().startsWith('swav-queue'))!,
      /passed .*outputs error/,
    );
    assert.equal(lines.at(-1), 'PASSED: 34 passed, 0 failed, 0 skipped');
  });

  it('passes the example of docs/loss-case.md (DINO with its centre) at W = 1', () => {
    const report = checkLossCases(parseLossCaseFile(JSON.parse(docExample()), 'docs/loss-case.md'));
    assert.ok(report.passed, formatLossCaseReport(report));
    assert.deepEqual(
      report.results.map((r) => [r.name, r.status, r.errors?.stateAfter !== undefined]),
      [['dino-tiny', 'passed', true]],
    );
  });

  it('fails and names a case whose reference is off; skips a loss it does not have; `only` selects', () => {
    const f = fresh();
    byName(f, 'ressl').expected.grad.q![3]! *= 1.01;
    byName(f, 'mocov3').expected.loss = (byName(f, 'mocov3').expected.loss as number) * (1 + 1e-3);
    f.cases.push({ ...byName(f, 'simclr'), name: 'mystery', loss: 'mystery' });
    const report = checkLossCases(parseLossCaseFile(f, 'edited'), { only: ['ressl', 'mocov3', 'mystery', 'simsiam'] });
    const out = formatLossCaseReport(report);
    assert.equal(report.passed, false);
    assert.deepEqual(
      report.results.map((r) => [r.name, r.status]),
      [
        ['mocov3', 'failed'],
        ['simsiam', 'passed'],
        ['ressl', 'failed'],
        ['mystery', 'skipped'],
      ],
    );
    assert.match(out, /mystery +skipped +ssl-zoo has no loss "mystery"/);
    assert.match(out.split('\n').at(-1)!, /^FAILED: 1 passed, 2 failed, 1 skipped$/);
  });

  it('runLossCaseOnRank (what each verify process runs) on one process: passes, UserErrors for a missing file and a bad tolerance', () => {
    const report = runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup());
    assert.ok(report.passed, formatLossCaseReport(report));
    assert.deepEqual([report.worldSize, report.rank, report.results.length], [1, 0, 4]);
    const fails = (f: () => unknown, re: RegExp) => assert.throws(f, (e: unknown) => e instanceof UserError && re.test(e.message));
    fails(() => runLossCaseOnRank('/nonexistent/case.json', new SingleProcessGroup()), /\/nonexistent\/case\.json: cannot read the file \(ENOENT\)/);
    fails(() => runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup(), 0), /tolerance: 0 is not allowed/);
  });

  it('refuses a case its loss cannot run, naming the case and the field', () => {
    const f = fresh();
    delete (byName(f, 'dino').state as Obj).centre;
    delete byName(f, 'dino').expected.state_after;
    assert.throws(() => checkLossCases(parseLossCaseFile(f, 'x.json')), /loss case x\.json: case dino: state\.centre: missing \(needed by the dino loss\)/);
    const g = fresh();
    byName(g, 'deepclusterv2').inputs.targets!.data[0] = 99;
    assert.throws(
      () => checkLossCases(parseLossCaseFile(g, 'y.json'), { only: ['deepclusterv2'] }),
      (e: unknown) =>
        e instanceof UserError &&
        /^loss case y\.json: case deepclusterv2: the deepclusterv2 loss cannot run on its inputs: .*targets must be -1 or clusters in 0\.\.4/.test(e.message),
    );
  });
});

describe('verify/loss-case: ssl-train verify --case (fast tier: one 2-rank launch)', function () {
  this.timeout(180_000);

  it('checks every case (a directory: the committed file and the docs example) with 2 ranks in one launch, per-rank losses included', () => {
    const dir = join(tempDir('ssl-zoo-cases-'), 'cases');
    mkdirSync(dir);
    copyFileSync(CASES_FILE, join(dir, 'cases.json'));
    writeFileSync(join(dir, 'docs-example.json'), docExample());
    const { status, stdout, stderr } = runCli(['verify', '--case', dir, '--devices', '2'], 150_000);
    assert.equal(status, 0, stdout + stderr);
    const lines = stdout.trim().split('\n');
    assert.match(lines[0]!, /W = 2 processes/);
    assert.equal(lines.filter((l) => / passed .*per-rank loss error /.test(l)).length, 35, stdout);
    assert.match(
      lines.find((l) => l.trim().startsWith('dino-tiny'))!,
      /passed .*state-after error/,
    );
    assert.equal(lines.at(-1), 'PASSED: 35 passed, 0 failed, 0 skipped');
  });

  it('a malformed case file: one line naming the field, exit code 2 (a user error), no stack trace', () => {
    const path = join(tempDir('ssl-zoo-case-'), 'bad.json');
    const f = fresh();
    byName(f, 'wmse').inputs.view1!.shape = [24, 5];
    writeFileSync(path, JSON.stringify(f));
    const { status, stdout, stderr } = runCli(['verify', '--case', path], 60_000);
    assert.equal(status, 2, stdout + stderr);
    assert.equal(stdout, '');
    const lines = stderr.trim().split('\n');
    assert.equal(lines.length, 1, stderr);
    assert.match(lines[0]!, /bad\.json: cases\[16\] \(wmse\)\.inputs\.view1\.data: expected 120 numbers/);
  });
});
