/**
 * `--gpus N` and `--backend webgpu` from the command line: the adapter each rank gets, and
 * the one-line errors where none fits. "No GPU" is made certain by pointing the Vulkan
 * loader at a driver manifest that does not exist; SwiftShader (tests/helpers/webgpu.ts)
 * stands for a machine whose only adapter is a software one. `--gpus 2` training two ranks
 * on it (--allow-software-adapter) is tests/distributed/webgpu-exactness.full.test.ts.
 */
import assert from 'node:assert/strict';
import { runCli, SMOKE_FLAGS } from '../helpers/run.js';
import { SWIFTSHADER_ICD } from '../helpers/webgpu.js';

const NO_DRIVER = { VK_ICD_FILENAMES: '/nonexistent/vk_icd.json' };
const SWIFTSHADER = { VK_ICD_FILENAMES: SWIFTSHADER_ICD };

function oneLineError(out: { status: number | null; stderr: string }): string {
  assert.equal(out.status, 2, out.stderr);
  const lines = out.stderr.trim().split('\n');
  assert.equal(lines.length, 1, out.stderr);
  return lines[0]!;
}

describe('cli: --gpus and the WebGPU engine', () => {
  it('--gpus 2 without any GPU adapter: one line naming what Dawn found and where drivers were searched, exit 2', () => {
    const line = oneLineError(runCli([...SMOKE_FLAGS, '--gpus', '2', '--max-steps', '1'], 60_000, NO_DRIVER));
    assert.match(
      line,
      /^ssl-train: error: --gpus 2: no GPU adapter: Dawn lists: none; Vulkan drivers searched in \/nonexistent\/vk_icd\.json \(found: none\); on CPU use --devices instead of --gpus$/,
    );
  });

  it('verify --gpus 1 without any GPU adapter: the same line, exit 2', () => {
    const line = oneLineError(runCli(['verify', ...SMOKE_FLAGS, '--gpus', '1'], 60_000, NO_DRIVER));
    assert.match(line, /^ssl-train: error: --gpus 1: no GPU adapter: Dawn lists: none; .*on CPU use --devices instead of --gpus$/);
  });

  it('--gpus 1 where the only adapter is software: refused, naming it and --allow-software-adapter', () => {
    const line = oneLineError(runCli([...SMOKE_FLAGS, '--gpus', '1', '--max-steps', '1'], 60_000, SWIFTSHADER));
    assert.match(line, /no GPU adapter: Dawn lists: SwiftShader Device \(Subzero\) \(vulkan, software\);/);
    assert.match(line, /software adapters are used only with --allow-software-adapter/);
  });

  it('--backend tensorflow --gpus 1 without tfjs-node-gpu: one line, exit 2', () => {
    const line = oneLineError(runCli([...SMOKE_FLAGS, '--gpus', '1', '--backend', 'tensorflow'], 30_000));
    assert.match(line, /--gpus: 1 with --backend tensorflow needs @tensorflow\/tfjs-node-gpu, which is not installed; use --backend webgpu$/);
  });

  it('--backend webgpu without any adapter: one line naming the flag, exit 2', () => {
    const line = oneLineError(runCli([...SMOKE_FLAGS, '--backend', 'webgpu', '--max-steps', '1'], 60_000, NO_DRIVER));
    assert.match(line, /^ssl-train: error: --backend webgpu: no GPU adapter: Dawn lists: none; /);
  });
});
