/**
 * tfjs's WebGPU backend, with the one thing it lacks in Node: a synchronous read.
 *
 * In a browser, tfjs reads a GPU tensor synchronously through an OffscreenCanvas; Node has
 * none, so `dataSync()` throws. Training steps never read synchronously (metrics, state and
 * the non-finite check stay on the device), but the collectives of a multi-rank run do, by
 * design: a loss's gather and SyncBatchNorm run inside tfjs's synchronous tape (forward and
 * gradient functions), and Gloo's calls block on host memory.
 *
 * How it reads: the tensor's buffer is copied to a staging buffer and mapped, as tfjs's
 * asynchronous `read` does; then, instead of returning to the event loop, the read drives
 * Dawn itself. dawn.node completes a map inside `wgpuInstanceProcessEvents`, which its
 * AsyncRunner schedules with the global `setImmediate` (looked up at each call); the
 * callbacks it hands to `setImmediate` are captured here and called directly until the map
 * completes. This depends on dawn.node's AsyncRunner, which is why the `webgpu` package is
 * pinned; tests/core/webgpu.test.ts reads synchronously and fails if it changes.
 */
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { TrainingFailure } from './errors.js';
import { tf } from './tf.js';

/**
 * The last "process events" callback Dawn handed to `setImmediate` (any one of them processes
 * all of the instance's events; only the last is kept, as Dawn schedules one per event-loop
 * turn while work is pending).
 */
let dawnPump: (() => void) | undefined;
let pumpCaptureInstalled = false;

/**
 * Wraps the global `setImmediate` so that dawn.node's event-processing callbacks (native
 * functions without arguments) are also kept here; they still run from the event loop too.
 */
export function installDawnPumpCapture(): void {
  if (pumpCaptureInstalled) return;
  pumpCaptureInstalled = true;
  const original = globalThis.setImmediate;
  const wrapped = function (this: unknown, callback: (...args: unknown[]) => void, ...args: unknown[]) {
    if (typeof callback === 'function' && args.length === 0 && callback.length === 0 && isNative(callback)) dawnPump = callback as () => void;
    return original(callback, ...args);
  };
  globalThis.setImmediate = Object.assign(wrapped, original) as typeof setImmediate;
}

function isNative(fn: (...args: never[]) => unknown): boolean {
  return /\{\s*\[native code\]\s*\}$/.test(Function.prototype.toString.call(fn));
}

/** How long a synchronous read waits for the device before it fails the run. */
const READ_TIMEOUT_MS = 600_000;

/** Maps `buffer` for reading and drives Dawn until it is mapped; returns a copy of its bytes. */
function mapForReadSync(buffer: GPUBuffer): ArrayBuffer {
  let failed: unknown;
  buffer.mapAsync(GPUMapMode.READ).catch((e: unknown) => (failed = e));
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const start = Date.now();
  let waitMs = 0.01;
  // A function, not the property: TypeScript would narrow the property across the pumps.
  const state = (): GPUBufferMapState => buffer.mapState;
  while (state() !== 'mapped') {
    dawnPump?.();
    if (state() === 'mapped') break;
    if (failed !== undefined || state() === 'unmapped') throw new TrainingFailure(`reading a GPU tensor failed: ${String(failed ?? 'the map was cancelled')}`);
    if (Date.now() - start > READ_TIMEOUT_MS)
      throw new TrainingFailure(`reading a GPU tensor did not complete in ${READ_TIMEOUT_MS / 1000} s: the device is lost or hung`);
    Atomics.wait(sleeper, 0, 0, waitMs);
    waitMs = Math.min(waitMs * 2, 1);
  }
  const bytes = buffer.getMappedRange().slice(0);
  buffer.unmap();
  return bytes;
}

interface TensorRecord {
  values?: tf.backend_util.BackendValues | null;
  dtype: tf.DataType;
  resource?: GPUBuffer;
}

/** The backend's internals a synchronous read needs (public in its typings, named here). */
interface BackendInternals {
  tensorMap: { get(dataId: object): TensorRecord };
  bufferManager: { acquireBuffer(size: number, usage: number): GPUBuffer; releaseBuffer(buffer: GPUBuffer): void };
  ensureCommandEncoderReady(): void;
  endComputePassEncoder(): void;
  submitQueue(): void;
  commandEncoder: GPUCommandEncoder;
}

/**
 * Gives `backend` a working `readSync` (see the module comment): values already on the CPU
 * are returned as they are; a GPU buffer is staged, mapped and copied, and cached on the
 * tensor as tfjs's asynchronous read does.
 */
export function enableSyncRead(backend: WebGPUBackend): void {
  const self = backend as unknown as BackendInternals;
  backend.readSync = (dataId: object): tf.backend_util.BackendValues => {
    const record = self.tensorMap.get(dataId);
    if (record.values != null || record.dtype === 'string') return record.values!;
    if (record.dtype === 'complex64' || !record.resource) throw new Error(`webgpu readSync: ${record.dtype} tensors without a buffer are not supported`);
    const size = record.resource.size;
    const staging = self.bufferManager.acquireBuffer(size, GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ);
    self.ensureCommandEncoderReady();
    self.endComputePassEncoder();
    self.commandEncoder.copyBufferToBuffer(record.resource, 0, staging, 0, size);
    self.submitQueue();
    const bytes = mapForReadSync(staging);
    self.bufferManager.releaseBuffer(staging);
    record.values = tf.util.convertBackendValuesAndArrayBuffer(bytes, record.dtype);
    return record.values;
  };
}
