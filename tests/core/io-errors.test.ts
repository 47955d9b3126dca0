/**
 * The pieces of the one-line I/O errors, in process: Node's errors become an `IoFailure`
 * naming the file and the error in words, the CLI prints it without a stack (with one under
 * `--debug`) while a bug keeps its stack, `writeFileAtomic` leaves no temporary file, and
 * `--max-bad-samples` parses a count or a percentage.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { reportError } from '../../src/cli/main.js';
import { asIoFailure, IoFailure, unwrappedIoFailure, UserError } from '../../src/core/errors.js';
import { badSamplesAllowed, parseBadSamplesLimit } from '../../src/data/bad-samples.js';
import { writeFileAtomic } from '../../src/trainer/files.js';
import { tempDir } from '../helpers/run.js';

/** What `action` writes to stderr, and its result. */
function captureStderr<T>(action: () => T): { result: T; text: string } {
  const write = process.stderr.write;
  let text = '';
  process.stderr.write = ((chunk: string | Uint8Array) => {
    text += String(chunk);
    return true;
  }) as typeof process.stderr.write;
  try {
    return { result: action(), text };
  } finally {
    process.stderr.write = write;
  }
}

function nodeError(action: () => unknown): Error {
  try {
    action();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a failure');
}

describe('I/O errors: one line', () => {
  let dir: string;
  beforeEach(() => (dir = tempDir('ssl-zoo-io-unit-')));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("Node's error of a path becomes an IoFailure naming the file, the operation and the error in words", () => {
    const missing = join(dir, 'missing', 'x.json');
    const unwrapped = unwrappedIoFailure(nodeError(() => readFileSync(missing)));
    assert.ok(unwrapped instanceof IoFailure);
    assert.equal(unwrapped.message, `no such file or directory while opening ${missing}`);
    assert.equal(unwrapped.exitCode, 1);
    const wrapped = asIoFailure(
      nodeError(() => writeFileSync(missing, 'x')),
      missing,
      'writing',
      2,
    ) as IoFailure;
    assert.equal(wrapped.message, `no such file or directory while writing ${missing}`);
    assert.equal(wrapped.exitCode, 2);
    assert.equal(wrapped.withNote('the last good checkpoint is c (step 3)').message, `${wrapped.message}; the last good checkpoint is c (step 3)`);
  });

  it('a bug is not an I/O error: it is returned as it is', () => {
    const bug = new TypeError('x is undefined');
    assert.equal(unwrappedIoFailure(bug), undefined);
    assert.equal(asIoFailure(bug, 'p', 'writing'), bug);
    const badFd = Object.assign(new Error('EBADF: bad file descriptor, write'), { code: 'EBADF', syscall: 'write' });
    assert.equal(unwrappedIoFailure(badFd), undefined, 'a bad file descriptor is a bug of ours');
  });

  it('the CLI prints an I/O error as one line (exit 1 or 2), with its stack only under --debug; a bug always with its stack', () => {
    const failure = new IoFailure('runs/x/checkpoints/last.ckpt', 'writing', 'ENOSPC', 'no space left on device');
    const plain = captureStderr(() => reportError(failure, false));
    assert.equal(plain.result, 1);
    assert.equal(plain.text, 'ssl-train: error: no space left on device while writing runs/x/checkpoints/last.ckpt\n');
    const debug = captureStderr(() => reportError(failure, true));
    assert.match(debug.text, /^ssl-train: error: no space left on device while writing runs\/x\/checkpoints\/last\.ckpt\nIoFailure: .*\n\s+at /);
    const user = captureStderr(() => reportError(new UserError('--x: bad'), false));
    assert.deepEqual([user.result, user.text], [2, 'ssl-train: error: --x: bad\n']);
    const node = captureStderr(() =>
      reportError(
        nodeError(() => readFileSync(join(dir, 'gone'))),
        false,
      ),
    );
    assert.deepEqual([node.result, node.text], [1, `ssl-train: error: no such file or directory while opening ${join(dir, 'gone')}\n`]);
    const bug = captureStderr(() => reportError(new TypeError('x is undefined'), false));
    assert.equal(bug.result, 1);
    assert.match(bug.text, /^ssl-train: internal error: TypeError: x is undefined\n\s+at /);
  });

  it('writeFileAtomic: a failed write throws an IoFailure naming the file and leaves the old file as it was', () => {
    const target = join(dir, 'last.ckpt');
    writeFileAtomic(target, ['good']);
    // A folder where the temporary file would go: opening it for writing fails (EISDIR).
    mkdirSync(`${target}.tmp-${process.pid}`);
    const error = nodeError(() => writeFileAtomic(target, ['new']));
    assert.ok(error instanceof IoFailure, String(error));
    assert.equal(error.message, `illegal operation on a directory while writing ${target}`);
    assert.equal(readFileSync(target, 'utf8'), 'good');
  });

  it('--max-bad-samples: a count or a percentage of the training set, rounded up', () => {
    assert.equal(badSamplesAllowed(parseBadSamplesLimit('25'), 1000), 25);
    assert.equal(badSamplesAllowed(parseBadSamplesLimit(7), 1000), 7);
    assert.equal(badSamplesAllowed(parseBadSamplesLimit('1%'), 1000), 10);
    assert.equal(badSamplesAllowed(parseBadSamplesLimit('0.5%'), 1001), 6);
    assert.equal(badSamplesAllowed(parseBadSamplesLimit('1%'), 40), 1);
    assert.equal(badSamplesAllowed(parseBadSamplesLimit('0'), 40), 0);
    for (const bad of ['lots', '-1', '1.5', '101%', '%', 1.5, -2, true]) {
      assert.throws(() => parseBadSamplesLimit(bad), /--max-bad-samples: .* is not allowed; expected an integer >= 0/, String(bad));
    }
  });
});
