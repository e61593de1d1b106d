"""The Llama-family decoder: layers (norm, rope, attention, mlp) and the model that wires them."""
