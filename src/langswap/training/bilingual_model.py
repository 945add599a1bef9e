"""One transformer body read by two languages (RAMEN's bilingual model), for `langswap train --preset ramen`.

The model being trained is the target-language model a transfer wrote. The recipe attaches the source language's
token tables to it as a submodule, `langswap_source` (`SourceSide`: the source model's input embeddings, and its
output layer and bias where its head is untied), and replaces the instance's `forward` with `bilingual_forward`:
a batch's `stream_ids` say which sequences are source-language text (stream 0, `SOURCE_STREAM`); those are embedded
and scored with the source tables, the rest with the target model's own, and both pass through the one body. The
loss is the mean over every predicted token of both languages. A batch without `stream_ids` (evaluation on target
text) is the target model's ordinary forward.

Checkpoints and phase ends are the target model's folder with the source tables among its weights (keys
`langswap_source.*`, which `from_pretrained` leaves unread); `attach_source` reads them back from such a folder, or
from the source model at the first start. `write_two_models` then writes the run's two ordinary model folders: the
target model without those keys, and the source model (its own config and tokenizer) with the trained source tables
and the same body weights.

Causal and masked LMs alike. A masked LM's prediction head holds a transform ahead of its output layer (BERT's
dense, activation and layer norm); that transform is part of the shared body, and only the output layer and its bias
are per language: the forward reads the transformed states where the head hands them to its output layer
(`head_inputs`) and scores each language's masked positions with its own table. A masked batch's source rows are
masked with the source tokenizer (`data.LMCollator.mask`).
"""

from __future__ import annotations

import logging
import types
from itertools import islice
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers.modeling_outputs import CausalLMOutput

from langswap.errors import ConfigError, VocabularyError
from langswap.files import atomic_directory
from langswap.models import input_embedding_scale, load_model, load_tokenizer, objective_of, save_tokenizer
from langswap.surgery import install_embeddings, read_source_matrices
from langswap.training.sources import source_texts

logger = logging.getLogger(__name__)

SOURCE_STREAM = 0
MODULE = "langswap_source"
PREFIX = MODULE + "."


class SourceSide(nn.Module):
    """The source language's token tables: input embeddings (V_s, d), and an output layer (V_s, d) and bias (V_s,)
    where the source model's head is untied (None: the output layer is the input embeddings)."""

    def __init__(self, embeddings: torch.Tensor, output: torch.Tensor | None = None, bias: torch.Tensor | None = None):
        super().__init__()
        self.embeddings = nn.Parameter(embeddings.detach().clone().float())
        self.output = None if output is None else nn.Parameter(output.detach().clone().float())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone().float())

    def head(self) -> torch.Tensor:
        return self.embeddings if self.output is None else self.output


def _saved_source_tables(folder: Path) -> dict[str, torch.Tensor] | None:
    """The `langswap_source.*` tensors of a model folder's safetensors files, or None where it has none."""
    tables: dict[str, torch.Tensor] = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                if key.startswith(PREFIX):
                    tables[key[len(PREFIX):]] = handle.get_tensor(key)
    return tables or None


def source_tables_from_model(model, source_model: str) -> SourceSide:
    """The token tables of `model`, the source model loaded from `source_model`."""
    if model.get_output_embeddings() is None:
        raise ConfigError(f"source model '{source_model}' has no output layer; a bilingual model predicts source "
                          "tokens with it. Give the language model (with its head) the target model came from.")
    matrices = read_source_matrices(model, model.get_input_embeddings().weight.shape[0])
    return SourceSide(matrices.embeddings, None if matrices.tied else matrices.output_embeddings,
                      matrices.output_bias)


def attach_source(model, start: str | Path, source_model: str, loaded=None) -> SourceSide:
    """Give `model` (the target model) the source tables: those saved in `start` (a phase's folder) where it has
    them, else the source model's (`loaded`, where the caller has it in memory already); and the bilingual forward.
    Returns the attached module."""
    if hasattr(model, MODULE):
        return getattr(model, MODULE)
    saved = _saved_source_tables(Path(start)) if Path(start).is_dir() else None
    if saved is not None:
        side = SourceSide(saved["embeddings"], saved.get("output"), saved.get("bias"))
    else:
        side = source_tables_from_model(loaded if loaded is not None else load_model(source_model), source_model)
    hidden = model.get_input_embeddings().weight.shape[1]
    if side.embeddings.shape[1] != hidden:
        raise VocabularyError(f"the source model's embeddings have {side.embeddings.shape[1]} dimensions, the target "
                              f"model's {hidden}: they must share one body. Give the model the target model was "
                              "transferred from.")
    model.add_module(MODULE, side.to(model.get_input_embeddings().weight.device))
    model.forward = types.MethodType(bilingual_forward, model)
    return side


