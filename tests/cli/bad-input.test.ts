import { strict as assert } from 'node:assert';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { runCliBatch } from '../distributed/cli-batch.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

const dir = tempDir();
const badYaml = join(dir, 'bad.yaml');
writeFileSync(badYaml, 'method: simclr\n  epochs: [1,\n');
const unknownKey = join(dir, 'unknown.yaml');
writeFileSync(unknownKey, 'method: simclr\nlearning_rate: 0.1\n');
const badMethodArgs = join(dir, 'bad-method-args.yaml');
writeFileSync(badMethodArgs, 'method: barlow_twins\nmethod_args:\n  scale_loss: 0\n');
const badCropsList = join(dir, 'bad-crops.yaml');
writeFileSync(badCropsList, 'method: simclr\ncrops:\n  - {count: 2, size: 16, scale: [0.5, 0.2]}\n');
const notCheckpoint = join(dir, 'fake.ckpt');
writeFileSync(notCheckpoint, 'not a checkpoint');

/** [description, args, pattern the one-line message must match] */
const CASES: Array<[string, string[], RegExp]> = [
  [
    'unknown method',
    ['--method', 'no_such_method'],
    new RegExp(`method: "no_such_method" is not allowed; expected one of ${BUILT_IN_METHODS.join(', ')}$`, 'm'),
  ],
  ['negative lr', ['--lr', '-0.1'], /--lr: -0.1 is not allowed; expected a number > 0/],
  ['non-numeric batch size', ['--batch-size', 'big'], /--batch-size: "big" is not allowed; expected an integer/],
  ['zero epochs', ['--epochs', '0'], /--epochs: 0 is not allowed; expected .*1/],
  ['unknown flag', ['--learning-rate', '0.1'], /^ssl-train: error: unknown option '--learning-rate'$/],
  ['a flag without its value', ['--lr'], /^ssl-train: error: option '--lr <x>' argument missing$/],
  ['missing dataset files', ['--dataset', 'fashion-mnist', '--data-dir', join(dir, 'nowhere')], /nowhere/],
  ['unreadable config', ['--config', join(dir, 'missing.yaml')], /config: file .*missing\.yaml does not exist/],
  ['config that is not YAML', ['--config', badYaml], /config: .*bad\.yaml is not valid YAML/],
  ['unknown config key', ['--config', unknownKey], /config: unknown option 'learning_rate'/],
  ['unknown backbone', ['--backbone', 'vit_huge'], /backbone: "vit_huge" is not allowed/],
  ['unknown dataset', ['--dataset', 'imagenet'], /dataset: "imagenet" is not allowed; expected one of .* or folder/],
  ['bad method argument', ['--method-arg', 'temperature'], /--method-arg: "temperature" is not allowed; expected name=value/],
  [
    'argument of another method',
    ['--method-arg', 'lambd=0.1'],
    /method_args.lambd: not a hyperparameter of method 'simclr'; it has projHiddenDim, projOutputDim, temperature/,
  ],
  [
    'integer method argument given a fraction',
    ['--method-arg', 'projHiddenDim=2.5'],
    /method_args.projHiddenDim: 2.5 is not allowed; expected an integer >= 1/,
  ],
  ['temperature <= 0', ['--method-arg', 'temperature=0'], /method_args.temperature: 0 is not allowed; expected a number > 0/],
  ['negative lambd', ['--method', 'barlow_twins', '--method-arg', 'lambd=-0.1'], /method_args.lambd: -0.1 is not allowed; expected a number >= 0/],
  ['tau outside [0, 1]', ['--method', 'byol', '--method-arg', 'base_tau=1.01'], /method_args.baseTau: 1.01 is not allowed; expected a number in \[0, 1\]/],
  ['method argument out of range in a config file', ['--config', badMethodArgs], /method_args.scaleLoss: 0 is not allowed; expected a number > 0/],
  ['unknown optimizer', ['--optimizer', 'rmsprop'], /--optimizer: "rmsprop" is not allowed; expected one of sgd, lars, adamw/],
  ['unknown backend', ['--backend', 'metal'], /--backend: "metal" is not allowed; expected one of auto, cpu, cpu-js, tensorflow, webgpu/],
  ['tensorflow backend not installed', ['--backend', 'tensorflow'], /needs @tensorflow\/tfjs-node-gpu or @tensorflow\/tfjs-node/],
  ['batch not divisible... larger than the data', ['--batch-size', '100000'], /--batch-size: 100000 is not allowed; expected at most the training set size/],
  ['resume from a missing checkpoint', ['--resume', join(dir, 'nope.ckpt')], /resume: checkpoint .*nope\.ckpt does not exist/],
  ['resume from a file that is no checkpoint', ['--resume', notCheckpoint], /resume: .*fake\.ckpt is not an ssl-zoo checkpoint/],
  ['bad boolean', ['--cifar-stem', 'maybe'], /--cifar-stem: "maybe" is not allowed; expected true or false/],
  [
    '--gpus with a CPU backend (no silent CPU run)',
    ['--gpus', '1', '--backend', 'cpu'],
    /--backend: "cpu" is not allowed; expected webgpu or tensorflow with --gpus \(for --backend cpu use --devices 1\)/,
  ],
  ['--drop-last false with several ranks', ['--devices', '2', '--drop-last', 'false'], /--drop-last: false is not allowed; expected true with 2 ranks/],
  [
    '--rendezvous with an unknown scheme, one device',
    ['--rendezvous', 'http://host:29500'],
    /--rendezvous: "http:\/\/host:29500" is not allowed; expected file:\/\/\/shared\/dir, tcp:\/\/host:port, redis:\/\/host:port\[\/prefix\] or env:\/\//,
  ],
  ['--rendezvous without a scheme, one device', ['--rendezvous', 'host:29500'], /--rendezvous: "host:29500" is not allowed; expected file:\/\/\/shared\/dir/],
  ['--rendezvous tcp without a port', ['--rendezvous', 'tcp://host'], /--rendezvous: "tcp:\/\/host" is not allowed; .*host and port are required/],
  [
    'global batch not divisible by the ranks',
    ['--devices', '3', '--batch-size', '32'],
    /--batch-size: 32 is not allowed; expected a multiple of the world size 3/,
  ],
  [
    'node rank outside the job',
    ['--devices', '2', '--num-nodes', '2', '--node-rank', '2', '--rendezvous', 'file:///tmp/x'],
    /--node-rank: 2 is not allowed; expected an integer in \[0, 1\]/,
  ],
  ['several nodes without a rendezvous', ['--devices', '2', '--num-nodes', '2'], /--rendezvous: required with --num-nodes > 1/],
  ['unknown strategy', ['--strategy', 'fsdp'], /--strategy: "fsdp" is not allowed; expected one of auto, single, ddp/],
  [
    '--crops with bad syntax',
    ['--crops', '2x16'],
    /--crops: "2x16" is not allowed; expected comma-separated groups NxS:lo-hi .*, e\.g\. 2x28:0\.14-1,6x12:0\.05-0\.14$/,
  ],
  ['--crops larger than the image', ['--crops', '2x20:0.2-1'], /--crops: "2x20:0\.2-1" is not allowed; expected crop sizes of at most the image size 16 px/],
  [
    '--crops scale outside (0, 1]',
    ['--crops', '2x16:0.2-1.5'],
    /--crops: "2x16:0\.2-1\.5" is not allowed; expected a scale range lo-hi with 0 < lo <= hi <= 1/,
  ],
  ['--crops with zero crops in a group', ['--crops', '2x16:0.2-1,0x8:0.05-0.14'], /--crops: "0x8:0\.05-0\.14" is not allowed; expected a crop count N >= 1/],
  [
    '--crops with local crops for a two-view method',
    ['--crops', '2x16:0.14-1,6x7:0.05-0.14'],
    /--crops: "2x16:0\.14-1,6x7:0\.05-0\.14" is not allowed; expected one group of 2 global crops for method 'simclr', .*takes no local crops/,
  ],
  [
    '--crops with 3 global crops for a two-view method',
    ['--method', 'byol', '--crops', '3x16:0.2-1'],
    /expected exactly 2 global crops \(the first group\) for method 'byol'/,
  ],
  [
    '--crops of another size with the mlp backbone',
    ['--crops', '2x12:0.2-1'],
    /--crops: "2x12:0\.2-1" is not allowed; expected crops of 16 px only with --backbone mlp/,
  ],
  [
    '--patch-size with a backbone without patches',
    ['--backbone', 'tiny_resnet', '--patch-size', '4'],
    /--patch-size: 4 is not allowed; expected a Vision Transformer backbone \(vit_tiny, vit_small\), not tiny_resnet$/,
  ],
  [
    '--patch-size larger than the smallest crop',
    ['--backbone', 'vit_tiny', '--patch-size', '17'],
    /--patch-size: 17 is not allowed; expected at most the smallest crop, 16 px \(--crops 2x16:0\.2-1\)$/,
  ],
  ['--patch-size 0', ['--backbone', 'vit_tiny', '--patch-size', '0'], /--patch-size: 0 is not allowed; expected an integer >= 1$/],
  ['a reversed scale in a YAML crops list', ['--config', badCropsList], /crops\[0\]: .* is not allowed; expected a scale range lo-hi with 0 < lo <= hi <= 1/],
];

