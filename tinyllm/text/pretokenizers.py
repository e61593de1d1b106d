"""The table of byte-level BPE pre-tokenizers, keyed by a GGUF file's `tokenizer.ggml.pre`.

A GGUF stores the vocabulary and merges but not how text is cut into words before merging; it
only names the scheme. Each scheme here is the list of split regexes llama.cpp applies for that
name (and that the model's own tokenizer.json does), so that our token ids match the model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, normalizers, pre_tokenizers

from ..errors import TinyLLMError

# GPT-2's word splitter: contractions, letters, numbers and other symbols each with an optional
# leading space, and whitespace runs that leave their last space to the next word.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Llama 3: case-insensitive contractions, a non-letter glued before a word, numbers in groups of
# at most three digits, and newlines kept together with the whitespace before them.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2: like Llama 3, but every digit is its own word.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Every digit alone first (SmolLM2's tokenizer.json has Digits(individual_digits=True) before its
# ByteLevel step); this matters for a digit after spaces: "  3" is "  " + "3", not " " + " 3".
SINGLE_DIGIT = r"\p{N}"


@dataclass(frozen=True)
class PreTokenizerSpec:
    name: str
    splits: tuple[str, ...]  # regexes applied in order, each cutting the pieces the last left
    ignore_merges: bool = False  # a whole word already in the vocab is one token (Llama 3 sets this)
    add_bos: bool = False  # llama.cpp's default when the file has no tokenizer.ggml.add_bos_token


_SMOLLM = PreTokenizerSpec("smollm", (SINGLE_DIGIT, GPT2_SPLIT))
_GPT2 = PreTokenizerSpec("gpt2", (GPT2_SPLIT,))
_LLAMA3 = PreTokenizerSpec("llama-bpe", (LLAMA3_SPLIT,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizerSpec("qwen2", (QWEN2_SPLIT,))

# Names llama.cpp's converter writes, mapped to the scheme it uses for them.
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "smollm": _SMOLLM,
    "starcoder": _SMOLLM,
    "gpt2": _GPT2,
    "gpt-2": _GPT2,
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "qwen2": _QWEN2,
    "deepseek-r1-qwen": _QWEN2,
}


def pre_tokenizer_spec(name: object) -> PreTokenizerSpec:
    """The scheme for a `tokenizer.ggml.pre` value; TinyLLMError for one we do not know."""
    spec = PRE_TOKENIZERS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise TinyLLMError(f"tokenizer.ggml.pre is {name!r}, expected one of {', '.join(sorted(PRE_TOKENIZERS))}")
    return spec


def build_pre_tokenizer(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    """Split by each regex in turn, keeping the matches as words, then map bytes to BPE symbols."""
    steps = [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in spec.splits]
    # use_regex=False: the splitting is done above; ByteLevel only spells each word's bytes.
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)


def prefix_space_normalizer() -> normalizers.Normalizer:
    """A space before text that does not start with one (ByteLevel's add_prefix_space).

    ByteLevel's own flag would add a space to every piece the regexes cut, not just the first,
    so the space is added before splitting instead: always prepend one, then turn a leading
    double space back into the single one the text had. (An empty-match "insert if missing"
    regex would be simpler but crashes the tokenizers library's offset tracking.) `\\A`, not
    `^`: Oniguruma's `^` also matches after every newline.
    """
    return normalizers.Sequence([normalizers.Prepend(" "), normalizers.Replace(Regex(r"\A  "), " ")])