LANGUAGE_CHECK_LINES = 32
LANGUAGE_MARGIN = 0.35  # nats per byte (half a bit): how much better the source text must read than the target text


PSEUDO_STRIDE = 7  # a masked LM's pseudo-likelihood masks every 7th token of a line at once, in 7 passes


@torch.no_grad()
def nats_per_byte(model, tokenizer, lines: list[str], max_tokens: int = 128) -> float:
    """The model's loss over `lines` (each cut to `max_tokens` tokens) per byte of the text it predicted: comparable
    between texts its tokenizer splits finely or coarsely. A causal LM predicts each token from those before it; a
    masked LM each token with it masked (pseudo-log-likelihood, Salazar et al., 2020), every `PSEUDO_STRIDE`-th
    token masked at once, so a line takes that many passes."""
    masked = objective_of(model.config) == "masked"
    total, count = 0.0, 0
    model.eval()
    for line in lines:
        ids = tokenizer(line, add_special_tokens=False)["input_ids"][:max_tokens]
        if len(ids) < 2:
            continue
        if masked:
            total += _pseudo_loss_sum(model, tokenizer, ids)
            count += len(tokenizer.decode(ids).encode("utf-8"))
            continue
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
        total += float(nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))
        count += len(tokenizer.decode(ids[1:]).encode("utf-8"))
    return total / max(count, 1)


def _pseudo_loss_sum(model, tokenizer, ids: list[int]) -> float:
    """Sum over the tokens `ids` of the masked LM's loss for each with it masked, the line framed as training
    frames a block (cls or bos, then sep or eos)."""
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    last = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    framed = torch.tensor([token for token in (first,) if token is not None] + ids
                          + [token for token in (last,) if token is not None])
    offset = int(first is not None)
    positions = torch.arange(offset, offset + len(ids))
    inputs = framed.repeat(PSEUDO_STRIDE, 1)
    labels = torch.full_like(inputs, -100)
    for phase in range(PSEUDO_STRIDE):
        chosen = positions[phase::PSEUDO_STRIDE]
        labels[phase, chosen] = inputs[phase, chosen]
        inputs[phase, chosen] = tokenizer.mask_token_id
    logits = model(input_ids=inputs).logits.float()
    return float(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100, reduction="sum"))


def check_source_language(source_model: str, source_text: str, target_text: str, loaded=None,
                          text_field: str = "text") -> dict:
    """Warn when the source model reads `source_text` not clearly better than `target_text` (nats per byte on the
    first lines of each, through its own tokenizer, less than half a bit per byte apart): source text in the target
    language, or in a third one, trains the source tables on a language the source model does not know. `loaded`:
    the source model, where the caller has it in memory already; `text_field`: as `sources.source_texts` reads
    the texts. Returns both figures."""
    model = loaded if loaded is not None else load_model(source_model)
    tokenizer = load_tokenizer(source_model, "source model's tokenizer")
    losses = {name: nats_per_byte(model, tokenizer, list(islice(source_texts(path, name, text_field),
                                                                LANGUAGE_CHECK_LINES)))
              for name, path in (("source text", source_text), ("target text", target_text))}
    if losses["source text"] > losses["target text"] - LANGUAGE_MARGIN:
        logger.warning(
            "the source model reads recipe.source_text '%s' no better than the target text (%.2f against %.2f nats "
            "per byte on their first %d lines): is it in the source model's language? The source half of every "
            "batch should be the language the source model was trained on.", source_text, losses["source text"],
            losses["target text"], LANGUAGE_CHECK_LINES)
    return losses


def _shifted_loss_sum(hidden: torch.Tensor, labels: torch.Tensor, output) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of the next-token cross-entropy over the labelled positions, scored by `output` (states -> logits), and
    their count."""
    logits = output(hidden)
    shifted = labels[:, 1:].reshape(-1)
    flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    loss = nn.functional.cross_entropy(flat, shifted, ignore_index=-100, reduction="sum")
    return loss, (shifted != -100).sum()


def _masked_loss_sum(head_input: torch.Tensor, labels: torch.Tensor, output) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of the masked-LM cross-entropy over the labelled positions, scored by `output` (states -> logits) at
    those positions only, and their count."""
    chosen = labels != -100
    logits = output(head_input[chosen]).float()
    return nn.functional.cross_entropy(logits, labels[chosen], reduction="sum"), chosen.sum()


