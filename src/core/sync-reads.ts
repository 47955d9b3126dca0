/**
 * Refusing synchronous reads of the device (DESIGN.md, "Engines, and why": a training step
 * never reads the device synchronously; WebGPU in Node cannot, and on a GPU a synchronous read
 * stalls its queue). `ssl-train verify --engine-against` runs each step of a GPU engine with
 * them refused, so a method whose step reads synchronously fails there, naming the caller; the
 * tests wrap whole training runs with it.
 */
import { tf } from './tf.js';

/**
 * Makes every synchronous read of the device (the current backend's `readSync`, `Tensor.dataSync`
 * and `arraySync`) throw `a synchronous read of the device (NAME) inside a training step`, its
 * stack starting at the caller, and push that message with the stack onto `calls`, until the
 * returned function puts them back. Only for an engine whose reads are asynchronous: the cpu
 * backend's own `read` calls its `readSync`.
 */
export function forbidSyncReads(calls: string[] = []): () => void {
  const forbid = (target: Record<string, unknown>, name: string) => {
    const own = Object.prototype.hasOwnProperty.call(target, name);
    const original = target[name];
    const refuse = () => {
      const error = new Error(`a synchronous read of the device (${name}) inside a training step`);
      Error.captureStackTrace(error, refuse);
      calls.push(error.stack ?? error.message);
      throw error;
    };
    target[name] = refuse;
    return () => {
      if (own) target[name] = original;
      else delete target[name];
    };
  };
  const proto = tf.Tensor.prototype as unknown as Record<string, unknown>;
  const undo = [forbid(tf.backend() as unknown as Record<string, unknown>, 'readSync'), forbid(proto, 'dataSync'), forbid(proto, 'arraySync')];
  return () => undo.forEach((u) => u());
}
