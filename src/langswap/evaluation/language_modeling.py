"""Language-model quality on held-out text.

- Causal LM: perplexity (per token) and bits per byte (total negative log-likelihood in bits over the UTF-8 bytes of
  the text). Token perplexities of models with different tokenizers do not compare; bits per byte do. Each line is
  scored on its own, after the tokenizer's bos token (or eos where there is no bos, as GPT-2 does), so the first
  token is predicted too. Lines longer than the context are scored in windows that start `stride` tokens apart
  (default half the context), each token scored once with as much left context as its window allows.
- Masked LM: pseudo-perplexity (Salazar et al., 2020): each token masked in turn and scored given all the others;
  lines longer than the context are read in strided windows, each token scored once. Masked-LM loss: BERT's
  random masking (15%, 80/10/10) drawn from a seed, the loss of the training objective; lines longer than the
  context are truncated to it (it scores a sample of the tokens and reports no bits per byte).

Metric names are also the `kind` of the returned `LMScore`: "perplexity", "pseudo-perplexity", "masked-lm-loss".
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import asdict, dataclass

import torch

from langswap.batching import length_batches, right_pad
from langswap.errors import ConfigError, NumericalError, VocabularyError
from langswap.evaluation.probes import context_length, special_tokens, window_spans
from langswap.masking import IGNORE_INDEX, mask_tokens, special_tokens_mask
from langswap.numerics import describe, non_finite_parameters
from langswap.progress import bar as progress_bar
from langswap.reports import EvaluationMetrics

logger = logging.getLogger(__name__)

LN2 = math.log(2)
# A batch of the causal scorer, and a pass of pseudo-perplexity (one masked copy of a window per scored token), hold
# at most this many logits where a window alone fits (2**27 floats: 512 MiB in float32): e.g. 8 copies of a 512-token
# window over a 30,000-token vocabulary, or 1,046 tokens of a 128,256-token one.
LOGIT_BUDGET = 2 ** 27


@dataclass
class LMScore:
    lines: int
    tokens: int  # tokens scored; for "masked-lm-loss", the masked positions
    bytes: int
    nll: float  # total negative log-likelihood of the scored tokens, nats
    perplexity: float  # exp(nll / tokens)
    bits_per_byte: float  # NaN for "masked-lm-loss", which scores only a sample of the tokens
    kind: str = "perplexity"  # or "pseudo-perplexity", "masked-lm-loss"

    @property
    def tokens_per_byte(self) -> float:
        """Tokens the tokenizer makes of the text per UTF-8 byte (what reading it costs; NaN for "masked-lm-loss",
        whose tokens are a sample)."""
        return math.nan if self.kind == "masked-lm-loss" else self.tokens / max(self.bytes, 1)

    def as_dict(self) -> dict:
        """The fields and tokens_per_byte, floats rounded to 5 decimals and NaN written as None (JSON has no NaN)."""
        fields = {**asdict(self), "tokens_per_byte": self.tokens_per_byte}
        return {key: (None if math.isnan(value) else round(value, 5)) if isinstance(value, float) else value
                for key, value in fields.items()}

    def report(self) -> EvaluationMetrics:
        """The figures as the records keep them (`as_dict`)."""
        return EvaluationMetrics.from_dict(self.as_dict())


def _score(lines: list[str], tokens: int, nll: float, kind: str, per_byte: bool = True) -> LMScore:
    n_bytes = sum(len(line.encode("utf-8")) for line in lines)
    bits_per_byte = nll / LN2 / max(n_bytes, 1) if per_byte else math.nan
    mean = nll / max(tokens, 1)
    perplexity = math.exp(mean) if mean < 700 else math.inf  # exp overflows a float beyond about 709
    return LMScore(len(lines), tokens, n_bytes, nll, perplexity, bits_per_byte, kind)


def _mask_token_id(tokenizer, what: str) -> int:
    if tokenizer.mask_token_id is None:
        raise VocabularyError(f"{what} needs a tokenizer with a mask token; this one has none (is the model a causal "
                              "LM? use perplexity instead).")
    return tokenizer.mask_token_id


def _logit_width(model, tokenizer) -> int:
    """Logits per position: the output matrix's rows (it may be padded beyond the tokenizer)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return head.weight.shape[0] if head is not None else len(tokenizer)


