"""Reading model files: GGUF and Hugging Face folders, into a config, weights and a tokenizer."""
