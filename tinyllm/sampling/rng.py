"""Per-request random numbers that are a pure function of (seed, position, stream).

A seeded request must produce the same tokens however it is batched, preempted or
replayed, so the uniform used for generated token `position` cannot depend on how many
draws happened before it (as a torch.Generator would). Instead each uniform is a
counter-based hash: splitmix64's finaliser applied to the seed, the position and the
stream, done in Python integers (exact, platform-independent), and the top 53 bits of
the result become a float in [0, 1).

`stream` gives independent uniforms for the same position, for later users that need
more than one per token (speculative decoding's acceptance test).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinyllm.errors import TinyLLMError

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment: odd, so position -> counter is injective
_STREAM_GAMMA = 0xD1B54A32D192ED03  # a second odd constant so streams and positions don't alias
_SEED_DOMAIN = 0x5851F42D4C957F2D  # keeps seed 0 away from the all-zero fixed point of the mix
_SEED_LIMIT = 2**63


def _mix64(z: int) -> int:
    """splitmix64's finaliser: a bijection on 64-bit ints with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _check_index(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise TinyLLMError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    return value


@dataclass(frozen=True)
class RequestRng:
    """Stateless uniforms for one request; equal seeds give equal streams."""

    seed: int
    _key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _SEED_LIMIT:
            raise TinyLLMError(f"seed must be None or an integer in [0, 2**63), got {seed!r}")
        object.__setattr__(self, "_key", _mix64(seed ^ _SEED_DOMAIN))

    def uniform(self, position: int, stream: int = 0) -> float:
        """A uniform in [0, 1) determined by (seed, position, stream) alone."""
        position = _check_index("position", position)
        stream = _check_index("stream", stream)
        # splitmix64's own sequence: element `position` of the stream keyed by the seed
        counter = _mix64((self._key + (position + 1) * _GOLDEN) & _MASK64)
        bits = _mix64(counter ^ _mix64(((stream + 1) * _STREAM_GAMMA) & _MASK64))
        return (bits >> 11) * (1.0 / (1 << 53))  # 53 bits: every value exact in a double


def request_rng(seed: int | None) -> RequestRng:
    """The generator for a request; `seed=None` means seed 0 so unseeded runs repeat too."""
    return RequestRng(0 if seed is None else seed)