def _windows(sequence: list[int], window: int, stride: int) -> list[tuple[list[int], int]]:
    """Pieces (tokens, skip) of a sequence: the model reads tokens[:-1] (at most `window` of them) and predicts
    tokens[1:]; the first `skip` of those predictions were made by an earlier piece and are not scored again.

    Window k reads tokens k * stride ... k * stride + window - 1 and predicts the next token at each of them, the one
    after the window included, so a window scores up to `window` tokens and the windows together score every token
    after the first exactly once. Each window after the first scores `stride` new tokens (the last one fewer), the
    first of them with window - stride + 1 tokens of left context. stride = window gives disjoint windows.
    """
    last = len(sequence) - 1  # index of the last token, the last target
    out, scored_until, start = [], 0, 0  # targets 1 .. scored_until are scored
    while True:
        stop = min(start + window, last)  # this piece's last target
        out.append((sequence[start:stop + 1], scored_until - start))
        scored_until = stop
        if stop == last:
            return out
        start += stride


def _check_stride(stride: int | None, window: int) -> int:
    """The stride to use: `stride`, or half the window for None; a ConfigError when out of range."""
    if stride is None:
        return max(1, window // 2)
    if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= window:
        raise ConfigError(
            f"stride is {stride!r}; it must be a whole number from 1 to the window ({window} tokens: the model's "
            "context, or max_length where that is smaller). Each window after the first scores `stride` new tokens "
            "with at least window - stride + 1 tokens of context: a smaller stride gives more context and costs "
            "more forward passes. Leave it unset for half the window.")
    return stride


@torch.no_grad()
def causal_lm_score(model, tokenizer, lines: list[str], max_length: int | None = None, batch_tokens: int = 4096,
                    progress: bool = False, stride: int | None = None, label: str = "scoring",
                    without_rows: torch.Tensor | None = None) -> LMScore:
    """Perplexity and bits per byte of a causal LM on `lines` (each scored on its own).

    A line longer than the window (the model's context, or `max_length` where smaller) is read in windows that
    start `stride` tokens apart (default half the window), each token scored once (see `_windows`); this is the
    strided evaluation of the Hugging Face guide "Perplexity of fixed-length models", except that no token is lost
    where windows meet. `without_rows`: a boolean over the model's output rows (its logits' width) whose rows are
    taken out of every softmax; a position whose next token is one of them is not scored (`tokens` counts the
    positions scored)."""
    device = next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    taken = None if without_rows is None else without_rows.to(device)
    batches = causal_lm_batches(model, tokenizer, lines, max_length, batch_tokens, stride)
    bar = progress_bar(progress, next(batches), label)
    for input_ids, attention, targets, target_mask in batches:
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits.float()
        targets, mask = targets.to(device), target_mask.to(device)
        if taken is not None:
            logits[..., taken] = float("-inf")
            mask = mask & ~taken[targets]
        log_probs = torch.log_softmax(logits, dim=-1)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        total_nll -= float(picked[mask].double().sum())
        total_tokens += int(mask.sum())
        if bar is not None:
            bar.update(len(input_ids))
    if bar is not None:
        bar.close()
    return _score(lines, total_tokens, total_nll, "perplexity")


def causal_lm_batches(model, tokenizer, lines: list[str], max_length: int | None = None, batch_tokens: int = 4096,
                      stride: int | None = None):
    """The batches `causal_lm_score` reads `lines` in: a generator that first yields how many windows there are,
    then (input_ids, attention_mask, targets, target_mask) per batch, each (windows, length), right-padded; the
    target mask marks the predictions scored (each token once, `_windows`). A batch's logits stay within
    LOGIT_BUDGET (4,096 tokens of a 128k vocabulary would be 2 GiB, held three times over by the scorer); a window
    alone is always a batch."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if prefix is None:
        logger.warning("the tokenizer has neither a bos nor an eos token: the first token of each line is not "
                       "scored, though its bytes count toward bits per byte")
    window = context_length(model, tokenizer, max_length)
    stride = _check_stride(stride, window)
    encoded = tokenizer(lines, add_special_tokens=False)["input_ids"]
    pieces: list[tuple[list[int], int]] = []
    for ids in encoded:
        sequence = ([prefix] if prefix is not None else []) + list(ids)
        if len(sequence) >= 2:
            pieces.extend(_windows(sequence, window, stride))
    pieces.sort(key=lambda piece: len(piece[0]))
    yield len(pieces)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    width = output.weight.shape[0] if output is not None else len(tokenizer)
    batch_tokens = max(1, min(batch_tokens, LOGIT_BUDGET // max(width, 1)))
    for start, stop in length_batches([len(tokens) - 1 for tokens, _ in pieces], batch_tokens):
        batch = pieces[start:stop]
        input_ids, attention = right_pad([tokens[:-1] for tokens, _ in batch], 0)
        targets, _ = right_pad([tokens[1:] for tokens, _ in batch], 0)
        target_mask, _ = right_pad([[False] * skip + [True] * (len(tokens) - 1 - skip) for tokens, skip in batch],
                                   False, torch.bool)
        yield input_ids, attention, targets, target_mask


@torch.no_grad()
def pseudo_perplexity(model, tokenizer, lines: list[str], max_length: int | None = None, batch_size: int = 64,
                      progress: bool = False, stride: int | None = None) -> LMScore:
    """Pseudo-perplexity of a masked LM (Salazar et al., 2020) and the matching bits per byte.

    Each token of the text ([UNK] included) is masked in turn and scored given the rest of its window. A line longer
    than the window (the model's context, or `max_length` where smaller, less the tokenizer's own [CLS]/[SEP]) is read
    in windows that start `stride` tokens apart (default half the window); each token is scored once, in the window
    where it sits most central (`probes.window_spans`), so every token of every line counts toward bits per byte."""
    mask_token_id = _mask_token_id(tokenizer, "pseudo-perplexity")
    window = context_length(model, tokenizer, max_length)
    prefix, suffix = special_tokens(tokenizer, "masked")
    room = window - len(prefix) - len(suffix)
    if room < 1:
        raise ConfigError(f"the window of {window} tokens leaves no room for text between the tokenizer's "
                          f"{len(prefix) + len(suffix)} special tokens; give a larger max_length.")
    stride = _check_stride(stride, room)
    device = next(model.parameters()).device
    vocabulary = _logit_width(model, tokenizer)
    total_nll, total_tokens = 0.0, 0
    bar = progress_bar(progress, len(lines), "pseudo-perplexity")
    for content in tokenizer(lines, add_special_tokens=False)["input_ids"]:
        for start, stop, keep_from, keep_to in window_spans(len(content), room, causal=False, stride=stride):
            base = torch.tensor(prefix + content[start:stop] + suffix)
            # Every content token is scored, [UNK] included: its bytes count toward bits per byte as well.
            positions = [len(prefix) + p - start for p in range(keep_from, keep_to)]
            # The model returns logits at every position of every copy, (rows, length, V): bound that tensor.
            rows_per_pass = max(1, min(batch_size, LOGIT_BUDGET // (len(base) * vocabulary)))
            for first in range(0, len(positions), rows_per_pass):
                chunk = positions[first:first + rows_per_pass]
                batch = base.repeat(len(chunk), 1)
                rows = torch.arange(len(chunk))
                where = torch.tensor(chunk)
                batch[rows, where] = mask_token_id
                logits = model(input_ids=batch.to(device)).logits
                log_probs = torch.log_softmax(logits[rows, where].float(), dim=-1)
                total_nll -= float(log_probs[rows, base[where]].double().sum())
                total_tokens += len(chunk)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return _score(lines, total_tokens, total_nll, "pseudo-perplexity")


@torch.no_grad()
def masked_lm_loss(model, tokenizer, lines: list[str], probability: float = 0.15, seed: int = 0,
                   max_length: int | None = None, batch_size: int = 32, progress: bool = False) -> LMScore:
    """Masked-LM loss of a masked LM on `lines`: the mean negative log-likelihood of the original tokens at positions
    masked by BERT's rule (`langswap.masking.mask_tokens`: `probability` of the non-special tokens selected,
    of those 80% masked, 10% random, 10% kept), as in training.

    Returns an LMScore of kind "masked-lm-loss": tokens = masked positions, nll = their total, perplexity =
    exp(mean loss) (NaN when no position was selected), bits_per_byte = NaN: only a sample of the tokens is scored,
    each with all the others visible, so the loss describes no code length of the text (pseudo-perplexity does).
    The masks come from `seed` alone: line i is masked by `mask_tokens` on its (1, L_i) ids with one generator seeded
    with `seed`, drawn in line order. They depend on the token ids and len(tokenizer), not on the model or batch_size,
    so models sharing a tokenizer are compared on the same masks. Lines longer than the window (the model's context,
    or `max_length` where smaller) are truncated to it.
    """
    mask_token_id = _mask_token_id(tokenizer, "masked-LM loss")
    window = context_length(model, tokenizer, max_length)
    generator = torch.Generator().manual_seed(seed)
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []
    for ids in tokenizer(lines, truncation=True, max_length=window)["input_ids"]:
        ids = torch.tensor([ids], dtype=torch.long)
        masked, labels = mask_tokens(ids, mask_token_id, len(tokenizer), special_tokens_mask(tokenizer, ids),
                                     probability, generator)
        if ids.shape[1]:
            rows.append((masked[0], labels[0]))
    rows.sort(key=lambda row: len(row[0]))  # similar lengths together: less padding
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    vocabulary = _logit_width(model, tokenizer)
    total_nll, total_tokens = 0.0, 0
    bar = progress_bar(progress, len(rows), "masked-LM loss")
    # the logits of a batch, (rows, longest, V), stay within LOGIT_BUDGET
    for start, stop in length_batches([len(masked) * vocabulary for masked, _ in rows], LOGIT_BUDGET, batch_size):
        batch = rows[start:stop]
        input_ids, attention = right_pad([masked for masked, _ in batch], pad_id)
        labels, _ = right_pad([row_labels for _, row_labels in batch], IGNORE_INDEX)
        selected = labels != IGNORE_INDEX
        if selected.any():
            logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
            log_probs = torch.log_softmax(logits[selected.to(device)].float(), dim=-1)  # (masked positions, V)
            total_nll -= float(log_probs.gather(-1, labels[selected].to(device)[:, None]).double().sum())
            total_tokens += int(selected.sum())
        if bar is not None:
            bar.update(len(batch))
    if bar is not None:
        bar.close()
    score = _score(lines, total_tokens, total_nll, "masked-lm-loss", per_byte=False)
    if total_tokens == 0:
        logger.warning("masked-LM loss: no position was selected in %d lines at probability %s; give more text",
                       len(lines), probability)
        score.perplexity = math.nan
    return score


METRICS = {"perplexity": ("causal", causal_lm_score), "pseudo-perplexity": ("masked", pseudo_perplexity),
           "masked-lm-loss": ("masked", masked_lm_loss)}  # name: (objective it needs, function)
DEFAULT_METRICS = {"causal": "perplexity", "masked": "pseudo-perplexity"}


def evaluate_model(model, tokenizer, lines: list[str], objective: str, progress: bool = False,
                   metric: str | None = None, **options) -> LMScore:
    """Score `lines` with `metric` (one of METRICS; None: perplexity for a causal LM, pseudo-perplexity for a masked
    LM); `objective` is "causal" or "masked" (`langswap.models.objective_of`), `options` go to the metric's function
    (e.g. max_length, stride; probability, seed)."""
    if objective not in DEFAULT_METRICS:
        raise ConfigError(f"objective is {objective!r}; choose one of: {', '.join(DEFAULT_METRICS)}.")
    metric = metric or DEFAULT_METRICS[objective]
    if metric not in METRICS:
        raise ConfigError(f"metric is {metric!r}; choose one of: {', '.join(METRICS)}.")
    needs, function = METRICS[metric]
    if needs != objective:
        fitting = [name for name, (wanted, _) in METRICS.items() if wanted == objective]
        raise ConfigError(f"metric '{metric}' is for {needs} LMs and this model is a {objective} LM; choose one of: "
                          f"{', '.join(fitting)}.")
    accepted = [name for name in inspect.signature(function).parameters
                if name not in ("model", "tokenizer", "lines", "progress")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"metric '{metric}' has no option {', '.join(unknown)}; its options are: "
                          f"{', '.join(accepted)}.")
    score = function(model, tokenizer, lines, progress=progress, **options)
    if not math.isfinite(score.nll):
        found = non_finite_parameters(model) if isinstance(model, torch.nn.Module) else []
        cause = (f"its weights hold NaN or infinite values: {describe(found)}" if found else
                 "its weights are finite, so its activations overflow in this precision (try float32)")
        raise NumericalError(f"the model's {metric} on this text is not a number (log-likelihood {score.nll}): "
                             f"{cause}. No figure is reported for it.")
    return score
