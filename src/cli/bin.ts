#!/usr/bin/env node
import { tuneGarbageCollector } from '../core/gc-tuning.js';

// Before the program's modules load (hence the dynamic import): see tuneGarbageCollector.
tuneGarbageCollector();
const { main } = await import('./main.js');
process.exitCode = await main(process.argv.slice(2));
