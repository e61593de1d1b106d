"""ModelRunner: turns a scheduled step into tensors, runs one forward, returns the logits to sample.

The step's sequences are flattened into one row: single-token chunks (decodes) first, then prefill chunks.
Keys and values go to the paged storage at each new token's slot; attention reads them back by slot.
"""

from __future__ import annotations

import contextlib
from array import array
from dataclasses import dataclass

import torch

from ..cache.block_table import BlockTable, blocks_for
from ..cache.fill import offset_causal_mask
from ..cache.paged_cache import PagedStorage
from ..kernels import torch_single_threaded
from ..model.native.lowering import build_stack, step_logits
from ..model.native.step_structs import StepTokens
from ..model.paged_batch import PagedBatch
from ..model.quant_linear import runs_native
from ..model.ragged_attention import PrefillSlice, RaggedLayout
from .prompt_logprobs import PromptRows, missing_positions
from .scheduler import ScheduledChunk, SchedulerOutput

SINGLE_THREAD_MAX_TOKENS = 4  # steps of at most this many new tokens run torch's own ops on one thread


@dataclass
class StepInputs:
    """Everything one forward needs besides the weights and the KV storage. The module path's holds slots, not
    block tables, so a tensor-parallel rank with its own storage of the same shape in blocks can run it as it
    is; the native step's (NativeKeys) holds the tokens and the block tables as flat arrays."""

    block_copies: list[tuple[int, int]]  # copy-on-write: (src, dst) blocks, applied before the forward
    ids: torch.Tensor | None  # [1, N]; None with NativeKeys, which hold the tokens
    positions: torch.Tensor | None  # [N]
    write_slots: torch.Tensor | slice | None  # [N] slots of the new keys, one run of slots, or None (NativeKeys)
    layout: RaggedLayout | NativeKeys


def execute(model, storage: PagedStorage, inputs: StepInputs, rows: torch.Tensor) -> torch.Tensor:
    """Apply the block copies, then one forward over the flat batch -> logits of the chosen rows [len(rows), V]."""
    for src, dst in inputs.block_copies:
        storage.copy_block(src, dst)
    step = PagedBatch(storage, inputs.write_slots, inputs.positions, inputs.layout, logit_rows=rows)
    return model(inputs.ids, step)[0]


