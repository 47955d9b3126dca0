/** Checkpoint comparison for the end-to-end training tests (one process vs several ranks). */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';

/** The model tensors (`model/...`) of `runDir/checkpoints/last.ckpt`, as arrays. */
export function checkpointTensors(runDir: string): Record<string, Float32Array> {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
  const out: Record<string, Float32Array> = {};
  for (const [name, t] of Object.entries(ckpt.tensors)) if (name.startsWith('model/')) out[name] = Float32Array.from(t.dataSync() as Float32Array);
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

/** Largest per-tensor max|a - b| / max|b| over two checkpoints' models (same tensor names required). */
export function worstRelative(a: Record<string, Float32Array>, b: Record<string, Float32Array>): number {
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort());
  let worst = 0;
  for (const [name, ref] of Object.entries(b)) {
    let diff = 0;
    let scale = 0;
    for (let i = 0; i < ref.length; i++) {
      diff = Math.max(diff, Math.abs(a[name][i] - ref[i]));
      scale = Math.max(scale, Math.abs(ref[i]));
    }
    worst = Math.max(worst, scale === 0 ? diff : diff / scale);
  }
  return worst;
}
