"""The command-line flags of tensor parallelism (generate, chat, serve, bench) and `tinyllm worker`."""

from __future__ import annotations

import argparse
import os

from ..errors import TinyLLMError


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="split the model over N processes (default 1)")
    p.add_argument("--master-addr", default=None, help="where the ranks meet (default: $MASTER_ADDR, else 127.0.0.1)")
    p.add_argument("--master-port", type=int, default=None, help="(default: $MASTER_PORT, else a free port)")
    p.add_argument(
        "--num-local-ranks",
        type=int,
        default=None,
        help="ranks started on this machine, 0 .. n-1 (default: all); the others run `tinyllm worker`",
    )
    p.add_argument("--tp-timeout", type=float, default=20.0, help="seconds a silent rank is waited for (default 20)")
    p.add_argument(
        "--tp-startup-timeout",
        type=float,
        default=300.0,
        help="seconds every rank has to start and load its model (default 300)",
    )


def launched_rank() -> int | None:
    """This process's rank when torch.distributed.run (torchrun) started it ($RANK, $WORLD_SIZE), else None."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        return int(rank)
    except ValueError:
        raise TinyLLMError(f"$RANK must be an integer, got {rank!r}") from None


def parallel_from_args(args):
    """The flags as a ParallelConfig. Under torchrun the group is its $WORLD_SIZE ranks, each started by it."""
    from .config import ParallelConfig

    size, local = args.tensor_parallel_size, args.num_local_ranks
    if launched_rank() is not None:
        world = int(os.environ["WORLD_SIZE"])
        if size not in (1, world):
            raise TinyLLMError(f"--tensor-parallel-size {size} disagrees with torchrun's $WORLD_SIZE={world}")
        size, local = world, 1
    return ParallelConfig(size, args.master_addr, args.master_port, local, args.tp_timeout, args.tp_startup_timeout)


def run_launched_worker(args) -> int | None:
    """Under torchrun, ranks other than 0 serve as workers whatever the command; None for rank 0 (or no torchrun)."""
    rank = launched_rank()
    if not rank or not hasattr(args, "tensor_parallel_size"):
        return None
    args.rank = rank
    return cmd_worker(args)


def add_worker_command(subparsers, add_model_args) -> None:
    p = subparsers.add_parser(
        "worker",
        help="join a tensor-parallel group as one rank (for ranks on another machine than the driver's)",
    )
    add_model_args(p)
    add_parallel_args(p)
    p.add_argument("--rank", type=int, required=True, help="this process's rank, 1 .. N-1 (0 is the driver)")
    p.add_argument("--model-file", default=None, help=argparse.SUPPRESS)  # a driver's in-memory model, saved
    p.set_defaults(func=cmd_worker)


def cmd_worker(args) -> int:
    from ..config import parse_dtype
    from .worker import ModelSource, worker_main

    config = parallel_from_args(args)
    if config.master_port is None:
        raise TinyLLMError("tinyllm worker needs --master-port (or $MASTER_PORT): the driver's port")
    if not 1 <= args.rank < config.tensor_parallel_size:
        raise TinyLLMError(f"--rank must be in 1..{config.tensor_parallel_size - 1}, got {args.rank}")
    source = ModelSource(args.model, parse_dtype(args.dtype), args.device, args.weights, args.quantize)
    source.module_file = getattr(args, "model_file", None)  # absent under torchrun's other commands
    worker_main(args.rank, config, source)
    return 0
