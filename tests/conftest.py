import pytest


@pytest.fixture(scope="session")
def default_model_path():
    from tinyllm.loading.default_model import default_model_path as find

    return find()


@pytest.fixture(scope="session")
def smollm_tokenizer(default_model_path):
    """Our tokenizer built from the default model's GGUF metadata."""
    from tinyllm.tokenizer import Tokenizer

    return Tokenizer.from_gguf(default_model_path)
