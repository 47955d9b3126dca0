/**
 * Host values sent between `verify`'s ranks: a JSON header and typed arrays packed into one
 * float32 buffer bit for bit (int32 arrays are reinterpreted, not converted; a broadcast copies
 * bytes), so they travel with the process group's one broadcast.
 */
import type { ProcessGroup } from '../core/process-group.js';

/** A typed array a message carries. */
export type MessageArray = Float32Array | Int32Array;

/** The wire header: the caller's header and each array's dtype and length. */
interface WireHeader {
  header: unknown;
  arrays: Array<['float32' | 'int32', number]>;
}

/**
 * `header` (JSON-serialisable) and `arrays` in one buffer: word 0 the header's byte length
 * (as uint32 bits), then the UTF-8 JSON padded to 4 bytes, then the arrays one after another.
 */
export function packMessage(header: unknown, arrays: MessageArray[]): Float32Array {
  const wire: WireHeader = { header, arrays: arrays.map((a) => [a instanceof Int32Array ? 'int32' : 'float32', a.length]) };
  const json = new TextEncoder().encode(JSON.stringify(wire));
  const headerWords = Math.ceil(json.length / 4);
  const words = 1 + headerWords + arrays.reduce((n, a) => n + a.length, 0);
  const buffer = new ArrayBuffer(words * 4);
  new Uint32Array(buffer, 0, 1)[0] = json.length;
  new Uint8Array(buffer, 4, json.length).set(json);
  let at = 1 + headerWords;
  for (const a of arrays) {
    (a instanceof Int32Array ? new Int32Array(buffer, at * 4, a.length) : new Float32Array(buffer, at * 4, a.length)).set(a);
    at += a.length;
  }
  return new Float32Array(buffer);
}

/** The header and arrays of a {@link packMessage} buffer (the arrays are views into it). */
export function unpackMessage<H>(message: Float32Array): { header: H; arrays: MessageArray[] } {
  const { buffer, byteOffset } = message;
  const bytes = new Uint32Array(buffer, byteOffset, 1)[0]!;
  const wire = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, byteOffset + 4, bytes))) as WireHeader;
  let at = byteOffset + 4 + Math.ceil(bytes / 4) * 4;
  const arrays = wire.arrays.map(([dtype, length]) => {
    const view = dtype === 'int32' ? new Int32Array(buffer, at, length) : new Float32Array(buffer, at, length);
    at += length * 4;
    return view;
  });
  return { header: wire.header as H, arrays };
}

/**
 * Rank `owner`'s `message` on every rank: one broadcast of its length (as uint32 bits), one of
 * the buffer. Every rank calls it; only the owner passes the message.
 */
export function broadcastMessage(message: Float32Array | undefined, owner: number, group: ProcessGroup): Float32Array {
  if (group.worldSize === 1) return message!;
  const length = new Float32Array(1);
  if (group.rank === owner) new Uint32Array(length.buffer)[0] = message!.length;
  group.broadcast(length, owner);
  const out = group.rank === owner ? message! : new Float32Array(new Uint32Array(length.buffer)[0]!);
  group.broadcast(out, owner);
  return out;
}
