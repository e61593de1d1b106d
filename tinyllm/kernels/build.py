"""Compile C++ sources into a shared library, cached per machine: the ops of kernels/csrc (KERNELS), or any other
library described by a `Sources` (its folder, units and headers, folders it includes from, headers written at
build time, libraries it links against). Plain Python: no torch, no imports from the package, so that it can
run apart from the rest.

A library is compiled by the machine's compiler (`$CXX`, else g++, c++ or clang++) with `-O3 -march=native
-ffp-contract=off` (nothing fused, so decoded weights stay bit-identical to the reference; no -march on 64-bit
ARM, whose NEON path needs none) and cached under `~/.cache/tinyllm/kernels/<hash>/`, keyed by the sources,
the compiler's version, the flags and the CPU's features. Each source compiles to an object in its own
compiler process, as many at once as there are cores, then one link makes the library; one line on stderr
says so while it runs. A build goes into a temporary folder renamed into place, so two processes building at
once both end with a whole library. TINYLLM_NATIVE=scalar builds the portable path (what a CPU without AVX2 or
NEON runs) and TINYLLM_NATIVE=avx2 the AVX2 path on a CPU with AVX-512, so that each can be tested on one
machine.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).parent / "csrc"  # the ops: matmuls, 8-bit activations, formats, thread pool, greedy argmax
HEADERS = ("ahead.h", "blocks.h", "pool.h", "q8act.h", "simd.h", "tile.h", "vmath.h")
HEADERS += tuple(sorted(str(p.relative_to(CSRC)) for p in (CSRC / "formats").glob("*.h")))  # each format's decode
UNITS = ("qmatmul.cpp", "q8act.cpp", "q8pack.cpp", "greedy.cpp", "probe.cpp")  # compiled into one library
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-std=c++17", "-fPIC", "-shared", "-pthread"]
LINK_ONLY = {"-shared"}
LIB_NAME = "libtinyllm_kernels.so"
TIMEOUT_S = 600
NOTICE = "tinyllm: building the CPU kernels for this machine, once (seconds to a minute):"


@dataclass(frozen=True)
class Sources:
    """One shared library's sources. Units compile side by side with `folder`, `includes` and (when there are
    generated headers) the build folder on the include path; the headers, generated texts and linked
    libraries are part of the cache key."""

    lib_name: str
    folder: Path
    headers: tuple[str, ...]
    units: tuple[str, ...]
    notice: str  # the line on stderr while it builds
    includes: tuple[Path, ...] = ()
    generated: tuple[tuple[str, str], ...] = ()  # (file name, text): headers written beside the library
    links: tuple[Path, ...] = ()  # shared libraries it calls into, by their paths

    @property
    def unit_paths(self) -> list[Path]:
        return [self.folder / n for n in self.units]

    @property
    def paths(self) -> list[Path]:
        return [self.folder / n for n in self.headers + self.units]


KERNELS = Sources(LIB_NAME, CSRC, HEADERS, UNITS, NOTICE)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinyllm" / "kernels"


def find_compiler() -> str | None:
    for name in [os.environ.get("CXX"), "g++", "c++", "clang++"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def flags(machine: str | None = None) -> list[str]:
    """The compiler's flags. On 64-bit ARM no -march: NEON and its fused multiply-add are baseline there, and
    not every compiler for it takes -march=native."""
    extra = {"scalar": ["-DTL_SCALAR"], "avx2": ["-mno-avx512f"]}.get(os.environ.get("TINYLLM_NATIVE", ""), [])
    arm = (machine or platform.machine()).lower() in ("aarch64", "arm64")
    return [f for f in FLAGS if not (arm and f == "-march=native")] + extra


def cpu_features() -> str:
    """The CPU's feature flags: -march=native code from one CPU may not run on another sharing the cache."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), platform.machine())
    except OSError:
        return platform.machine() + platform.processor()


