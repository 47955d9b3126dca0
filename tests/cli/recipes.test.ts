import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildConfig, readConfigFile } from '../../src/experiment/config.js';
import { BUILT_IN_METHODS, getMethodClass, resolveMethodArgs } from '../../src/methods/index.js';
import { runCli } from '../helpers/run.js';

const CONFIGS = fileURLToPath(new URL('../../../configs/', import.meta.url));

/** What each recipe family must train on: the data set and the backbone (ViT methods: the ViTs). */
const FAMILIES = { 'fashion-mnist': 'tiny_resnet', cifar10: 'resnet18' } as const;
const VIT_FAMILIES = { 'fashion-mnist': 'vit_tiny', cifar10: 'vit_small' } as const;

describe('recipes in configs/', () => {
  for (const method of BUILT_IN_METHODS) {
    const families = getMethodClass(method).defaultBackbone.startsWith('vit') ? VIT_FAMILIES : FAMILIES;
    for (const [dataset, backbone] of Object.entries(families)) {
      const file = `${method}-${dataset}.yaml`;
      it(`${file}: exists, trains ${method} on ${dataset} with ${backbone}, and validates`, () => {
        const path = join(CONFIGS, file);
        assert.ok(existsSync(path), `${path} missing`);
        const recipe = readConfigFile(path);
        assert.equal(recipe.method, method);
        assert.equal(recipe.dataset, dataset);
        assert.equal(recipe.backbone, backbone);
        const config = buildConfig(recipe);
        resolveMethodArgs(method, config.methodArgs); // every method argument is one the method has, in range (booleans true or false)
      });
    }
  }

  it('on/off arguments are YAML booleans; supcon keeps L_in, the variant its results were measured with', () => {
    const args = (file: string) => {
      const config = buildConfig(readConfigFile(join(CONFIGS, file)));
      return resolveMethodArgs(config.method, config.methodArgs);
    };
    assert.equal(args('dino-fashion-mnist.yaml').useBnInHead, true);
    assert.equal(args('mocov2plus-fashion-mnist.yaml').useBnInProjector, true);
    assert.equal(args('ressl-fashion-mnist.yaml').useBnInProjector, true);
    assert.equal(args('mae-cifar10.yaml').normPixLoss, true);
    assert.equal(args('vibcreg-cifar10.yaml').iternorm, true);
    for (const dataset of ['fashion-mnist', 'cifar10']) assert.equal(args(`supcon-${dataset}.yaml`).variant, 'in', dataset);
  });
});

describe('the default batch size on a world size that does not divide it', function () {
  this.timeout(60_000);
  // An invalid rendezvous fails right after the batch size is resolved, before any worker starts.
  const bad = ['--rendezvous', 'nope://x'];

  it('is rounded down to a multiple of the ranks, said once', () => {
    const r = runCli(['--devices', '3', ...bad]);
    assert.equal(r.status, 2, r.stderr);
    const notes = r.stderr.split('\n').filter((l) => l.startsWith('ssl-train: note:'));
    assert.deepEqual(notes, ['ssl-train: note: the default batch size 256 is not a multiple of 3 ranks; using 255 (the lr scales with it)']);
  });

  it('is left alone when it divides, or when the user gave the batch size', () => {
    for (const args of [
      ['--devices', '2'],
      ['--devices', '3', '--batch-size', '256'],
    ]) {
      const r = runCli([...args, ...bad]);
      assert.equal(r.status, 2, r.stderr);
      assert.doesNotMatch(r.stderr, /note:/, args.join(' '));
      assert.match(r.stderr, /--rendezvous/);
    }
  });
});