/**
 * The cases that run as their own `ssl-train` process (bin.ts's way out: a Commander error, a
 * validation error, a config file's); the others share one process, each through the CLI's
 * own `main` in turn (tests/distributed/cli-batch.ts), which is what the binary runs: 45
 * processes started one after another took half a minute.
 */
const OWN_PROCESS = new Set(['unknown method', 'unknown flag', 'config that is not YAML']);

describe('ssl-train rejects bad input with one line and exit code 2', function () {
  this.timeout(60_000);
  const runDirs = CASES.map(() => join(tempDir(), 'run'));
  const argv = (i: number) => [...SMOKE_FLAGS, '--run-dir', runDirs[i]!, '--max-steps', '1', ...CASES[i]![1]];
  const results = new Map<number, { status: number | null | undefined; stderr: string }>();

  before(async function () {
    this.timeout(300_000);
    const shared: Record<string, string[]> = {};
    CASES.forEach(([what], i) => {
      if (OWN_PROCESS.has(what)) results.set(i, runCli(argv(i), 30_000));
      else shared[String(i)] = argv(i);
    });
    for (const [i, run] of await runCliBatch(1, shared, 240_000)) results.set(Number(i), { status: run.codes[0], stderr: run.stderr[0]! });
  });

  CASES.forEach(([what, , pattern], i) => {
    it(what, () => {
      const runDir = runDirs[i]!;
      const { status, stderr } = results.get(i)!;
      const lines = stderr.trim().split('\n');
      assert.equal(status, 2, `exit code (stderr: ${stderr})`);
      assert.equal(lines.length, 1, `one line, got:\n${stderr}`);
      assert.match(lines[0], pattern);
      assert.doesNotMatch(stderr, /\n\s+at /, 'no stack trace');
      assert.ok(!existsSync(join(runDir, 'checkpoints')), 'nothing was trained');
    });
  });

  it("an unknown command is one line naming the commands; 'help verify' is verify's --help", () => {
    const unknown = runCli(['simclr'], 30_000);
    assert.equal(unknown.status, 2, unknown.stderr);
    assert.match(unknown.stderr, /^ssl-train: error: unknown command 'simclr'; expected one of verify, compare, .*, or options only \(training\)\n$/);
    const help = runCli(['help', 'verify'], 30_000);
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^Usage: ssl-train verify \[options\]/);
  });

  it('--help lists every option with its default', () => {
    const { status, stdout } = runCli(['--help']);
    assert.equal(status, 0);
    for (const flag of [
      '--method',
      '--backbone',
      '--dataset',
      '--epochs',
      '--batch-size',
      '--lr',
      '--max-steps',
      '--run-dir',
      '--seed',
      '--config',
      '--resume',
      '--backend',
    ]) {
      assert.ok(stdout.includes(flag), `${flag} in help`);
    }
    assert.match(stdout, /--epochs <n>\s+training epochs \(default: 10\)/);
  });
});
