/**
 * Adapters with one name (identical GPUs): parsing Mesa's device-select layer's list, mapping
 * Dawn's adapters to PCI tags, the per-rank environment and the refusals, on fake listings of
 * two NVIDIA GPUs; and, on two copies of SwiftShader, the real layer and Dawn in child processes.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { checkGpuAdapters, checkRankAdapters, eligibleAdapters, listDeviceSelectLayer, listGpuAdapters } from '../../src/core/webgpu.js';
import { adapterOpening, applyEnv, checkIsolated, isolationEnv, parseDeviceSelectList, type LayerDevice } from '../../src/core/webgpu-select.js';
import { runCli, SMOKE_FLAGS } from '../helpers/run.js';
import { twoSwiftShaderIcds } from '../helpers/webgpu.js';

const H100 = 'NVIDIA H100 80GB HBM3';
const SWIFTSHADER = 'SwiftShader Device (Subzero)';

/** What `MESA_VK_DEVICE_SELECT=list` prints (Mesa 22.3's format) on a node with two H100s and SwiftShader. */
const TWO_H100_LIST = [
  'error: XDG_RUNTIME_DIR is invalid or not set in the environment.',
  'selectable devices:',
  `  GPU 0: 10de:2330 "${H100}" discrete GPU 0000:18:00.0`,
  `  GPU 1: 10de:2330 "${H100}" discrete GPU 0000:2a:00.0`,
  `  GPU 2: 1ae0:c0de "${SWIFTSHADER}" CPU 0000:00:00.0`,
  '',
].join('\n');

/** Dawn's adapters on that node. */
const dawnAdapters = () => [
  { name: H100, api: 'vulkan', software: false },
  { name: H100, api: 'vulkan', software: false },
  { name: SWIFTSHADER, api: 'vulkan', software: true },
];

/** The same node when the driver gives no bus info: the layer prints no addresses. */
const NO_BUS_INFO_LIST = TWO_H100_LIST.replace(/ 0000:[0-9a-f:.]+/g, '');

