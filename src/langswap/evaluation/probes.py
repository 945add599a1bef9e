"""Linear probes on frozen hidden states: how much part-of-speech information a model's representations hold.

As in WECHSEL (Minixhofer et al., NAACL 2022, appendix A): a word is represented by the mean of the hidden states
(of one layer) of its tokens, a multinomial logistic regression is trained on the words of one split and its accuracy
measured on the words of another. The model stays frozen, so the probe measures the representations, not what
fine-tuning can make of them.

- Words to tokens: each sentence is written with single spaces between its words and tokenized with character
  offsets; a token belongs to every word its character span overlaps (a token that covers only the space before a
  word, as byte-level BPE makes, belongs to none). This works alike for byte-level BPE, SentencePiece and WordPiece.
- Special tokens: those the tokenizer adds itself (CLS/SEP for BERT, <s> </s> for RoBERTa, <s> for Llama). A causal
  LM whose tokenizer adds none (GPT-2) gets its bos token (or eos, GPT-2's stand-in) first, as `causal_lm_score`
  does; a masked LM whose tokenizer adds none gets CLS ... SEP when it has them. Special tokens never enter a word.
- Long sentences are split into overlapping windows, none dropped: a causal model takes each token from the window
  that gives it the most left context, a masked model from the window where it is most central.

Not handled: the tokenizer must be a fast one (character offsets); a word that gets no token at all (a character
the normalizer deletes) gets the mean of its sentence's tokens, and a sentence with no token gets zeros (both are
logged).
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from langswap.batching import right_pad
from langswap.errors import ConfigError, VocabularyError
from langswap.evaluation.conll import Sentence, read_conllu
from langswap.models import load_model, load_tokenizer, objective_of, position_padding_idx, transformers_bars
from langswap.progress import bar as progress_bar
from langswap.tokens import canonical_tokens

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 1024  # tokens per window when neither the model nor max_length says less


# -- sentences to tokens ------------------------------------------------------------------------------------------------

@dataclass
class EncodedSentence:
    """The content tokens of one sentence (no special tokens) and, per token, the words it overlaps."""

    ids: list[int]
    token_words: list[tuple[int, ...]]  # token t overlaps words token_words[t] (indices within the sentence)
    n_words: int

    def first_tokens(self) -> list[int]:
        """Per word, its first token (-1 for a word without any)."""
        first = [-1] * self.n_words
        for token, words in enumerate(self.token_words):
            for word in words:
                if first[word] < 0:
                    first[word] = token
        return first


def encode_sentences(tokenizer, sentences: list[Sentence]) -> list[EncodedSentence]:
    """Tokenize each sentence (words joined by single spaces) and map tokens to the words they overlap."""
    if not getattr(tokenizer, "is_fast", False):
        raise VocabularyError("word-level evaluation needs a fast tokenizer (character offsets); this one is slow. "
                              "Save it as a fast one (tokenizer.json).")
    texts = [" ".join(sentence.words) for sentence in sentences]
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    # A token that is only a space marker belongs to no word. SentencePiece-style (Metaspace) tokenizers give a
    # stand-alone leading "▁" the offsets of the first character, which would make it part of the first word.
    used = canonical_tokens(tokenizer, (token for ids in encoded["input_ids"] for token in ids))
    blank = {token for token, canonical in used.items() if not canonical.raw.strip()}
    out = []
    for sentence, ids, offsets in zip(sentences, encoded["input_ids"], encoded["offset_mapping"]):
        starts, ends, position = [], [], 0
        for word in sentence.words:
            starts.append(position)
            ends.append(position + len(word))
            position += len(word) + 1
        token_words = []
        for token, (start, end) in zip(ids, offsets):
            overlapping = []
            if token in blank:
                token_words.append(())
                continue
            word = bisect.bisect_right(ends, start)  # the first word ending after the token starts
            while end > start and word < len(starts) and starts[word] < end:
                overlapping.append(word)
                word += 1
            token_words.append(tuple(overlapping))
        out.append(EncodedSentence(list(ids), token_words, len(sentence.words)))
    return out


def special_tokens(tokenizer, objective: str) -> tuple[list[int], list[int]]:
    """(ids put before, ids put after) the content tokens of every sequence; see the module docstring."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
    mask = full["special_tokens_mask"]
    if len(full["input_ids"]) != len(plain) + sum(mask):
        mask = [0] * len(full["input_ids"])  # a post-processor we do not understand: add our own below
    leading = 0
    while leading < len(mask) and mask[leading]:
        leading += 1
    trailing = 0
    while trailing < len(mask) - leading and mask[len(mask) - 1 - trailing]:
        trailing += 1
    prefix = full["input_ids"][:leading]
    suffix = full["input_ids"][len(mask) - trailing:]
    if prefix or suffix:
        return list(prefix), list(suffix)
    if objective == "masked":
        return ([tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else [],
                [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else [])
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return ([start] if start is not None else []), []


def context_length(model, tokenizer, max_length: int | None = None) -> int:
    """Tokens one sequence may hold, special tokens included."""
    config = model.config
    limit = getattr(config, "max_position_embeddings", None) or DEFAULT_CONTEXT
    padding_idx = position_padding_idx(model)
    if padding_idx is not None:
        limit -= padding_idx + 1
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if tokenizer_limit and tokenizer_limit < 1_000_000:
        limit = min(limit, tokenizer_limit)
    return min(limit, max_length) if max_length else min(limit, DEFAULT_CONTEXT)


def window_spans(length: int, room: int, causal: bool, stride: int | None = None) -> list[tuple[int, int, int, int]]:
    """Windows (start, stop, keep_from, keep_to) over `length` tokens, at most `room` each, starting `stride` apart
    (default half the room, 1 <= stride <= room).

    Every token is kept from exactly one window: a causal model's from the window that gives it the most left
    context, a bidirectional model's from the window where it is most central."""
    if length <= room:
        return [(0, length, 0, length)]
    stride = stride or max(1, room // 2)
    assert 1 <= stride <= room, (stride, room)
    margin = room - stride if causal else (room - stride) // 2
    spans, start, keep_from = [], 0, 0
    while True:
        stop = min(start + room, length)
        if stop == length:
            spans.append((start, stop, keep_from, length))
            return spans
        keep_to = start + margin + stride
        spans.append((start, stop, keep_from, keep_to))
        keep_from, start = keep_to, start + stride


@dataclass
class Piece:
    """One model input: a window of one sentence's tokens between the special tokens."""

    sentence: int
    input_ids: list[int]
    positions: list[int]  # positions in input_ids of the kept tokens
    tokens: list[int]  # their indices among the sentence's content tokens


def make_pieces(encoded: list[EncodedSentence], prefix: list[int], suffix: list[int], context: int,
                causal: bool) -> list[Piece]:
    room = context - len(prefix) - len(suffix)
    if room < 1:
        raise ConfigError(f"max_length {context} leaves no room for a token beside the {len(prefix) + len(suffix)} "
                          "special tokens; raise it.")
    pieces = []
    for index, sentence in enumerate(encoded):
        if not sentence.ids:
            continue
        for start, stop, keep_from, keep_to in window_spans(len(sentence.ids), room, causal):
            ids = prefix + sentence.ids[start:stop] + suffix
            tokens = list(range(keep_from, keep_to))
            pieces.append(Piece(index, ids, [len(prefix) + token - start for token in tokens], tokens))
    return pieces


def batches(pieces: list[Piece], batch_size: int, pad_id: int):
    """(pieces, input_ids (B, L), attention_mask (B, L)), right-padded."""
    for start in range(0, len(pieces), batch_size):
        batch = pieces[start:start + batch_size]
        yield (batch, *right_pad([piece.input_ids for piece in batch], pad_id))


def pad_id_of(model, tokenizer) -> int:
    for candidate in (getattr(model.config, "pad_token_id", None), tokenizer.pad_token_id, tokenizer.eos_token_id):
        if isinstance(candidate, int):
            return candidate
    return 0


def _objective(model) -> str:
    return objective_of(model.config)


def _check_layer(model, layer: int) -> None:
    layers = getattr(model.config, "num_hidden_layers", None)
    if layers is not None and not -(layers + 1) <= layer <= layers:
        raise ConfigError(f"layer {layer} does not exist: the model has {layers} layers, so hidden states are "
                          f"numbered 0 (embeddings) to {layers} (last), or -1 (last) to -{layers + 1}.")


@torch.no_grad()
def word_features(model, tokenizer, sentences: list[Sentence], layer: int = -1, batch_size: int = 32,
                  max_length: int | None = None, progress: bool = False) -> torch.Tensor:
    """Per word, the mean hidden state of its tokens: (n_words, hidden), float32, words in sentence order.

    layer: index into the hidden states (0 = embedding output, -1 = last layer). max_length: tokens per window,
    special tokens included; default the model's context, at most 1024. Longer sentences are windowed, not cut."""
    _check_layer(model, layer)
    causal = _objective(model) != "masked"
    prefix, suffix = special_tokens(tokenizer, "causal" if causal else "masked")
    encoded = encode_sentences(tokenizer, sentences)
    pieces = make_pieces(encoded, prefix, suffix, context_length(model, tokenizer, max_length), causal)
    pieces.sort(key=lambda piece: len(piece.input_ids))
    first_word = [0]
    for sentence in encoded:
        first_word.append(first_word[-1] + sentence.n_words)
    backbone = model.base_model
    device = next(model.parameters()).device
    pad_id = pad_id_of(model, tokenizer)
    sums = counts = sentence_sums = sentence_counts = None
    bar = progress_bar(progress, len(pieces), "hidden states")
    for batch, input_ids, attention in batches(pieces, batch_size, pad_id):
        states = backbone(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                          output_hidden_states=True).hidden_states[layer].float().cpu()  # (B, L, hidden)
        if sums is None:
            hidden = states.shape[-1]
            sums = torch.zeros((first_word[-1], hidden))
            counts = torch.zeros(first_word[-1])
            sentence_sums = torch.zeros((len(encoded), hidden))
            sentence_counts = torch.zeros(len(encoded))
        rows, positions, words, token_rows, token_positions, token_sentences = [], [], [], [], [], []
        for row, piece in enumerate(batch):
            token_words = encoded[piece.sentence].token_words
            offset = first_word[piece.sentence]
            for position, token in zip(piece.positions, piece.tokens):
                token_rows.append(row)
                token_positions.append(position)
                token_sentences.append(piece.sentence)
                for word in token_words[token]:
                    rows.append(row)
                    positions.append(position)
                    words.append(offset + word)
        if words:
            sums.index_add_(0, torch.tensor(words), states[rows, positions])
            counts.index_add_(0, torch.tensor(words), torch.ones(len(words)))
        sentence_sums.index_add_(0, torch.tensor(token_sentences), states[token_rows, token_positions])
        sentence_counts.index_add_(0, torch.tensor(token_sentences), torch.ones(len(token_sentences)))
        if bar is not None:
            bar.update(len(batch))
    if bar is not None:
        bar.close()
    if sums is None:  # no sentence has a token
        hidden = model.config.hidden_size
        return torch.zeros((first_word[-1], hidden))
    missing = (counts == 0).nonzero().flatten()
    if len(missing):
        sentence_of_word = torch.repeat_interleave(torch.arange(len(encoded)),
                                                   torch.tensor([sentence.n_words for sentence in encoded]))
        owners = sentence_of_word[missing]
        sums[missing] = sentence_sums[owners]
        counts[missing] = sentence_counts[owners]
        empty = int((counts[missing] == 0).sum())
        logger.warning("%d of %d words have no token of their own; they get the mean of their sentence's tokens%s",
                       len(missing), first_word[-1], f" ({empty} in sentences without any token get zeros)"
                       if empty else "")
    return sums / counts.clamp(min=1).unsqueeze(1)


# -- logistic regression ------------------------------------------------------------------------------------------------

@dataclass
class LogisticRegression:
    """Multinomial logistic regression on standardised features: logits = ((x - mean) / scale) @ weight + bias."""

    weight: torch.Tensor  # (d, C)
    bias: torch.Tensor  # (C,)
    mean: torch.Tensor  # (d,)
    scale: torch.Tensor  # (d,)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """features: (n, d) -> (n, C)."""
        return ((features.float() - self.mean) / self.scale) @ self.weight + self.bias

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """features: (n, d) -> (n,) class ids (int64)."""
        return self.logits(features).argmax(dim=1)


def train_logistic_regression(features: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None,
                              l2: float = 1e-4, max_iter: int = 500) -> LogisticRegression:
    """Fit multinomial logistic regression by full-batch L-BFGS from zero weights (deterministic).

    features: (n, d); labels: (n,) class ids in [0, num_classes). The loss is the mean cross-entropy plus
    l2 / 2 * ||weight||^2 (the bias is not penalised); features are standardised with the training mean and
    standard deviation first (a constant feature is only centred)."""
    n, dim = features.shape
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},) to match features {tuple(features.shape)}, not "
                         f"{tuple(labels.shape)}")
    if n == 0:
        raise ValueError("no training examples")
    labels = labels.long()
    num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
    if int(labels.min()) < 0 or int(labels.max()) >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), found {int(labels.min())} .. {int(labels.max())}")
    features = features.float()
    mean = features.mean(dim=0)
    scale = features.std(dim=0, unbiased=False)
    scale = torch.where(scale > 1e-12, scale, torch.ones_like(scale))
    standardised = (features - mean) / scale
    weight = torch.zeros((dim, num_classes), requires_grad=True)
    bias = torch.zeros(num_classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-6, tolerance_change=1e-10)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(standardised @ weight + bias, labels) + 0.5 * l2 * (weight ** 2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return LogisticRegression(weight.detach(), bias.detach(), mean, scale)


# -- the POS probe --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ProbeConfig:
    """A linear POS probe on one layer's hidden states."""

    layer: int = field(default=-1, metadata={"help": "Hidden states probed: 0 = embedding output, -1 = last layer."})
    l2: float = field(default=1e-4, metadata={"help": "L2 penalty of the logistic regression (on the mean "
                                                      "cross-entropy of standardised features)."})
    max_iter: int = field(default=500, metadata={"help": "L-BFGS iterations of the logistic regression."})
    max_sentences: int | None = field(default=None, metadata={"help": "Use only the first this many sentences of "
                                                                      "each split; default all."})
    batch_size: int = field(default=32, metadata={"help": "Sentences (windows) per forward pass."})
    max_length: int | None = field(default=None, metadata={"help": "Tokens per window, special tokens included; "
                                                                   "default the model's context, at most 1024. "
                                                                   "Longer sentences are windowed."})

    def __post_init__(self):
        for name in ("max_iter", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"probe {name} must be at least 1, not {getattr(self, name)}.")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ConfigError(f"probe max_sentences must be at least 1 (or unset for all), not {self.max_sentences}.")
        if self.l2 < 0:
            raise ConfigError(f"probe l2 must be zero or positive, not {self.l2}.")


@dataclass
class ProbeResult:
    accuracy: float  # on the test words; words whose tag was never seen in training count as wrong
    majority_baseline: float  # test accuracy of always predicting the most frequent training tag
    majority_tag: str
    accuracy_seen_words: float | None  # on test words whose form occurs in the training split
    seen_words: int  # test words whose form occurs in the training split
    layer: int
    train_sentences: int
    train_words: int
    test_sentences: int
    test_words: int
    tags: int  # distinct tags in the training split
    unseen_tags: dict[str, int]  # test tags absent from training -> number of test words with them

    def as_dict(self) -> dict:
        return {key: (round(value, 5) if isinstance(value, float) else value) for key, value in asdict(self).items()}


def load_sentences(source: str | Path | list[Sentence], what: str, max_sentences: int | None = None,
                   reader=read_conllu) -> list[Sentence]:
    sentences = list(source) if isinstance(source, (list, tuple)) else reader(source, what=what)
    if not sentences:
        raise ConfigError(f"the {what} has no sentences.")
    return sentences[:max_sentences] if max_sentences else sentences


def majority(tags: list[str]) -> str:
    """The most frequent tag; ties go to the alphabetically first."""
    counts = Counter(tags)
    return min(counts, key=lambda tag: (-counts[tag], tag))


def pos_probe(model_or_folder, train_conllu: str | Path | list[Sentence], test_conllu: str | Path | list[Sentence],
              config: ProbeConfig | None = None, progress: bool = False, tokenizer=None) -> ProbeResult:
    """Train a linear POS probe on `train_conllu` and measure it on `test_conllu`.

    model_or_folder: a model folder or hub name (loaded with langswap.models.load_model, its tokenizer with
    load_tokenizer unless `tokenizer` is given), or a loaded model together with `tokenizer`. The splits are
    .conllu paths or lists of Sentence."""
    config = config or ProbeConfig()
    if isinstance(model_or_folder, (str, Path)):
        with transformers_bars(progress):
            model = load_model(model_or_folder, require_head=False)  # a probe reads hidden states only
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_or_folder)
    else:
        model = model_or_folder
        if tokenizer is None:
            raise ConfigError("pos_probe was given a loaded model but no tokenizer; pass tokenizer=..., or give the "
                              "model folder instead.")
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer)
    train = load_sentences(train_conllu, "training CoNLL-U file", config.max_sentences)
    test = load_sentences(test_conllu, "test CoNLL-U file", config.max_sentences)
    train_tags = [tag for sentence in train for tag in sentence.tags]
    test_tags = [tag for sentence in test for tag in sentence.tags]
    tag_ids = {tag: index for index, tag in enumerate(sorted(set(train_tags)))}

    options = dict(layer=config.layer, batch_size=config.batch_size, max_length=config.max_length)
    train_features = word_features(model, tokenizer, train, progress=progress, **options)
    test_features = word_features(model, tokenizer, test, progress=progress, **options)
    classifier = train_logistic_regression(train_features, torch.tensor([tag_ids[tag] for tag in train_tags]),
                                           num_classes=len(tag_ids), l2=config.l2, max_iter=config.max_iter)
    gold = torch.tensor([tag_ids.get(tag, -1) for tag in test_tags])  # -1: never predicted, so counted wrong
    correct = classifier.predict(test_features) == gold

    train_forms = {word for sentence in train for word in sentence.words}
    seen = torch.tensor([word in train_forms for sentence in test for word in sentence.words], dtype=torch.bool)
    top = majority(train_tags)
    unseen_tags = Counter(tag for tag in test_tags if tag not in tag_ids)
    result = ProbeResult(
        accuracy=float(correct.float().mean()),
        majority_baseline=sum(tag == top for tag in test_tags) / len(test_tags),
        majority_tag=top,
        accuracy_seen_words=float(correct[seen].float().mean()) if bool(seen.any()) else None,
        seen_words=int(seen.sum()),
        layer=config.layer,
        train_sentences=len(train), train_words=len(train_tags),
        test_sentences=len(test), test_words=len(test_tags),
        tags=len(tag_ids), unseen_tags=dict(sorted(unseen_tags.items())))
    logger.info("POS probe, layer %d: accuracy %.4f (majority baseline %.4f) | train %s sentences, %s words | test "
                "%s sentences, %s words | %d tags%s", config.layer, result.accuracy, result.majority_baseline,
                f"{len(train):,}", f"{len(train_tags):,}", f"{len(test):,}", f"{len(test_tags):,}", len(tag_ids),
                f" | {sum(unseen_tags.values())} test words with tags unseen in training" if unseen_tags else "")
    return result
