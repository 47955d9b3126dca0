"""Reference for scripts/bench/collectives.ts: PyTorch's gloo backend on the same sizes.

Run one process per rank (the TypeScript benchmark spawns them):
    /usr/bin/python3 collectives_torch.py <rank> <world_size> <init_file> <config_json>
config_json: {"ops": [...], "sizes": [bytes...], "iters": [...], "warmup": [...]}.
Rank 0 prints one JSON line: [{"op", "bytes", "times": [seconds per iteration]}], where each
iteration's time is the maximum over ranks (barrier, then time the collective).
"""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    init_file, config = sys.argv[3], json.loads(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    results = []
    for op in config["ops"]:
        for nbytes, iters, warmup in zip(config["sizes"], config["iters"], config["warmup"]):
            if op == "allreduce":
                data = torch.ones(nbytes // 4, dtype=torch.float32)
                run = lambda: dist.all_reduce(data)  # noqa: E731
            elif op == "allgather":
                data = torch.ones(nbytes // 4 // world, dtype=torch.float32)
                out = [torch.empty_like(data) for _ in range(world)]
                run = lambda: dist.all_gather(out, data)  # noqa: E731
            else:
                raise ValueError(op)
            times = []
            for it in range(warmup + iters):
                dist.barrier()
                start = time.perf_counter()
                run()
                elapsed = time.perf_counter() - start
                if it >= warmup:
                    times.append(elapsed)
            slowest = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            results.append({"op": op, "bytes": nbytes, "times": slowest.tolist()})
    if rank == 0:
        print(json.dumps(results), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
