"""The native decoder: the model lowered onto the C++ decode step (lowering.py builds the layer stack from the
plan and the modules; step_structs.py holds the C structures and calls into csrc/decode.cpp), for quantized CPU
models."""
