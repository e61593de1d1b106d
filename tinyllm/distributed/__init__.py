"""Tensor parallelism over torch.distributed: gloo on the CPU, NCCL on CUDA.

config.py (ParallelConfig), group.py (the rendezvous store, joining, the control and compute groups), shard.py
(the one file that knows the model's module names), plan.py (what the driver broadcasts), worker.py (a worker
rank's loop), launcher.py (local worker processes: `tinyllm worker` commands), watch.py (the ranks' notes and
heartbeats: no wait outlives a lost rank), driver.py (rank 0: TensorParallel and its runner), cli_args.py
(flags). Nothing is imported here, so the command line stays light.
"""
