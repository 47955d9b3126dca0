/**
 * DINO with W ranks (real Gloo processes, different samples per rank): `ssl-train verify` at 2
 * and 3 ranks with 2 global and 2 smaller local crops, the last layer trained and gradients
 * clipped (the centre is a buffer: compared with the parameters), and at 2 ranks with batch norm
 * in the heads (`useBnInHead`, synchronised over the ranks); a centre moved by each
 * rank's own teacher mean fails the same check; 2 ranks stopped after 7 steps and resumed end
 * 16 steps bit-identical to an uninterrupted run, centre included.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { CLI, tempDir } from '../helpers/run.js';

/** Preloading this registers `dino_local_centre` (tests/methods/dino-local-centre.ts). */
const CONTROL = fileURLToPath(new URL('../methods/dino-local-centre.js', import.meta.url));
const SMALL = [
  ...['--backbone', 'tiny_resnet', '--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '192', '--workers', '0', '--val-every', '0'],
  ...['--batch-size', '24', '--crops', '2x16:0.4-1,2x8:0.05-0.4'],
  ...['--method-arg', 'projHiddenDim=32', '--method-arg', 'projOutputDim=16', '--method-arg', 'numPrototypes=64'],
];
/** The last layer trained from the first step, gradients clipped, the teacher temperature warming up. */
const FROM_START = ['--method-arg', 'freezeLastLayerEpochs=0', '--method-arg', 'clipGrad=0.3', '--method-arg', 'warmupTeacherTemperatureEpochs=3'];

function cli(args: string[], preload?: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [...(preload ? ['--import', preload] : []), CLI, ...args], {
    encoding: 'utf8',
    timeout: 540_000,
    env: { ...process.env, FORCE_COLOR: '0' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Every tensor of `runDir/checkpoints/last.ckpt` (model and optimizer state), as raw arrays. */
function allTensors(runDir: string): Record<string, Float32Array | Int32Array> {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
  const out: Record<string, Float32Array | Int32Array> = {};
  for (const [name, t] of Object.entries(ckpt.tensors)) out[name] = t.dtype === 'int32' ? Int32Array.from(t.dataSync()) : Float32Array.from(t.dataSync());
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

describe('DINO: data-parallel training equals one process on the global batch', function () {
  this.timeout(900_000);

  for (const devices of [2, 3]) {
    it(`verify --devices ${devices} passes: loss, gradients (clipped), parameters and centre over 3 steps`, () => {
      const { status, stdout, stderr } = cli(['verify', ...SMALL, ...FROM_START, '--method', 'dino', '--devices', String(devices), '--steps', '3']);
      assert.equal(status, 0, stdout + stderr);
      const verdict = /PASSED: the worst difference is [0-9.]+ of its bound/.exec(stdout);
      assert.ok(verdict, stdout);
      console.log(`      ${devices} ranks: ${verdict[0]}`);
    });
  }

  it('verify --devices 2 passes with batch norm in the student and teacher heads (useBnInHead=1)', () => {
    const { status, stdout, stderr } = cli([
      'verify',
      ...SMALL,
      ...FROM_START,
      '--method-arg',
      'useBnInHead=1',
      '--method',
      'dino',
      '--devices',
      '2',
      '--steps',
      '3',
    ]);
    assert.equal(status, 0, stdout + stderr);
    assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
  });

  it("a centre moved by each rank's own teacher mean fails the same check", () => {
    const { status, stdout, stderr } = cli(['verify', ...SMALL, ...FROM_START, '--method', 'dino_local_centre', '--devices', '2', '--steps', '3'], CONTROL);
    assert.equal(status, 1, stdout + stderr);
    assert.match(stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });

  it('2 ranks stopped after 7 steps and resumed end 16 steps bit-identical to an uninterrupted run (centre, teacher, optimizer state)', () => {
    const train = (runDir: string, extra: string[]) => {
      const args = [...SMALL, ...FROM_START, '--method', 'dino', '--devices', '2', '--epochs', '2', '--warmup-epochs', '0', '--run-dir', runDir];
      const { status, stdout, stderr } = cli([...args, ...extra]);
      assert.equal(status, 0, stdout + stderr);
    };
    const straight = join(tempDir(), 'straight');
    train(straight, []);
    const split = join(tempDir(), 'split');
    train(split, ['--max-steps', '7']);
    const atStop = allTensors(split)['model/centre']!;
    train(split, ['--resume', 'auto']);
    const [a, b] = [allTensors(straight), allTensors(split)];
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    for (const name of Object.keys(a)) assert.deepEqual(b[name], a[name], name);
    assert.notDeepEqual(a['model/centre'], atStop, 'the centre moved after the resume');
  });
});
