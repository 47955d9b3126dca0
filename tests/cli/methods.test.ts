import { strict as assert } from 'node:assert';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { BarlowTwins, BYOL, describeRange, MAE, BUILT_IN_METHODS, getMethodClass, SimCLR, type ArgSpecs } from '../../src/methods/index.js';
import { runCli } from '../helpers/run.js';

/** The compiled example that registers `my_simclr` and then runs the CLI. */
const EXAMPLE = fileURLToPath(new URL('../../examples/my-simclr.js', import.meta.url));

/** Asserts that `text` has one table line per declared argument: name, kind, default, range, description. */
function assertListed(text: string, method: string, args: ArgSpecs): void {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`${method} (`));
  assert.ok(start >= 0, `${method} listed in:\n${text}`);
  assert.match(lines[start + 1], /^ {2}paper: {2}\S/);
  assert.match(
    lines[start + 2],
    /^ {2}recipe: (sgd|lars|adamw), lr \S+, classifier lr \S+, weight decay \S+; views '\w+'; ([2-9] global crops|1 global crop)( \+ .*local crops.*)?$/,
  );
  assert.match(lines[start + 3], /^ {2}labels: (needed|not used)/);
  const header = start + 4;
  assert.match(lines[header], /^\s+name\s+kind\s+default\s+range\s+description$/);
  Object.entries(args).forEach(([name, spec], i) => {
    assert.deepEqual(lines[header + 1 + i].trim().split(/\s{2,}/), [name, spec.kind, String(spec.default), describeRange(spec), spec.description]);
  });
}

describe('ssl-train methods', function () {
  this.timeout(60_000);

  it('lists every built-in method with its arguments', () => {
    const { status, stdout, stderr } = runCli(['methods']);
    assert.equal(status, 0, stderr);
    assert.match(stdout, /--method-arg name=value/);
    assertListed(stdout, 'simclr', SimCLR.args);
    assertListed(stdout, 'barlow_twins', BarlowTwins.args);
    assertListed(stdout, 'byol', BYOL.args);
    assertListed(stdout, 'mae', MAE.args);
    assert.match(stdout, /^\s+temperature\s+float\s+0\.2\s+> 0\s+softmax temperature of NT-Xent$/m);
    assert.match(stdout, /^\s+baseTau\s+float\s+0\.99\s+\[0, 1\]\s+\S/m);
    // Every built-in method: its paper, recipe and labels lines and every argument.
    for (const name of BUILT_IN_METHODS) assertListed(stdout, name, getMethodClass(name).args);
    assert.match(stdout, /^supcon \(SupCon\)\n.*\n.*\n {2}labels: needed/m);
  });

  it('lists only the methods named, and refuses unknown ones with exit code 2', () => {
    const one = runCli(['methods', 'byol']);
    assert.equal(one.status, 0, one.stderr);
    assertListed(one.stdout, 'byol', BYOL.args);
    assert.doesNotMatch(one.stdout, /^simclr /m);
    const bad = runCli(['methods', 'byol', 'no_such_method']);
    assert.equal(bad.status, 2);
    assert.equal(bad.stdout, '', 'nothing listed');
    assert.equal(bad.stderr.trim(), `ssl-train: error: method: "no_such_method" is not allowed; expected one of ${BUILT_IN_METHODS.join(', ')}`);
  });

  it('includes registered user subclasses with their added arguments (examples/my-simclr.ts)', () => {
    const r = spawnSync(process.execPath, [EXAMPLE, 'methods'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assertListed(r.stdout, 'my_simclr', {
      ...SimCLR.args,
      varianceWeight: { kind: 'float', default: 1, ge: 0, description: 'weight of the variance hinge added to NT-Xent' },
    });
    assertListed(r.stdout, 'simclr', SimCLR.args);
  });

  it('validates the arguments a user subclass adds', () => {
    const r = spawnSync(process.execPath, [EXAMPLE, '--method', 'my_simclr', '--method-arg', 'varianceWeight=-1', '--max-steps', '1'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 2);
    assert.equal(r.stderr.trim(), 'ssl-train: error: method_args.varianceWeight: -1 is not allowed; expected a number >= 0');
  });

  it('booleans are true or false on the command line: useBnInHead=1 is refused, naming the argument and the allowed values', () => {
    const r = runCli(['--method', 'dino', '--method-arg', 'useBnInHead=1', '--dataset', 'synthetic', '--max-steps', '1']);
    assert.equal(r.status, 2);
    assert.equal(r.stderr.trim(), 'ssl-train: error: method_args.useBnInHead: 1 is not allowed; expected true or false');
  });

  it('--help points --method-arg at it and lists the command', () => {
    const { status, stdout } = runCli(['--help']);
    assert.equal(status, 0);
    assert.match(
      stdout.replace(/\s+/g, ' '),
      /--method-arg <name=value> method hyperparameter, repeatable \(e\.g\. temperature=0\.2\); 'ssl-train methods' lists/,
    );
    assert.match(stdout, /^\s+methods \[names\.\.\.\]\s+list the registered methods/m);
  });
});