def head_inputs(model, inputs_embeds: torch.Tensor, attention_mask) -> torch.Tensor:
    """The states a masked LM's prediction head hands to its output layer (after the head's own transform), for
    `inputs_embeds`; the output layer itself computes nothing (a pre-hook hands it no positions)."""
    captured: list[torch.Tensor] = []

    def capture(module, args):
        captured.append(args[0])
        return (args[0][..., :0, :],)

    handle = model.get_output_embeddings().register_forward_pre_hook(capture)
    try:
        type(model).forward(model, inputs_embeds=inputs_embeds, attention_mask=attention_mask)
    finally:
        handle.remove()
    return captured[0]


def bilingual_forward(self, input_ids=None, attention_mask=None, labels=None, stream_ids=None):
    """The target model's forward for target text; source-language sequences (stream 0) read the source tables."""
    cls = type(self)
    if stream_ids is None or not bool((stream_ids == SOURCE_STREAM).any()):
        return cls.forward(self, input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    side: SourceSide = getattr(self, MODULE)
    source_rows = stream_ids == SOURCE_STREAM
    target_rows = ~source_rows
    embed = self.get_input_embeddings()
    inputs = torch.empty(*input_ids.shape, embed.weight.shape[1], dtype=embed.weight.dtype, device=input_ids.device)
    looked_up = nn.functional.embedding(input_ids[source_rows], side.embeddings)
    scale = input_embedding_scale(self)  # the layer's own scale (Gemma-3's sqrt(d)), which inputs_embeds skip
    inputs[source_rows] = (looked_up if scale == 1.0 else looked_up * scale).to(inputs.dtype)
    if bool(target_rows.any()):
        inputs[target_rows] = embed(input_ids[target_rows])
    if objective_of(self.config) == "masked":
        hidden, loss_sum = head_inputs(self, inputs, attention_mask), _masked_loss_sum
    else:
        hidden, loss_sum = self.base_model(inputs_embeds=inputs, attention_mask=attention_mask).last_hidden_state, \
            _shifted_loss_sum
    total, count = hidden.new_zeros((), dtype=torch.float32), 0
    if labels is not None:
        def source_output(states):
            return nn.functional.linear(states, side.head().to(states.dtype),
                                        None if side.bias is None else side.bias.to(states.dtype))

        part, n = loss_sum(hidden[source_rows], labels[source_rows], source_output)
        total, count = total + part, count + n
        if bool(target_rows.any()):
            part, n = loss_sum(hidden[target_rows], labels[target_rows], self.get_output_embeddings())
            total, count = total + part, count + n
    loss = total / count.clamp_min(1) if labels is not None else None
    return CausalLMOutput(loss=loss, logits=None)


def write_two_models(model_folder: Path, source_folder: Path, source_model: str) -> None:
    """Split the run's model folder (the target model with the source tables among its weights) into two ordinary
    model folders: `model_folder` without the source tables, and `source_folder`, the source model with the trained
    source tables and the target model's body weights."""
    tables: dict[str, torch.Tensor] = {}
    for path in sorted(Path(model_folder).glob("*.safetensors")):
        weights = load_file(str(path))
        if any(key.startswith(PREFIX) for key in weights):
            tables.update({key[len(PREFIX):]: value for key, value in weights.items() if key.startswith(PREFIX)})
            kept = {key: value for key, value in weights.items() if not key.startswith(PREFIX)}
            temporary = path.with_name(path.name + ".partial")
            save_file(kept, str(temporary), metadata={"format": "pt"})
            temporary.replace(path)
    if "embeddings" not in tables:
        raise RuntimeError(f"'{model_folder}' holds no source tables ({PREFIX}*)")
    target = load_model(model_folder)
    source = load_model(source_model)
    target_tables, source_tables = _table_names(target), _table_names(source)
    body = {name: tensor for name, tensor in target.state_dict().items() if name not in target_tables}
    source_names = set(source.state_dict())
    missing = [name for name in source_names if name not in source_tables and name not in body]
    if missing:
        raise RuntimeError(f"the source model has weights the target body lacks: {sorted(missing)[:3]}")
    source.load_state_dict({name: tensor for name, tensor in body.items() if name in source_names}, strict=False)
    install_embeddings(source, tables["embeddings"], tables.get("output"), tables.get("bias"))
    with atomic_directory(Path(source_folder), overwrite=True) as temporary:
        source.save_pretrained(temporary)
        save_tokenizer(load_tokenizer(source_model, "source model's tokenizer"), temporary)


def _table_names(model) -> set[str]:
    """State-dict names of the token tables (input embeddings, output layer, its bias)."""
    tensors = [model.get_input_embeddings().weight]
    output = model.get_output_embeddings()
    if output is not None:
        tensors += [output.weight] + ([output.bias] if getattr(output, "bias", None) is not None else [])
    pointers = {tensor.data_ptr() for tensor in tensors}
    return {name for name, tensor in model.state_dict(keep_vars=True).items() if tensor.data_ptr() in pointers}
