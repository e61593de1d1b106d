"""The ARM (NEON) builds of the float matmul and of the native decode step against the x86 builds, bit for bit.

Every SIMD path sums an output in the same order (four 8-lane partial sums per 32-element sub-block, fused
multiply-adds, one horizontal sum) and the step's attention, norms and activations are written once over the
same 8-lane vector, so the NEON build must give the AVX2 and AVX-512 builds' bits. The harnesses
(simd_harness.cpp: every format and M; step_harness.cpp: whole steps of a small model and the greedy
sampler's pass) are cross-compiled for
aarch64 and run under qemu's user-mode emulation where the cross compiler and qemu are installed (CI installs
both); the matmul harness also checks that a row of a batch equals the row computed alone."""

import os
import shutil
import subprocess

import pytest

from tinyllm.kernels import build
from tinyllm.model.native import step_fields

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [os.path.join(HERE, "simd_harness.cpp"), str(build.CSRC / "qmatmul.cpp")]
STEP_SOURCES = [os.path.join(HERE, "step_harness.cpp")] + [
    str(build.CSRC / u) for u in ("qmatmul.cpp", "q8act.cpp", "q8pack.cpp", "greedy.cpp")
]
CROSS, QEMU = "aarch64-linux-gnu-g++", "qemu-aarch64"


def compile_harness(compiler: str, flags: list[str], out: str, sources: list[str] = SOURCES) -> str:
    """The step harness includes the step's structs as the build writes them (step_args.h), beside `out`."""
    with open(os.path.join(os.path.dirname(out), step_fields.HEADER_NAME), "w") as f:
        f.write(step_fields.header())
    includes = ["-I", str(build.CSRC), "-I", os.path.dirname(out)]
    cmd = [compiler, "-O3", "-ffp-contract=off", "-std=c++17", "-pthread", *includes, *flags, *sources]
    cmd += ["-o", out]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def run(cmd: list[str], out: str) -> tuple[int, bytes]:
    """The build's tl_simd() (0 portable, 1 AVX2, 2 NEON) and the bits of every output."""
    done = subprocess.run([*cmd, out], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]  # 1: a row of a batch differed from the row alone
    with open(out, "rb") as f:
        return int(done.stdout.split()[-1]), f.read()


@pytest.fixture(scope="module")
def x86_bits(tmp_path_factory):
    compiler = build.find_compiler()
    if compiler is None or "avx2" not in build.cpu_features().split():
        pytest.skip("needs a C++ compiler on an x86 CPU with AVX2")
    tmp = tmp_path_factory.mktemp("x86")
    bits = {}
    for name, flags in {"native": ["-march=native"], "avx2": ["-march=native", "-mno-avx512f"]}.items():
        for what, sources in (("matmul", SOURCES), ("step", STEP_SOURCES)):
            exe = compile_harness(compiler, flags, str(tmp / f"{what}-{name}"), sources)
            bits[what, name] = run([exe], str(tmp / f"{what}-{name}.bin"))
    return bits


@pytest.mark.slow
@pytest.mark.parametrize("what", ["matmul", "step"])
def test_the_x86_builds_agree(x86_bits, what):
    assert x86_bits[what, "native"][0] == x86_bits[what, "avx2"][0] == 1
    assert x86_bits[what, "native"][1] == x86_bits[what, "avx2"][1]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["matmul", "step"])
def test_the_neon_build_gives_the_x86_bits(x86_bits, tmp_path, what):
    if not (shutil.which(CROSS) and shutil.which(QEMU)):
        pytest.skip(f"needs {CROSS} and {QEMU} (Debian: g++-aarch64-linux-gnu, qemu-user)")
    exe = compile_harness(CROSS, ["-static"], str(tmp_path / "neon"), SOURCES if what == "matmul" else STEP_SOURCES)
    simd, bits = run([QEMU, exe], str(tmp_path / "neon.bin"))
    assert simd == 2, "the aarch64 build did not take the NEON path"
    assert bits == x86_bits[what, "native"][1]


@pytest.mark.slow
def test_the_scalar_build_is_batch_invariant(tmp_path):
    compiler = build.find_compiler()
    if compiler is None:
        pytest.skip("no C++ compiler on this machine")
    simd, _ = run([compile_harness(compiler, ["-DTL_SCALAR"], str(tmp_path / "scalar"))], str(tmp_path / "scalar.bin"))
    assert simd == 0


def test_an_arm_machine_builds_without_march():
    assert "-march=native" in build.flags("x86_64")
    for machine in ("aarch64", "arm64"):
        assert "-march=native" not in build.flags(machine) and "-O3" in build.flags(machine)
