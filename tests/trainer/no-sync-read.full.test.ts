/**
 * No synchronous read of the device during training, on the WebGPU engine (SwiftShader), for
 * every built-in method but the fast tier's two (no-sync-read.test.ts), each on the smallest
 * settings it accepts (tests/helpers/no-sync-read.ts says how it checks). MMCR's nuclear norm
 * (a kernel per engine: src/core/kernels/webgpu/nuclear-norm.ts) and VICRegL's feature
 * matching (on the device) used to read it.
 */
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { describeNoSyncReads, FAST_TIER_METHODS } from '../helpers/no-sync-read.js';

describeNoSyncReads(
  'no synchronous read during training (WebGPU engine): every other built-in method',
  BUILT_IN_METHODS.filter((method) => !FAST_TIER_METHODS.includes(method)),
);
