#!/usr/bin/env node
// Checks two rules of the source layout and exits 1 when either is broken:
// 1. imports between the folders of src/ point one way: the folder graph has no cycle;
// 2. no file in src/ is over 400 lines unless its first line gives the reason,
//    as `// Over 400 lines: <reason>`.
// Usage: node scripts/check-structure.mjs [--graph]  (--graph prints the folder graph)
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');
const MAX_LINES = 400;

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : path.endsWith('.ts') ? [path] : [];
  });
}

/** The top folder of `path` under src/ ('.' for files directly in src/). */
function folder(path) {
  const parts = relative(src, path).split('/');
  return parts.length > 1 ? parts[0] : '.';
}

const edges = new Map(); // folder -> Map(folder -> example "file -> import")
const problems = [];
for (const file of files(src)) {
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n');
  const count = lines.length - (lines.at(-1) === '' ? 1 : 0);
  if (count > MAX_LINES && !/^\/\/ Over 400 lines: \S/.test(lines[0])) {
    problems.push(`${relative(root, file)}: ${count} lines, and its first line does not give the reason (// Over 400 lines: ...)`);
  }
  const from = folder(file);
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/g)) {
    const target = resolve(dirname(file), m[1]);
    if (!target.startsWith(src)) continue;
    const to = folder(target);
    if (to === from || from === '.') continue;
    if (!edges.has(from)) edges.set(from, new Map());
    if (!edges.get(from).has(to)) edges.get(from).set(to, `${relative(root, file)} imports ${m[1]}`);
  }
}

// Cycles: depth-first search over the folder graph, reporting each back edge's cycle once.
const state = new Map();
const stack = [];
const cycles = new Set();
function visit(node) {
  state.set(node, 'open');
  stack.push(node);
  for (const next of edges.get(node)?.keys() ?? []) {
    if (state.get(next) === 'open') {
      const cycle = [...stack.slice(stack.indexOf(next)), next];
      const key = [...cycle.slice(0, -1)].sort().join(',');
      if (!cycles.has(key)) {
        cycles.add(key);
        const why = cycle.slice(0, -1).map((a, i) => `    ${edges.get(a).get(cycle[i + 1])}`);
        problems.push(`import cycle between src/ folders: ${cycle.join(' -> ')}\n${why.join('\n')}`);
      }
    } else if (!state.has(next)) visit(next);
  }
  stack.pop();
  state.set(node, 'done');
}
for (const node of [...edges.keys()].sort()) if (!state.has(node)) visit(node);

if (process.argv.includes('--graph')) {
  for (const [from, tos] of [...edges].sort()) console.log(`${from} -> ${[...tos.keys()].sort().join(', ')}`);
}
if (problems.length > 0) {
  console.error(problems.join('\n'));
  console.error(`check-structure: ${problems.length} problem(s)`);
  process.exit(1);
}
console.log('check-structure: no import cycle between src/ folders; no file over 400 lines without a reason');
