import { strict as assert } from 'node:assert';
import { failureReport, isSlurmTask, workerEnv } from '../../src/distributed/launcher.js';
import { runProcess, workerPath } from './helpers.js';

const MASTER = { MASTER_ADDR: 'node001', MASTER_PORT: '29500' };
/** What an sbatch batch script sees (`#SBATCH --ntasks=4 --nodes=2`): task 0 of the batch step, no srun step. */
const SBATCH = {
  SLURM_JOB_ID: '4242',
  SLURM_JOBID: '4242',
  SLURM_JOB_NAME: 'train.sh',
  SLURM_NTASKS: '4',
  SLURM_NPROCS: '4',
  SLURM_NNODES: '2',
  SLURM_PROCID: '0',
  SLURM_LOCALID: '0',
  SLURM_NODEID: '0',
  SLURM_TASKS_PER_NODE: '2(x2)',
  ...MASTER,
};
/** What `srun` (4 tasks on 2 nodes) sets for its task 3, on top of the job's variables. */
const SRUN_TASK_3 = {
  ...SBATCH,
  SLURM_STEP_ID: '0',
  SLURM_STEPID: '0',
  SLURM_STEP_NUM_TASKS: '4',
  SLURM_STEP_NUM_NODES: '2',
  SLURM_STEP_TASKS_PER_NODE: '2(x2)',
  SLURM_PROCID: '3',
  SLURM_LOCALID: '1',
  SLURM_NODEID: '1',
};

describe('launcher: which processes are workers', () => {
  it('an sbatch batch script with SLURM_NTASKS (and SLURM_PROCID 0) is not a worker: ssl-train launches its own', () => {
    assert.equal(isSlurmTask(SBATCH), false);
    assert.equal(workerEnv(SBATCH), undefined);
    // Slurm's batch step id, should a version export it.
    assert.equal(workerEnv({ ...SBATCH, SLURM_STEP_ID: '4294967291' }), undefined);
    // salloc's shell and `srun --pty bash` (a one-task step).
    assert.equal(workerEnv({ ...SBATCH, SLURM_JOB_NAME: 'interactive' }), undefined);
    assert.equal(workerEnv({ ...SBATCH, SLURM_JOB_NAME: 'bash', SLURM_STEP_ID: '0', SLURM_STEP_NUM_TASKS: '1', SLURM_NTASKS: '1' }), undefined);
  });

  it('a task of a multi-task srun step is a worker with the step geometry', () => {
    assert.equal(isSlurmTask(SRUN_TASK_3), true);
    assert.deepEqual(workerEnv(SRUN_TASK_3), { rank: 3, localRank: 1, worldSize: 4, localWorldSize: 2, rendezvous: 'env://' });
    // `srun -n 2` inside an 8-task allocation: the step counts, not the job.
    assert.equal(
      workerEnv({ ...SRUN_TASK_3, SLURM_NTASKS: '8', SLURM_STEP_NUM_TASKS: '2', SLURM_STEP_TASKS_PER_NODE: '1(x2)', SLURM_PROCID: '1', SLURM_LOCALID: '0' })
        ?.worldSize,
      2,
    );
    // Older Slurm: SLURM_STEPID only, SLURM_NTASKS for the count.
    const { SLURM_STEP_ID: _a, SLURM_STEP_NUM_TASKS: _b, SLURM_STEP_TASKS_PER_NODE: _c, ...old } = SRUN_TASK_3;
    assert.deepEqual(workerEnv(old), { rank: 3, localRank: 1, worldSize: 4, localWorldSize: 4, rendezvous: 'env://' });
  });

  it("torchrun's variables win over Slurm's", () => {
    assert.equal(workerEnv({ ...SRUN_TASK_3, RANK: '1', WORLD_SIZE: '2', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '2' })?.worldSize, 2);
    assert.equal(workerEnv({ ...SBATCH, RANK: '0', WORLD_SIZE: '2' })?.rank, 0);
  });
});

describe('launcher: how a failed rank is reported', function () {
  this.timeout(60_000);

  it('names the exit code or signal and the last error line', () => {
    const oomHint = "not by ssl-train (most often the kernel's out-of-memory killer: `dmesg` names it)";
    assert.equal(failureReport(1, null, 'SIGKILL', ''), `ssl-train: rank 1 failed: killed by SIGKILL, ${oomHint}`);
    assert.equal(failureReport(1, null, 'SIGSEGV', ''), 'ssl-train: rank 1 failed: killed by SIGSEGV', 'only SIGKILL gets the hint');
    assert.equal(
      failureReport(2, 3, null, 'loading\nError: boom\n    at f (a.js:1:1)\n'),
      'ssl-train: rank 2 failed: exited with code 3: Error: boom\n    at f (a.js:1:1)',
    );
    assert.equal(failureReport(1, 1, null, 'ssl-train: internal error: Error: x\n'), 'ssl-train: rank 1 failed: exited with code 1: internal error: Error: x');
    assert.equal(failureReport(1, 2, null, 'ssl-train: error: --lr: bad\n'), 'ssl-train: error: --lr: bad');
    assert.equal(failureReport(0, null, 'SIGKILL', ''), `ssl-train: rank 0 failed: killed by SIGKILL, ${oomHint}`);
    assert.equal(failureReport(0, 2, null, 'ssl-train: error: x\n'), undefined, "rank 0's own error already reached the terminal");
    assert.equal(failureReport(0, 1, null, 'ssl-train: error: training stopped at step 3\n'), undefined, "rank 0's failed run said why");
    assert.equal(failureReport(0, 1, null, 'ssl-train: internal error: Error: x\n    at f (a.js:1:1)\n'), 'ssl-train: rank 0 failed: exited with code 1');
  });

  for (const [mode, code, pattern] of [
    ['kill', 1, /^ssl-train: rank 1 failed: killed by SIGKILL, not by ssl-train \(most often the kernel's out-of-memory killer: `dmesg` names it\)$/m],
    ['exit3', 1, /^ssl-train: rank 1 failed: exited with code 3: Error: disk quota exceeded\n {4}at writeShard/m],
    ['user', 2, /^ssl-train: error: --batch-size: 7 is not allowed$/m],
  ] as const) {
    it(`a worker that ${mode === 'kill' ? 'is SIGKILLed' : mode === 'exit3' ? 'exits with code 3' : 'has a user error'}: the launcher exits ${code} and says so`, async () => {
      const outcome = await runProcess([workerPath('launch-driver'), mode], { killAfterMs: 30_000 });
      assert.equal(outcome.killed, false, 'the launcher returned');
      assert.equal(outcome.code, code, outcome.stderr);
      assert.match(outcome.stderr, pattern);
      assert.equal(
        outcome.stderr
          .trim()
          .split('\n')
          .filter((l) => l.startsWith('ssl-train:')).length,
        1,
        outcome.stderr,
      );
    });
  }
});
