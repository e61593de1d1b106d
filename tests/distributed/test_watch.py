"""The driver's watch over its ranks (distributed/watch.py), driven alone: a store served here, ranks played by
the test (notes and heartbeats written to the store) and by small local processes (no torch, no group)."""

import re
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from tinyllm.distributed.launcher import LocalWorker
from tinyllm.distributed.watch import BEAT_S, Watch, beat_key, exit_key, outputs, ready_key, summary
from tinyllm.errors import TinyLLMError


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)


def local_worker(rank: int, tmp_path, code: str) -> LocalWorker:
    log = tmp_path / f"rank{rank}.log"
    with open(log, "wb") as f:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT)
    return LocalWorker(rank, process, str(log))


class Beating:
    """A rank on another machine that lives: its counter moves every BEAT_S until stopped."""

    def __init__(self, store, rank: int):
        self.stop, self.store, self.rank = threading.Event(), store.clone(), rank
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.wait(BEAT_S):
            self.store.add(beat_key(self.rank), 1)


def test_after_a_failure_the_ranks_that_left_no_word_come_first(store, tmp_path):
    peer_lost = "RuntimeError: Connection closed by peer"
    crashed = local_worker(1, tmp_path, "import sys; print('Traceback ...'); print('" + peer_lost + "'); sys.exit(1)")
    crashed.process.wait()
    store.set(exit_key(1), peer_lost)
    store.set(exit_key(2), peer_lost)  # a remote rank that stopped after the loss, and said so
    store.add(beat_key(3), 1)  # a remote rank that beat, then went silent: killed, or its machine lost
    alive = Beating(store, 4)
    try:
        stops = Watch(store, 5, [crashed]).account()
    finally:
        alive.stop.set()
        alive.thread.join()
    assert [s.rank for s in stops] == [1, 2, 3]  # rank 4 beat on
    silent = re.escape("rank 3 went silent (no heartbeat for ") + r"1\.\d s\)"
    others = re.escape(f"rank 1 exited with code 1 ({peer_lost}); rank 2 stopped ({peer_lost})")
    assert re.fullmatch(f"{silent}; {others}", summary(stops))
    assert outputs(stops) == f"\nrank 1's last output:\n    Traceback ...\n    {peer_lost}"
    assert outputs(stops, noted=False) == ""  # its note says it all


def test_start_up_waits_for_every_rank_and_stops_at_the_first_that_stops(store, tmp_path):
    ready = Watch(store, 3, [local_worker(1, tmp_path, "import time; time.sleep(30)")])
    store.set(ready_key(1), "")
    store.set(ready_key(2), "")
    ready.wait_ready(startup_s=5.0, silent_s=5.0)
    ready.workers[1].stop(0.0)

    for key in (ready_key(1), ready_key(2)):
        store.delete_key(key)
    gone = local_worker(1, tmp_path, "print('bad magic number'); raise SystemExit(2)")
    with pytest.raises(TinyLLMError) as error:
        Watch(store, 3, [gone]).wait_ready(startup_s=30.0, silent_s=5.0)
    assert str(error.value) == (
        "the tensor-parallel group of 3 ranks failed to start: rank 1 exited with code 2\n"
        "rank 1's last output:\n    bad magic number"
    )

    store.add(beat_key(2), 1)  # rank 2 (remote) beat once, then nothing; rank 1 is a live local worker
    slow = local_worker(1, tmp_path, "import time; time.sleep(30)")
    with pytest.raises(TinyLLMError, match=r"failed to start: rank 2 went silent \(no heartbeat for 0\.\d s\)$"):
        Watch(store, 3, [slow]).wait_ready(startup_s=30.0, silent_s=0.5)
    with pytest.raises(TinyLLMError, match=r"failed to start: ranks 1, 2 not ready within 0\.3 s$"):
        Watch(store, 3, [slow]).wait_ready(startup_s=0.3, silent_s=30.0)
    slow.stop(0.0)
