import pytest


@pytest.fixture(scope="session")
def default_model_path():
    from tinyllm.loading.default_model import default_model_path as find

    return find()


@pytest.fixture(scope="session")
def smollm_tokenizer(default_model_path):
    """Our tokenizer built from the default model's GGUF metadata."""
    from tinyllm.loading.gguf_tokenizer import gguf_tokenizer

    return gguf_tokenizer(default_model_path)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for server tests: the engine, uvicorn and the clients share two cores, and torch's
    thread pool spinning against them makes a tiny model's step a hundred times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=[1, 2])
def threads(request):
    """Torch's (and so the kernels') thread count, 1 and 2: it decides how a matmul's rows and attention's spans
    split over the threads, which must change no bit."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)
