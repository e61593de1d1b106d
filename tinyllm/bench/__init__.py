"""Benchmarks of tinyllm beside HF transformers on the same weights: `tinyllm bench {load,decode,throughput,prefix}`.

Every figure is measured side by side in one run and reported with its ratio, since absolute numbers on a
shared machine move from run to run. Results go to a JSON file (and a PNG plot with matplotlib installed).
"""
