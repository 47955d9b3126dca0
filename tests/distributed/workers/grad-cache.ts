import 'reflect-metadata';
/**
 * One rank of a short training run through `runTraining` with DDP (registered under another
 * name, to keep hold of it) over an injected, instrumented process group, with or without the
 * gradient cache. Rank 0 reports
 * the final model (from last.ckpt) and every rank its collective counts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { container } from 'tsyringe';
import { buildConfig } from '../../../src/experiment/config.js';
import { runTraining } from '../../../src/experiment/train.js';
import { tf } from '../../../src/core/tf.js';
import { DdpStrategy } from '../../../src/distributed/ddp.js';
import { SingleProcessGroup, type ProcessGroup } from '../../../src/core/process-group.js';
import { loadCheckpoint } from '../../../src/trainer/checkpoint.js';
import { PROCESS_GROUP, registerStrategy } from '../../../src/trainer/strategy.js';
import { joinGroup, readArgs, run, type BaseSpec } from './common.js';

interface Spec extends BaseSpec {
  method: string;
  chunk?: number;
  batchSize: number;
  steps: number;
  methodArgs: Record<string, number>;
}

type Op = 'allReduce' | 'allGather' | 'reduceScatter' | 'broadcast' | 'barrier';

/** Forwards to `inner`, counting calls per collective. */
function counting(inner: ProcessGroup, counts: Record<Op, number>): ProcessGroup {
  const count = <T>(op: Op, f: () => T): T => {
    counts[op]++;
    return f();
  };
  return {
    rank: inner.rank,
    worldSize: inner.worldSize,
    allReduce: (data, op) => count('allReduce', () => inner.allReduce(data, op)),
    allGather: (data) => count('allGather', () => inner.allGather(data)),
    reduceScatter: (data) => count('reduceScatter', () => inner.reduceScatter(data)),
    broadcast: (data, root) => count('broadcast', () => inner.broadcast(data, root)),
    barrier: () => count('barrier', () => inner.barrier()),
    close: () => inner.close(),
  };
}

run(async () => {
  const { spec, rank } = readArgs<Spec>();
  const inner = spec.worldSize > 1 ? await joinGroup(spec, rank) : new SingleProcessGroup();
  const counts: Record<Op, number> = { allReduce: 0, allGather: 0, reduceScatter: 0, broadcast: 0, barrier: 0 };
  const scope = container.createChildContainer();
  scope.registerInstance(PROCESS_GROUP, counting(inner, counts));
  let strategy: DdpStrategy | undefined;
  registerStrategy('counted-ddp', { useFactory: (c) => (strategy = c.resolve(DdpStrategy)) }, scope);
  const runDir = join(spec.dir, `run-${spec.chunk ?? 'plain'}`);
  const config = buildConfig({
    method: spec.method,
    backbone: 'mlp',
    norm: 'group',
    dataset: 'synthetic',
    imageSize: 16,
    syntheticSize: 192,
    batchSize: spec.batchSize,
    epochs: 2,
    maxSteps: spec.steps,
    warmupEpochs: 0,
    workers: 0,
    valEvery: 0,
    backend: 'cpu',
    runDir,
    strategy: 'counted-ddp',
    gradCacheChunk: spec.chunk,
    methodArgs: spec.methodArgs,
  });
  // Count only the training steps: setup broadcasts happen before.
  await runTraining(config, { container: scope, callbacks: [] });
  inner.close();
  // The model goes to a file: a multi-megabyte stdout line can be cut off at process.exit.
  let modelFile: string | undefined;
  let trainMetrics: Record<string, number> | undefined;
  if (rank === 0) {
    const lines = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
    const logged = JSON.parse(lines[lines.length - 1]) as Record<string, number>;
    trainMetrics = Object.fromEntries(['loss', 'class_loss', 'acc1', 'acc5', 'embedding_std'].map((k) => [k, logged[`train/${k}`]]));
    const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
    const model = Object.fromEntries(
      Object.entries(ckpt.tensors)
        .filter(([name]) => name.startsWith('model/'))
        .map(([name, t]) => [name, Array.from(t.dataSync())]),
    );
    tf.dispose(Object.values(ckpt.tensors));
    modelFile = join(spec.dir, 'model.json');
    writeFileSync(modelFile, JSON.stringify(model));
  }
  return { rank, counts, gradientAllReduces: strategy?.stats.gradientAllReduces, modelFile, trainMetrics };
});
