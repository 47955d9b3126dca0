/**
 * The README is a front page and the rest of the documentation lives in docs/: the README
 * stays short, names every registered method, keeps its results table to short cells, and
 * every page of docs/ is reachable from it through links that resolve (files and headings).
 */
import { strict as assert } from 'node:assert';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const README = join(ROOT, 'README.md');
const DOCS = join(ROOT, 'docs');

/** GitHub's anchors of a Markdown file's headings (outside code blocks), duplicates numbered. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let code = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('```')) code = !code;
    const m = code ? null : /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const slug = m[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

/** The relative links of a Markdown file (outside code blocks): [target file, anchor]. */
function links(file: string): { target: string; anchor: string; text: string }[] {
  const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1])
    .filter((t) => !/^[a-z]+:/.test(t))
    .map((t) => {
      const [path, anchor = ''] = t.split('#');
      return { target: path ? normalize(join(dirname(file), path)) : file, anchor, text: t };
    });
}

const pages = [
  README,
  ...readdirSync(DOCS)
    .filter((f) => f.endsWith('.md'))
    .map((f) => join(DOCS, f)),
];

describe('README and docs/', () => {
  it('the README is a front page: at most 300 lines', () => {
    const lines = readFileSync(README, 'utf8').split('\n').length;
    assert.ok(lines <= 300, `README.md has ${lines} lines; move the details to a page of docs/ and link it`);
  });

  it('every relative link of README.md and docs/*.md names a file that exists, and a heading of it', () => {
    const broken: string[] = [];
    for (const page of pages)
      for (const { target, anchor, text } of links(page)) {
        const where = relative(ROOT, page);
        if (!existsSync(target)) broken.push(`${where}: ${text} (no such file)`);
        else if (anchor && target.endsWith('.md') && !anchors(target).has(anchor)) broken.push(`${where}: ${text} (no such heading)`);
      }
    assert.deepEqual(broken, []);
  });

  it('every page of docs/ is reachable from the README', () => {
    const reached = new Set([README]);
    const todo = [README];
    while (todo.length) {
      for (const { target } of links(todo.pop()!))
        if (target.endsWith('.md') && existsSync(target) && !reached.has(target)) {
          reached.add(target);
          todo.push(target);
        }
    }
    assert.deepEqual(
      pages.filter((p) => !reached.has(p)).map((p) => relative(ROOT, p)),
      [],
    );
  });

  it('the README counts and lists every registered method, in its methods table and its results table', () => {
    const text = readFileSync(README, 'utf8');
    const count = /a zoo of (\d+) methods/.exec(text);
    assert.ok(count, 'the first paragraph says how many methods there are');
    assert.equal(Number(count[1]), BUILT_IN_METHODS.length);
    const results = text.slice(text.indexOf('<!-- zoo-table:start -->'), text.indexOf('<!-- zoo-table:end -->'));
    for (const name of BUILT_IN_METHODS) {
      assert.match(text, new RegExp(`^\\| \`${name}\` \\|`, 'm'), `${name} has a row in the methods table`);
      const measured = new RegExp(`^\\| ${name} \\|`, 'm').test(results);
      const notYet = new RegExp(`^Not yet measured with the current recipe: .*\\b${name}\\b`, 'm').test(results);
      assert.ok(measured || notYet, `${name} has a row in the results table, or is listed as not measured`);
    }
  });

  it("the README's results table has short cells (the notes are in docs/results.md)", () => {
    const text = readFileSync(README, 'utf8');
    const table = text.slice(text.indexOf('<!-- zoo-table:start -->'), text.indexOf('<!-- zoo-table:end -->'));
    const long = table
      .split('\n')
      .filter((l) => l.startsWith('|'))
      .flatMap((l) => l.split('|').map((c) => c.trim()))
      .filter((c) => c.length > 40);
    assert.deepEqual(long, []);
  });
});
