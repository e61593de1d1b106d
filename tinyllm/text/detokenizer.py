"""Streaming detokenization: generated ids in, text pieces out that never end inside a character."""

from __future__ import annotations

import numbers
from typing import Protocol

REPLACEMENT = "\ufffd"

# A UTF-8 character is at most 4 bytes. Split into byte tokens, a valid one leaves the text ending
# in U+FFFD for at most 3 pushes in a row; a longer run ends in a genuine U+FFFD.
_MAX_WAIT = 3
# The window is trimmed once it holds more ids than this. The ids of its last character (at most
# 4, a byte each) then always fit in it, so a trim can cut cleanly in front of that character.
_MAX_WINDOW = 4


class Decodes(Protocol):
    def decode(self, ids: list[int]) -> str: ...


def _held_back(tok: Decodes) -> int:
    """How many trailing U+FFFD an unfinished character may decode to: 1 by the maximal-subpart rule,
    up to 3 (one per byte) for a decoder that says so with `unfinished_char_replacements`."""
    held = getattr(tok, "unfinished_char_replacements", 1)
    if not isinstance(held, int) or not 1 <= held <= _MAX_WAIT:
        raise ValueError(f"tok.unfinished_char_replacements must be an int in [1, {_MAX_WAIT}], got {held!r}")
    return held


class IncrementalDecoder:
    """Turns token ids, pushed one at a time, into text pieces that later ids cannot change.

    Terms:
    - text: tok.decode(every id pushed since the last flush). The pieces push returned plus flush()
      equal it exactly, and every concatenation of pieces so far is a prefix of it.
    - tok: a byte-level decoder: an id is a byte string, decode joins the bytes and decodes them as
      UTF-8, replacing each ill-formed or cut-off sequence (maximal subpart) by one U+FFFD. Decoders
      that drop the first token's leading space, and byte-fallback ones that give one U+FFFD per
      byte of an unfinished group, are handled exactly too on valid UTF-8 without U+FFFD itself.
    - window: the ids still needed, a suffix of those pushed. Its decode ends like text does; its
      first `settled` characters are accounted for: emitted, or artifacts of a window start that
      cut a character (the character's last bytes, each decoded alone as a U+FFFD that is not in text).
    - final: a character of decode(window) that appending ids cannot change. For a byte-level decoder
      that is every character but a trailing U+FFFD, which may be a character whose rest is to come.
    - waiting: how many pushes in a row have left decode(window) ending in U+FFFD.

    Each push decodes the window, already-emitted ids serving as context (seed section 2.7), and
    emits the new text when it does not end in U+FFFD. After _MAX_WAIT pushes that all end in U+FFFD
    the run is genuine (invalid bytes, the token for U+FFFD itself), so from then on everything but
    the last character is emitted (but the last up to 3 U+FFFD, for a decoder that gives one per byte
    of a cut-off character); waiting longer would grow the window without bound. The window
    is trimmed from the front where that provably leaves the end of the decode unchanged, which
    keeps it at most _MAX_WINDOW + _MAX_WAIT ids long between pushes.
    """

    def __init__(self, tok: Decodes):
        if not callable(getattr(tok, "decode", None)):
            raise ValueError(f"tok must have a decode(ids) method, got {tok!r}")
        self._tok = tok
        self._held_back = _held_back(tok)
        self._reset()

    def _reset(self) -> None:
        self._window: list[int] = []
        self._text = ""  # decode(window)
        self._settled = 0
        self._waiting = 0

    @property
    def window(self) -> tuple[int, ...]:
        """The ids the decoder still holds (bounded, whatever was pushed)."""
        return tuple(self._window)

    def push(self, token_id: int) -> str:
        """Add one id; returns the text it made final, possibly ""."""
        token_id = _checked_id(token_id)
        text = self._tok.decode(self._window + [token_id])
        if text == self._text and self._tok.decode([token_id, token_id]) == "":
            # An id without bytes (a special token that decode skips) changes nothing, now or later;
            # keeping it would let such ids pile up behind an unfinished character. (Twice, because
            # a lone "▁" decodes to "" where the first space is dropped, but two do not.)
            return ""
        self._window.append(token_id)
        self._text = text
        self._waiting = self._waiting + 1 if text.endswith(REPLACEMENT) else 0
        if self._waiting == 0:
            final = len(text)
        elif self._waiting > _MAX_WAIT:
            trailing = len(text) - len(text.rstrip(REPLACEMENT))
            final = len(text) - min(trailing, self._held_back)
        else:
            return ""
        piece = text[self._settled : final]
        self._settled = max(self._settled, final)
        if len(self._window) > _MAX_WINDOW:
            self._trim()
        return piece

    def flush(self) -> str:
        """Returns the rest of text (a cut-off character comes out as decode gives it, U+FFFD) and resets."""
        rest = self._text[self._settled :]
        self._reset()
        return rest

    def _trim(self) -> None:
        """Drops ids from the front of the window, keeping at least one.

        A cut between characters (`clean`: the dropped and kept decodes are the start and end of the
        window's) is preferred, since byte-fallback decoders change a whole run of byte tokens when
        one is missing; one that splits a character is taken only when there is no other, which for
        a byte-level decoder is exact, and which tokens that each end inside a character, leaving no
        clean cut, need for the window to stay bounded. The last character's ids are at most
        _MAX_WINDOW, so trying the last _MAX_WINDOW cuts finds a clean one wherever there is one.
        """
        n = len(self._window)
        splits = [
            (cut, self._tok.decode(self._window[:cut]), self._tok.decode(self._window[cut:]))
            for cut in range(n - 1, max(0, n - 1 - _MAX_WINDOW), -1)
        ]
        clean = [s for s in splits if self._text.startswith(s[1]) and self._text.endswith(s[2])]
        for cut, dropped, kept in clean + splits:
            settled = self._settled_after_cut(dropped, kept)
            if settled is not None:
                del self._window[:cut]
                self._text, self._settled = kept, settled
                return

    def _settled_after_cut(self, dropped: str, kept: str) -> int | None:
        """`settled` for the kept window, or None if the cut would lose text not yet emitted.

        With D = dropped, K = kept, a byte-level decoder gives two cases:
        - the cut falls between characters: text == D + K;
        - the cut splits a character C: D ends with the U+FFFD of C's first bytes, K starts with one
          U+FFFD per remaining byte of C (the artifacts), text == D[:-1] + C + rest and K == artifacts
          + rest. Were C unfinished, it would be text's last character and rest empty.
        In both, the last len(text) - len(D) characters of text and of K agree, and keep agreeing
        whatever ids follow, because both decoders start afresh after C. The cut is safe when the
        characters not yet emitted all lie in that part.
        """
        unsettled = len(self._text) - self._settled
        if len(self._text) - len(dropped) < unsettled:
            return None
        return len(kept) - unsettled


def _checked_id(token_id) -> int:
    if isinstance(token_id, bool) or not isinstance(token_id, numbers.Integral) or token_id < 0:
        raise ValueError(f"token_id must be an integer >= 0, got {token_id!r}")
    return int(token_id)
