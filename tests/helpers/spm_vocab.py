"""A real SentencePiece BPE model trained in the test, and its vocabulary written into GGUF metadata the way
llama.cpp's converter writes it (pieces, scores, one type per piece, padding pieces up to the model's size)."""

from __future__ import annotations

import functools
import io

# Enough repetition for merges across words, plus accents, CJK and emoji so that some characters get
# pieces of their own and others (left out by character_coverage) need byte fallback.
TRAINING_TEXT = (
    "The quick brown fox jumps over the lazy dog. Hello world, hello there, the other one.\n"
    "Café déjà vu, señor Müller: ñandú, über, naïve façade.\n"
    "日本語のテキストと中文文本。日本語の文章。\n"
    "Emoji 😀 and 👍 in text, emoji 😀 again.\n"
    "def f(x):\n    return x * 2 + 1\n"
    "in the end the theory of the thing is that there is nothing there.\n"
) * 8 + "rare: ∫ √ Ω ≈ ç\n"

# llama.cpp's token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@functools.cache
def train_spm(add_dummy_prefix: bool = True, vocab_size: int = 360, user_defined: tuple[str, ...] = ()):
    """A SentencePiece BPE model with byte fallback; unk 0, BOS 1, EOS 2 as in Llama 2. No normalization
    and no whitespace collapsing: a GGUF carries neither, and the models llama.cpp reads use neither."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT.splitlines()),
        model_writer=out,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=0.995,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix,
        user_defined_symbols=list(user_defined),
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=out.getvalue())


def gguf_vocab(
    sp, n_vocab: int | None = None, user_defined: tuple[str, ...] = ()
) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types) as the converter writes them: the pieces named in user_defined are
    USER_DEFINED (the converter marks the model folder's added tokens so) and spelled with real spaces
    for "▁" (as it writes Gemma's whitespace-run tokens), and "[PAD{i}]" pieces of type UNUSED fill
    the vocabulary up to the model's size."""
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.IdToPiece(i))
        scores.append(sp.GetScore(i))
        if sp.IsUnknown(i):
            types.append(UNKNOWN)
        elif sp.IsControl(i):
            types.append(CONTROL)
        elif sp.IsUnused(i):
            types.append(UNUSED)
        elif sp.IsByte(i):
            types.append(BYTE)
        elif tokens[-1] in user_defined:
            tokens[-1] = tokens[-1].replace("\u2581", " ")
            types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
    for i in range(len(tokens), n_vocab or len(tokens)):
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(UNUSED)
    return tokens, scores, types


def adds_space_prefix(sp) -> bool:
    """The model's add_dummy_prefix, which the converter copies to tokenizer.ggml.add_space_prefix (read
    here from what the model does, since its proto needs a library this project does not use)."""
    return sp.encode("a", out_type=str)[0].startswith("\u2581")


def spm_metadata(sp, n_vocab: int | None = None, user_defined: tuple[str, ...] = ()) -> dict:
    """The tokenizer.ggml.* keys of a GGUF file, as GGUFFile.metadata gives them."""
    tokens, scores, types = gguf_vocab(sp, n_vocab, user_defined)
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": sp.bos_id(),
        "tokenizer.ggml.eos_token_id": sp.eos_id(),
        "tokenizer.ggml.unknown_token_id": sp.unk_id(),
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": adds_space_prefix(sp),
    }


def write_spm_tokenizer(writer, sp, n_vocab: int | None = None) -> None:
    """The SentencePiece vocabulary's keys, through gguf's writer."""
    tokens, scores, types = gguf_vocab(sp, n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(adds_space_prefix(sp))