class ModelRunner:
    def __init__(self, model, storage: PagedStorage):
        self.model, self.storage = model, storage
        self.device = storage.device
        self.native_matmuls = runs_native(model)
        self.fused = build_stack(model, storage)  # the native step, or None for models it does not cover

    @torch.inference_mode()
    def run(
        self, step: SchedulerOutput, tables: dict[str, BlockTable]
    ) -> tuple[list[ScheduledChunk], torch.Tensor, list[PromptRows]]:
        """Run the step; return the chunks that sample and their logits [n, V], in that order (a chunk
        with k drafts has k + 1 rows), and the prompt rows of requests that want prompt logprobs.

        Every chunk (decodes, verified drafts and prompt chunks alike) runs through the native step when the
        model has one, else through the module path. The native step's rows are batch-invariant (its matmuls
        sum every output in one order at any number of rows, its attention goes by fixed spans), so a token's
        logits do not depend on the other tokens of the step: seeded sampling alone == batched, bit for bit."""
        return self._run_part(step.chunks, tables, step.block_copies, native=self.fused is not None)

    def _run_part(
        self, chunks: list[ScheduledChunk], tables: dict[str, BlockTable], block_copies, native: bool
    ) -> tuple[list[ScheduledChunk], torch.Tensor, list[PromptRows]]:
        """One forward over these chunks, through the native step or the module path."""
        decodes = [c for c in chunks if c.num_tokens == 1]
        prefills = [c for c in chunks if c.num_tokens > 1]
        chunks = decodes + prefills
        ids, positions, slot_mapping, rows, sampling = [], [], [], [], []  # positions: ints
        extra: list[tuple[ScheduledChunk, range, int]] = []  # prompt-logprob positions and their first row
        layout = None if native else self._layout(decodes, prefills, tables)
        # one decode whose blocks are consecutive: its new key goes to the slot after its keys, in place
        in_place = not native and not prefills and isinstance(layout.decode_slots, slice)
        for c in chunks:
            table = tables[c.request.request_id]
            stop = c.start + c.num_tokens
            wanted = missing_positions(c.request, c.start, stop)
            if wanted:
                extra.append((c, wanted, len(ids) + wanted.start - c.start))
            ids += c.request.tokens(c.start, stop)
            positions += range(c.start, stop)
            if not (in_place or native):
                slot_mapping.append(table.slots(c.start, stop, self.device))
            if c.samples:
                first = len(ids) - (stop - c.sample_start)
                rows += range(first, len(ids))
                sampling.append(c)
        num_sampled = len(rows)
        for _, wanted, first_row in extra:
            rows += range(first_row, first_row + len(wanted))
        if native:  # flat arrays; the native step derives each token's slots from the block tables
            inputs = StepInputs(block_copies, None, None, None, self._native_keys(chunks, tables, ids, positions))
            with self.threads_for(len(ids)):
                logits = self.forward(inputs, array("q", rows))  # [n, V]
        else:
            if in_place:
                write_slots = slice(layout.decode_slots.stop - 1, layout.decode_slots.stop)
            else:
                write_slots = torch.cat(slot_mapping)
            x = torch.tensor([ids], device=self.device)  # [1, N]
            positions = torch.tensor(positions, dtype=torch.long, device=self.device)  # [N]
            inputs = StepInputs(block_copies, x, positions, write_slots, layout)
            with self.threads_for(len(ids)):
                logits = self.forward(inputs, torch.tensor(rows, dtype=torch.long, device=self.device))  # [n, V]
        prompt_rows, at = [], num_sampled
        for c, wanted, _ in extra:
            prompt_rows.append(PromptRows(c.request, wanted.start, logits[at : at + len(wanted)]))  # [k, V]
            at += len(wanted)
        return sampling, logits[:num_sampled] if extra else logits, prompt_rows  # [n, V]

    def forward(self, inputs: StepInputs, rows: torch.Tensor | array) -> torch.Tensor:
        """Logits of rows (an int64 array with NativeKeys) [len(rows), V]."""
        if not isinstance(inputs.layout, NativeKeys):
            return execute(self.model, self.storage, inputs, rows)
        for src, dst in inputs.block_copies:
            self.storage.copy_block(src, dst)
        return step_logits(self.model, self.fused, inputs.layout.tokens, rows)

    def threads_for(self, num_tokens: int):
        """A step of a few rows on native kernels runs torch's own ops, all tiny, on one thread and the kernels
        on torch's count (see kernels/threads.py): torch's pool waking for each tiny op cost a batch-1 decode's
        attention many times its work on a loaded machine, while a 32-sequence decode step's ragged attention is
        worth two threads, hence the limit. The engine samples small steps in the same scope: a greedy row's
        seven passes over the vocabulary each woke torch's pool. With 8-bit activations a prompt's matmuls are
        native too, so every step runs so: torch's pool spinning between its ops took the cores from the
        kernels'. Figures: docs/benchmarks.md, "Figures behind choices in the code"."""
        if self.native_matmuls and (num_tokens <= SINGLE_THREAD_MAX_TOKENS or self.fused is not None):
            return torch_single_threaded()
        return contextlib.nullcontext()

    def _layout(self, decodes, prefills, tables: dict[str, BlockTable]) -> RaggedLayout:
        """The module path's view of the step: the decode rows' keys, then one slice per prefill chunk."""
        layout = RaggedLayout(len(decodes), None, None, [])
        if decodes:
            layout.decode_slots, layout.decode_mask = self._decode_keys(decodes, tables)
        row = len(decodes)
        for c in prefills:
            table = tables[c.request.request_id]
            stop = c.start + c.num_tokens
            kv_slots = table.slot_range(stop) or table.slots(0, stop, self.device)  # [S] or a slice
            mask = offset_causal_mask(c.num_tokens, c.start, self.device)
            layout.prefills.append(PrefillSlice(row, c.num_tokens, kv_slots, mask))
            row += c.num_tokens
        return layout

    def _native_keys(self, chunks, tables: dict[str, BlockTable], ids: list[int], positions: list[int]) -> NativeKeys:
        """The native step's tokens: one row of blocks per chunk, its sequence's from position 0, and key_rows
        [N]: each token's chunk (a token reads its row up to its own position)."""
        smax = max(c.start + c.num_tokens for c in chunks)
        P = tables[chunks[0].request.request_id].block_size
        nb = blocks_for(smax, P)
        blocks = array("q")
        for c in chunks:
            mine = tables[c.request.request_id].blocks[:nb]
            blocks.extend(mine)
            blocks.extend([0] * (nb - len(mine)))  # 0 past a table's blocks
        key_rows = array("q", [i for i, c in enumerate(chunks) for _ in range(c.num_tokens)])
        return NativeKeys(StepTokens(array("q", ids), array("q", positions), key_rows, blocks, nb, P, smax))

    def _decode_keys(self, decodes: list[ScheduledChunk], tables: dict[str, BlockTable]):
        """Slots of every decode query's keys, padded to the longest, and the mask of real keys. One decode
        whose blocks are consecutive reads its keys in place (a slice) and needs no mask."""
        ctx = [c.start + 1 for c in decodes]
        if len(decodes) == 1:
            table = tables[decodes[0].request.request_id]
            return table.slot_range(ctx[0]) or table.slots(0, ctx[0], self.device)[None], None  # [1, S]
        s_max = max(ctx)
        slots = torch.zeros(len(decodes), s_max, dtype=torch.long, device=self.device)  # [Bd, Smax]
        for i, c in enumerate(decodes):
            slots[i, : ctx[i]] = tables[c.request.request_id].slots(0, ctx[i], self.device)
        lengths = torch.tensor(ctx, device=self.device)  # [Bd]
        mask = (torch.arange(s_max, device=self.device) < lengths[:, None])[:, None, None]  # [Bd, 1, 1, Smax]
        return slots, mask


@dataclass
class NativeKeys:
    """The native step's view of the step: its tokens, each chunk's sequence's blocks and each token's chunk."""

    tokens: StepTokens
