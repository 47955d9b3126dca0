/**
 * No synchronous read of the device during training, on the WebGPU engine (SwiftShader):
 * two methods with tiny MLPs here (tests/helpers/no-sync-read.ts says how it checks), every
 * other built-in method in the full tier (no-sync-read.full.test.ts).
 */
import { describeNoSyncReads, FAST_TIER_METHODS } from '../helpers/no-sync-read.js';

describeNoSyncReads('no synchronous read during training (WebGPU engine)', FAST_TIER_METHODS);