describe("core: identical GPUs through Mesa's device-select layer (fake listings)", () => {
  it('parses the layer list: ids, names, types and PCI tags (none for a 0000:00:00.0 address); undefined without the layer', () => {
    const devices = parseDeviceSelectList(TWO_H100_LIST);
    assert.deepEqual(devices, [
      { index: 0, vendorId: '10de', deviceId: '2330', name: H100, type: 'discrete GPU', pciTag: 'pci-0000_18_00_0' },
      { index: 1, vendorId: '10de', deviceId: '2330', name: H100, type: 'discrete GPU', pciTag: 'pci-0000_2a_00_0' },
      { index: 2, vendorId: '1ae0', deviceId: 'c0de', name: SWIFTSHADER, type: 'CPU' },
    ]);
    assert.equal(
      parseDeviceSelectList(NO_BUS_INFO_LIST)?.every((d) => d.pciTag === undefined),
      true,
    );
    assert.equal(parseDeviceSelectList('ssl-zoo-adapters:{"adapters":[]}\n'), undefined);
  });

  it('maps the k-th Dawn adapter of a name to the k-th layer device of that name; a unique name opens by name', () => {
    const layer = parseDeviceSelectList(TWO_H100_LIST);
    const adapters = dawnAdapters();
    const first = adapterOpening(adapters, 0, layer, '--gpus 2');
    const second = adapterOpening(adapters, 1, layer, '--gpus 2');
    assert.equal(first.how === 'isolated' && first.pciTag, 'pci-0000_18_00_0');
    assert.equal(second.how === 'isolated' && second.pciTag, 'pci-0000_2a_00_0');
    assert.deepEqual(adapterOpening(adapters, 2, layer, '--gpus 2'), { how: 'by-name' });
  });

  it("SSL_ZOO_VISIBLE_ADAPTERS indexes Dawn's list: '1' gives rank 0 the second H100's PCI tag", () => {
    const adapters = dawnAdapters();
    const [adapter] = eligibleAdapters(adapters, { allowSoftware: false }, { SSL_ZOO_VISIBLE_ADAPTERS: '1' });
    const opening = adapterOpening(adapters, adapters.indexOf(adapter!), parseDeviceSelectList(TWO_H100_LIST), '--gpus 1');
    assert.equal(opening.how === 'isolated' && opening.pciTag, 'pci-0000_2a_00_0');
  });

  it('the per-rank environment: DRI_PRIME=<tag>, FORCE_DEFAULT_DEVICE=1, and a user MESA_VK_DEVICE_SELECT removed', () => {
    const env: NodeJS.ProcessEnv = { MESA_VK_DEVICE_SELECT: '10de:2330', PATH: '/bin' };
    applyEnv(isolationEnv('pci-0000_2a_00_0'), env);
    assert.deepEqual(env, { PATH: '/bin', DRI_PRIME: 'pci-0000_2a_00_0', MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: '1' });
  });

  it('identical hardware adapters without the layer: --gpus 2 is refused before spawning, in one line; --gpus 1 opens the first by name', () => {
    const listing = { adapters: dawnAdapters(), loaderMissing: false };
    const noLayer = () => undefined;
    assert.throws(
      () => checkRankAdapters(listing, 2, { allowSoftware: false, flag: '--gpus 2' }, noLayer, {}),
      new RegExp(
        '^UserError: --gpus 2: Dawn opens adapters by name and this node has 2 named "NVIDIA H100 80GB HBM3" \\(adapters 0, 1 of Dawn\'s list\\): ' +
          "adapter 1 would be opened as adapter 0; Mesa's Vulkan device-select layer is not installed \\(or NODEVICE_SELECT disables it\\); " +
          'install mesa-vulkan-drivers \\(its Vulkan device-select layer tells them apart by PCI address\\), or use --gpus 1 per machine or container$',
      ),
    );
    assert.doesNotThrow(() => checkRankAdapters(listing, 1, { allowSoftware: false, flag: '--gpus 1' }, noLayer, {}));
    assert.deepEqual(adapterOpening(listing.adapters, 0, undefined, '--gpus 1'), { how: 'by-name' });
  });

  it('identical hardware adapters whose driver gives no PCI bus info, or a layer that lists another count: refused; with tags: accepted', () => {
    const listing = { adapters: dawnAdapters(), loaderMissing: false };
    const selection = { allowSoftware: false, flag: '--gpus 2' };
    assert.throws(
      () => checkRankAdapters(listing, 2, selection, () => parseDeviceSelectList(NO_BUS_INFO_LIST), {}),
      /^UserError: --gpus 2: .*adapter 1 would be opened as adapter 0; their Vulkan driver gives Mesa's device-select layer no PCI bus info; use --gpus 1 per machine or container$/,
    );
    const oneListed: LayerDevice[] = parseDeviceSelectList(TWO_H100_LIST)!.slice(1);
    assert.throws(() => checkRankAdapters(listing, 2, selection, () => oneListed, {}), /Mesa's device-select layer lists 1 devices of that name; use --gpus 1/);
    let layerCalls = 0;
    const layer = () => (layerCalls++, parseDeviceSelectList(TWO_H100_LIST));
    assert.doesNotThrow(() => checkRankAdapters(listing, 2, selection, layer, {}));
    assert.ok(layerCalls >= 1);
  });

  it('identical software adapters without PCI tags are shared (opened by name) when software adapters are allowed', () => {
    const adapters = [
      { name: SWIFTSHADER, api: 'vulkan', software: true },
      { name: SWIFTSHADER, api: 'vulkan', software: true },
    ];
    assert.deepEqual(adapterOpening(adapters, 1, undefined, '--gpus 2'), { how: 'shared-software' });
    assert.doesNotThrow(() => checkRankAdapters({ adapters, loaderMissing: false }, 2, { allowSoftware: true, shareAdapters: true }, () => undefined, {}));
  });

  it('a rank checks that Dawn, once isolated, lists exactly one adapter of the expected name', () => {
    const one = [{ name: H100, api: 'vulkan', software: false }];
    assert.doesNotThrow(() => checkIsolated(one, H100, 'pci-0000_2a_00_0', '--gpus 2'));
    assert.throws(
      () => checkIsolated(dawnAdapters(), H100, 'pci-0000_2a_00_0', '--gpus 2'),
      /^UserError: --gpus 2: with DRI_PRIME=pci-0000_2a_00_0 and MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1 Dawn lists 2 adapters named "NVIDIA H100 80GB HBM3", expected 1 /,
    );
  });
});

describe("core: two identical SwiftShader adapters, Mesa's device-select layer and Dawn (real processes)", () => {
  const require = createRequire(import.meta.url);
  let env: NodeJS.ProcessEnv;
  before(() => {
    env = { ...process.env, VK_ICD_FILENAMES: twoSwiftShaderIcds() };
    for (const key of ['MESA_VK_DEVICE_SELECT', 'MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE', 'DRI_PRIME', 'NODEVICE_SELECT']) delete env[key];
  });
  after(() => rmSync(dirname(env.VK_ICD_FILENAMES!.split(':')[0]!), { recursive: true, force: true }));

  /** The adapter names Dawn lists in a child that first applies isolationEnv(tag) to its own process.env (no tag: nothing). */
  function dawnNamesInChild(tag?: string): string[] {
    const script = `
      const [select, webgpu, tag] = process.argv.slice(1);
      const { applyEnv, isolationEnv } = await import(select);
      if (tag) applyEnv(isolationEnv(tag));
      const { create } = await import(webgpu);
      let text = '';
      try { await create(['adapter=ssl-zoo:none']).requestAdapter(); } catch (e) { text = String(e); }
      process.stdout.write('names:' + JSON.stringify([...text.matchAll(/name: '([^']*)'/g)].map((m) => m[1])) + '\\n');
    `;
    const select = new URL('../../src/core/webgpu-select.js', import.meta.url).href;
    const webgpu = new URL(`file://${require.resolve('webgpu')}`).href;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script, select, webgpu, tag ?? ''], { env, encoding: 'utf8' });
    const line = child.stdout.split('\n').find((l) => l.startsWith('names:'));
    assert.ok(line, `no listing from the child (status ${child.status}): ${child.stderr}`);
    return JSON.parse(line.slice('names:'.length)) as string[];
  }

  it('Dawn lists two identical adapters; the layer lists both, without PCI tags (SwiftShader has no bus info)', () => {
    assert.deepEqual(
      listGpuAdapters(env).adapters.map((a) => a.name),
      [SWIFTSHADER, SWIFTSHADER],
    );
    const devices = listDeviceSelectLayer(env);
    assert.ok(devices, "Mesa's device-select layer printed no list: is mesa-vulkan-drivers installed?");
    assert.deepEqual(
      devices.map((d) => [d.name, d.type, d.pciTag]),
      [
        [SWIFTSHADER, 'CPU', undefined],
        [SWIFTSHADER, 'CPU', undefined],
      ],
    );
  });

  it('with the layer disabled (NODEVICE_SELECT=1) there is no layer list: undefined, as without mesa-vulkan-drivers', () => {
    assert.equal(listDeviceSelectLayer({ ...env, NODEVICE_SELECT: '1' }), undefined);
    assert.equal(listGpuAdapters({ ...env, NODEVICE_SELECT: '1' }).adapters.length, 2);
  });

  it("the rank's environment, set through process.env in a child before Dawn's create(), leaves Dawn one adapter", () => {
    assert.deepEqual(dawnNamesInChild(), [SWIFTSHADER, SWIFTSHADER]);
    assert.deepEqual(dawnNamesInChild('pci-0000_00_00_0'), [SWIFTSHADER]);
  });

  it('MESA_VK_DEVICE_SELECT=list set by the user: listing the adapters fails in one line, not a JSON stack trace', () => {
    assert.throws(
      () => listGpuAdapters({ ...env, MESA_VK_DEVICE_SELECT: 'list' }),
      /^UserError: backend: "webgpu": listing the GPU adapters failed: MESA_VK_DEVICE_SELECT=list made Mesa's Vulkan device-select layer print its devices and end the process; unset MESA_VK_DEVICE_SELECT$/,
    );
  });

  it('ssl-train --backend webgpu with MESA_VK_DEVICE_SELECT=list: that line alone on stderr, exit 2', () => {
    const out = runCli([...SMOKE_FLAGS, '--backend', 'webgpu', '--max-steps', '1'], 60_000, { ...env, MESA_VK_DEVICE_SELECT: 'list' });
    assert.equal(out.status, 2, out.stderr);
    assert.match(
      out.stderr,
      /^ssl-train: error: backend: "webgpu": listing the GPU adapters failed: MESA_VK_DEVICE_SELECT=list made .*; unset MESA_VK_DEVICE_SELECT\n$/,
    );
  });

  it('--gpus 2 --allow-software-adapter on the two SwiftShaders passes the pre-spawn check (software adapters share)', () => {
    const saved = process.env.VK_ICD_FILENAMES;
    process.env.VK_ICD_FILENAMES = env.VK_ICD_FILENAMES;
    try {
      assert.doesNotThrow(() => checkGpuAdapters(2, { allowSoftware: true, shareAdapters: true, flag: '--gpus 2' }));
    } finally {
      if (saved === undefined) delete process.env.VK_ICD_FILENAMES;
      else process.env.VK_ICD_FILENAMES = saved;
    }
  });
});
