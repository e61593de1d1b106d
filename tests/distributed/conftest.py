import os
import time

import pytest


def is_running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan's zombie may wait long for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def all_gone():
    """all_gone(pids, within_s): True once none of the processes runs, False if some still do after within_s."""

    def wait(pids, within_s: float = 5.0) -> bool:
        deadline = time.monotonic() + within_s
        while any(is_running(p) for p in pids):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    return wait
