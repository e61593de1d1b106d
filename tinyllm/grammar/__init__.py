"""Structured output: what a constrained request's text must be, checked and compiled before it runs.

`structured.py` (StructuredOutput: the spec, checked when built) reads `spec_limits.py` (size and shape, before
parsing), `schema_rewrite.py` over `schema_nodes.py` (strict objects closed, numbers bounded) and `finite.py` over
`fixpoint.py` and `lark_rules.py` (no finite instance or sentence: refused). `constraint.py` compiles a spec
against the vocabulary and gives one matcher per request; `json_keys.py` forbids a key its JSON object already
holds. The sampler (sampling/) applies the masks; nothing here imports it.
"""