def build_key(compiler: str, sources: Sources) -> str:
    """Hash of the sources, the compiler's version, the flags and the CPU's features: a change to any rebuilds."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    h = hashlib.sha256()
    for path in sources.paths:
        h.update(path.read_bytes())
    extra = [text for _, text in sources.generated] + [str(path) for path in sources.links]
    for part in (version, " ".join(flags()), cpu_features(), *extra):
        h.update(part.encode())
    return h.hexdigest()[:16]


def build(compiler: str, sources: Sources, log=None) -> Path:
    """The cached library for these sources, compiling it first if absent (one line on `log` says so, with
    each source as it finishes; default stderr). Raises RuntimeError on failure."""
    root = cache_root()
    final = root / build_key(compiler, sources)
    if (final / sources.lib_name).exists():
        return final / sources.lib_name
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    progress = Progress(sys.stderr if log is None else log, sources.notice, len(sources.units))
    try:
        for name, text in sources.generated:
            (tmp / name).write_text(text)
        objects = compile_units(compiler, sources, tmp, progress)
        run([compiler, "-shared", "-pthread", *map(str, objects), *link_flags(sources, tmp / sources.lib_name)])
        for obj in objects:
            obj.unlink()
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / sources.lib_name).exists():  # not another process winning the race: a real failure
                raise
        progress.finish("done")
    except BaseException:
        progress.finish("failed")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / sources.lib_name


def link_flags(sources: Sources, out: Path) -> list[str]:
    """The linked libraries and the output. On macOS a library is found through its loader's run path (its
    install name would be the temporary build folder's)."""
    darwin = sys.platform == "darwin"
    args = [str(path) for path in sources.links]
    if darwin:
        args += [f"-Wl,-install_name,@rpath/{sources.lib_name}"]
        args += [f"-Wl,-rpath,{path.parent}" for path in sources.links]
    return [*args, "-o", str(out)]


def compile_units(compiler: str, sources: Sources, out: Path, progress: Progress) -> list[Path]:
    """Every unit compiled to an object in `out`, one compiler process per core at a time."""
    includes = [sources.folder, *sources.includes] + ([out] if sources.generated else [])
    compile_flags = [f for f in flags() if f not in LINK_ONLY] + [arg for d in includes for arg in ("-I", str(d))]
    units = sources.unit_paths
    objects = [out / (unit.name + ".o") for unit in units]
    commands = {unit: [compiler, *compile_flags, "-c", str(unit), "-o", str(obj)] for unit, obj in zip(units, objects)}
    with ThreadPoolExecutor(max_workers=num_jobs()) as pool:
        # the largest sources first, so that the last to finish is a short one
        by_size = sorted(units, key=lambda unit: -unit.stat().st_size)
        futures = {pool.submit(run, commands[unit]): unit for unit in by_size}
        try:
            for done in as_completed(futures):
                done.result()
                progress.step(futures[done])
        except BaseException:
            for future in futures:
                future.cancel()  # the units not started yet; those compiling finish first
            raise
    return objects


def num_jobs() -> int:
    """Compiler processes at once: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except OSError as exc:
        raise RuntimeError(f"{' '.join(cmd)} failed: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-2000:]}")


class Progress:
    """One line on `log` while a library builds: the notice, then each source's name as it finishes, then the
    time it took. A terminal sees it grow; a log file gets the same single line."""

    def __init__(self, log, notice: str, total: int):
        self.log, self.total, self.count = log, total, 0
        self.start = time.monotonic()
        self.write(f"{notice} ")

    def step(self, unit: str) -> None:
        self.count += 1
        self.write(f"{Path(unit).stem} {self.count}/{self.total}, ")

    def finish(self, how: str) -> None:
        self.write(f"{how} in {time.monotonic() - self.start:.0f} s\n")

    def write(self, text: str) -> None:
        if self.log is None:
            return
        try:
            self.log.write(text)
            self.log.flush()
        except (OSError, ValueError):  # a closed or broken stderr never fails the build
            self.log = None
