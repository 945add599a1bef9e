"""`enrich(config)`: TEMA (Zevallos, Bel and Farrús, EMNLP 2024), improving a poorly trained target-language model L2
with the token embeddings of a richly trained model L1 of the same hidden size, through a bilingual dictionary.

Read from the paper (its equations 1 and 2): for each translation pair, an L1 token w_m and
an L2 token u_n, and an anchor token present in both models (v_x its L1 row, v_y its L2 row; the paper uses "1"),

    u'_n = u_n + proj(v_x - w_m),    proj(a) = ((v_y . a) / ||a||^2) a.

Dictionary words that L2's vocabulary lacks are added to its tokenizer, and L2 is fine-tuned on the sentences of
target-language text that contain them, so that the new tokens have rows before they are moved.

Decided here (docs/design.md, "TEMA", says why):

- Tokens are matched to words through canonical tokens (`langswap.tokens`): a word is a whole-word token when a
  word-start token spells it exactly (`Ġhaus`, `▁haus`, WordPiece `haus`). Each dictionary pair is tried with the
  case variants of both words (as given, lower, title): the L1 side takes its first variant that is a token, the L2
  side every variant that is one (German nouns are capitalised in text and lower-case in MUSE).
- Several anchors (default: every digit and ASCII punctuation mark that is a token of both models) average their
  projections. An anchor is looked up as a bare token first, then as a word-start token. A pair whose L1 token is
  the anchor itself (a = 0) gets nothing from that anchor.
- An L2 token with several translations gets the mean of its pairs' changes (projection) or of their mapped rows
  (linear maps).
- The variant the paper invites (`method: lstsq | procrustes`): a linear map W from L1's to L2's embedding space,
  fitted on the pairs whose L2 token was in L2's vocabulary before (an added token's row is not a trained row),
  applied to every pair; the new row is (1 - blend) u_n + blend (mean of w_m W). `lstsq` is the least-squares W (it
  needs at least as many pairs as dimensions); `procrustes` is the orthogonal W of `resources.alignment.procrustes`
  times the single scale that fits best, since the two models' rows differ in length (on rows of one scale it is 1).
- Added words become tokens of the tokenizer's own model (byte-level or SentencePiece-style BPE with
  `ignore_merges`, so a word that is one vocabulary entry is one token; WordPiece by its longest match), not
  "added tokens", which match inside longer words and lose the space before them when decoded. Which words: those
  with a translation that is a whole-word L1 token, at most `max_new_words`; with target text, the most frequent
  there (in their most frequent case variant; words the text lacks are not added), without it in dictionary order.
  A new row starts as the mean of L2's rows of the word as L2 spelled it before (the `subword` fallback of
  `overlap`); with target text, embeddings-only fine-tuning (`langswap train --preset embeddings`) on the
  sentences that hold a new token trains it further, and only the new tokens' rows are taken from that run: every
  other row stays L2's own, so the record's changed rows are exactly the dictionary's.
- An untied output head gets the same treatment with the head rows of both models (`output_head: same`, the
  default; L1's input rows where L1 ties its head), or is left alone (`keep`). A tied head is the input matrix.
  Output biases are not changed.

Not handled: multi-word dictionary entries (no token spells them), Unigram tokenizers and BPE tokenizers without
word-level pre-tokenisation (Llama-2) when words are to be added (set max_new_words: 0), encoder-decoder models.
"""

from __future__ import annotations

import json
import logging
import re
import string
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from langswap import __version__
from langswap.config import to_dict
from langswap.errors import ConfigError, MissingResourceError, VocabularyError
from langswap.files import refuse_existing
from langswap.locking import OutputLock
from langswap.methods.base import TransferInputs, make_config
from langswap.methods.provenance import show_token, write_table
from langswap.models import is_tied, load_config, load_model, load_tokenizer, save_tokenizer, transformers_bars
from langswap.numerics import refuse_non_finite
from langswap.records import EnrichRecord
from langswap.reports import ChangeNorm, EnrichSection, NewWordTraining
from langswap.resources.alignment import procrustes
from langswap.resources.dictionary import Dictionary, case_variants, check_direction
from langswap.resources.text import read_text_lines
from langswap.surgery import SourceMatrices, read_source_matrices
from langswap.tokens import BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, Vocabulary, bytes_to_unicode
from langswap.training.run import TrainConfig, train
from langswap.transfer.steps import apply_method, load_checked_model, load_vocabulary, write_model_folder

logger = logging.getLogger(__name__)

METHODS = ("projection", "lstsq", "procrustes")
HEAD_CHOICES = ("same", "keep")
DEFAULT_ANCHORS = tuple(string.digits) + tuple(string.punctuation)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"\w+")
INTACT = "Give an intact checkpoint."  # what to do about a model with NaN or infinite weights
PROVENANCE_COLUMNS = ("id", "token", "translations", "change_norm", "row")


@dataclass(frozen=True, kw_only=True)
class EnrichConfig:
    """TEMA: enrich a poorly trained target-language model (L2) with the embeddings of a richly trained one (L1)."""

    l1: str = field(default="", metadata={"cli": ("enrich",),
        "help": "Richly trained model folder (L1) with its tokenizer, e.g. "
                "SmolLM2-135M (required)."})
    l2: str = field(default="", metadata={"cli": ("enrich",),
        "help": "Poorly trained target-language model folder (L2) with its "
                "tokenizer, of L1's hidden size (required)."})
    dictionary: str = field(default="", metadata={"cli": ("enrich",),
        "help": "Bilingual dictionary, source<TAB>target, L1's language "
                "first (required)."})
    output: str = field(default="", metadata={"cli": ("enrich",), "help": "Output model folder (required)."})
    overwrite: bool = field(default=False, metadata={"cli": ("enrich",), "help": "Replace an existing output folder."})
    method: Literal["projection", "lstsq", "procrustes"] = field(default="projection", metadata={"cli": ("enrich",),
        "help": "projection: the paper's u + proj(v_x - w); lstsq or procrustes: a linear map from L1's to L2's "
                "embedding space fitted on the dictionary pairs, blended into the old rows.", "choices": METHODS})
    blend: float = field(default=0.5, metadata={"help": "lstsq/procrustes: new row = (1 - blend) x old row + "
                                                        "blend x mapped L1 row."})
    anchors: list[str] = field(default_factory=list, metadata={
        "help": "projection: anchor tokens present in both models (the paper: 1); several average their projections. "
                "Empty: every digit and punctuation mark that is a token of both."})
    output_head: Literal["same", "keep"] = field(default="same", metadata={
        "help": "An untied output head: same (enriched like the input embeddings, from L1's head rows) or keep "
                "(left as it is).", "choices": HEAD_CHOICES})
    target_text: str | None = field(default=None, metadata={"cli": ("enrich",),
        "help": "Target-language text: its sentences that "
                "hold added words fine-tune their rows."})
    max_new_words: int = field(default=1000, metadata={"help": "Dictionary words L2 lacks that are added to its "
                                                               "tokenizer, at most (0: none)."})
    max_sentences: int = field(default=20000, metadata={"help": "Sentences of target_text fine-tuned on, at most."})
    train_steps: int = field(default=100, metadata={"help": "Updates of the embeddings-only fine-tuning of the "
                                                            "added words."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per update of that fine-tuning."})
    sequence_length: int = field(default=128, metadata={"help": "Tokens per packed sequence of that fine-tuning."})
    learning_rate: float | None = field(default=None, metadata={"help": "Peak rate of that fine-tuning; default "
                                                                        "`langswap train`'s."})
    seed: int = field(default=0, metadata={"help": "Seed of the fine-tuning's data order."})
    language: str | None = field(default=None, metadata={"help": "L2's ISO 639 code (e.g. de), for the model card."})

    @staticmethod
    def resolve_anchors(value, where: str) -> list[str]:
        """A list of anchor strings; one anchor may be given alone, and numbers (YAML reads `1` as one) are
        taken as their text."""
        values = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(item, (str, int)) and not isinstance(item, bool) for item in values):
            raise ConfigError(f"'{where.rstrip('.')}' must be a list of tokens (e.g. [\"1\", \".\"]), not {value!r}.")
        return [str(item) for item in values]

    def validate(self) -> None:
        """Everything that can be checked before a model is loaded."""
        for name, fix in (("l1", "the richly trained model folder"), ("l2", "the model folder to enrich"),
                          ("dictionary", "a source<TAB>target file"), ("output", "the folder to write to")):
            if not getattr(self, name):
                raise ConfigError(f"{name} is not set: give {fix} (--{name.replace('_', '-')} PATH, or `{name}:` "
                                  "in the YAML).")
        for name in ("dictionary", "target_text"):
            value = getattr(self, name)
            if value and not Path(value).is_file():
                raise MissingResourceError(f"{name} '{value}' does not exist or is not a file.")
        if self.method not in METHODS:
            raise ConfigError(f"method is {self.method!r}; choose one of: {', '.join(METHODS)}.")
        if self.output_head not in HEAD_CHOICES:
            raise ConfigError(f"output_head is {self.output_head!r}; choose one of: {', '.join(HEAD_CHOICES)}.")
        if not 0 <= self.blend <= 1:
            raise ConfigError(f"blend is {self.blend}; it must be between 0 (keep L2's rows) and 1 (take the "
                              "mapped L1 rows).")
        if any(not anchor for anchor in self.anchors):
            raise ConfigError("anchors holds an empty string; give tokens such as \"1\", or no anchors for the "
                              "default (digits and punctuation).")
        for name, least in (("max_new_words", 0), ("max_sentences", 1), ("train_steps", 1), ("batch_size", 1),
                            ("sequence_length", 4)):
            if getattr(self, name) < least:
                raise ConfigError(f"{name} is {getattr(self, name)}; it must be at least {least}.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate is {self.learning_rate}; give a positive rate or leave it unset.")
        for name in ("l1", "l2"):
            if Path(self.output).resolve() == Path(getattr(self, name)).resolve():
                raise ConfigError(f"output is the {name.upper()} folder '{self.output}'; write the enriched model "
                                  "to another folder.")
        refuse_existing(self.output, self.overwrite)
        _refuse_other_width(_hidden_size(self.l1), _hidden_size(self.l2), self)


def _hidden_size(model: str) -> int | None:
    return getattr(load_config(model), "hidden_size", None)


def _refuse_other_width(l1_size: int | None, l2_size: int | None, config: EnrichConfig, what: str = "hidden size"):
    if l1_size is not None and l2_size is not None and l1_size != l2_size:
        raise ConfigError(f"L1 '{config.l1}' has {what} {l1_size} and L2 '{config.l2}' has {what} {l2_size}; TEMA "
                          "adds L1 rows to L2 rows, so both must be the same. Give an L1 of width "
                          f"{l2_size} (or an L2 of width {l1_size}).")


@dataclass
class EnrichReport:
    output: Path
    counts: dict
    change_norm: ChangeNorm  # mean and max of ||u' - u|| over the changed rows
    added_words: list[str]
    training: NewWordTraining | None
    seconds: dict

    def summary(self) -> str:
        """What `langswap enrich` prints: the folder and its rows, the change of the rows, the words added."""
        counts = " | ".join(f"{key} {value:,}" for key, value in self.counts.items())
        lines = [f"wrote {self.output}: {counts}"]
        if self.change_norm.summary():
            lines.append(f"row change (L2 norm): {self.change_norm.summary()}")
        if self.added_words:
            shown = ", ".join(self.added_words[:10]) + (", ..." if len(self.added_words) > 10 else "")
            lines.append(f"added {len(self.added_words):,} dictionary words to L2's vocabulary: {shown}")
        return "\n".join(lines)


# -- words and tokens -------------------------------------------------------------------------------------------------

def whole_word_tokens(vocabulary) -> dict[str, int]:
    """Word -> id of the word-start token that spells exactly it (the lowest id where several do); special,
    partial UTF-8 and whitespace tokens are none."""
    words: dict[str, int] = {}
    for (raw, word_start), token_id in vocabulary.index().items():
        if not word_start:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text and text == text.strip():
            words[text] = token_id
    return words


def anchor_ids(vocabulary, anchors) -> dict[str, int]:
    """Anchor text -> id: the bare token that spells it, else the word-start one; anchors it lacks are left out."""
    index = vocabulary.index()
    found = {}
    for anchor in anchors:
        token_id = index.get((anchor.encode("utf-8"), False), index.get((anchor.encode("utf-8"), True)))
        if token_id is not None:
            found[anchor] = token_id
    return found


def resolve_anchors(config: EnrichConfig, l1_vocabulary, l2_vocabulary) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(anchors, their L1 ids, their L2 ids). Anchors given but missing from a model are an error naming them."""
    in_l1 = anchor_ids(l1_vocabulary, config.anchors or DEFAULT_ANCHORS)
    in_l2 = anchor_ids(l2_vocabulary, config.anchors or DEFAULT_ANCHORS)
    if config.anchors:
        lacking = {anchor: [name for name, found in (("L1", in_l1), ("L2", in_l2)) if anchor not in found]
                   for anchor in config.anchors}
        missing = [f"'{anchor}' (not in {' or '.join(names)})" for anchor, names in lacking.items() if names]
        if missing:
            raise VocabularyError(
                f"anchor token(s) {', '.join(missing)} must be tokens of both models (L1 '{config.l1}', L2 "
                f"'{config.l2}'). Give anchors both vocabularies hold, such as \"1\" (the paper's), or no anchors "
                "for every shared digit and punctuation mark.")
    anchors = [anchor for anchor in (config.anchors or DEFAULT_ANCHORS) if anchor in in_l1 and anchor in in_l2]
    if not anchors:
        raise VocabularyError(f"no digit or punctuation mark is a token of both L1 '{config.l1}' and L2 "
                              f"'{config.l2}'; give anchors (--set anchors=[TOKEN]) that both vocabularies hold.")
    return anchors, np.array([in_l1[a] for a in anchors]), np.array([in_l2[a] for a in anchors])


@dataclass
class TranslationPairs:
    """Row-aligned (L1 token, L2 token) pairs; `fit` marks the pairs a linear map is fitted on."""

    l1_ids: np.ndarray  # (P,)
    l2_ids: np.ndarray  # (P,)
    fit: np.ndarray  # (P,) bool

    def __len__(self) -> int:
        return len(self.l1_ids)


def translation_pairs(dictionary, l1_words: dict[str, int], l2_words: dict[str, int],
                      added_ids: set[int] = frozenset()) -> TranslationPairs:
    """Each dictionary pair as token pairs: the first case variant of its source word that is an L1 whole-word
    token, with every case variant of its target word that is an L2 one; without repeats. Pairs whose L2 token is
    in `added_ids` are not fitted on."""
    seen: set[tuple[int, int]] = set()
    for source, target in dictionary.pairs:
        l1_id = next((l1_words[v] for v in case_variants(source) if v in l1_words), None)
        if l1_id is None:
            continue
        for variant in case_variants(target):
            if variant in l2_words:
                seen.add((l1_id, l2_words[variant]))
    pairs = sorted(seen, key=lambda pair: (pair[1], pair[0]))
    l1_ids = np.array([p[0] for p in pairs], dtype=np.int64)
    l2_ids = np.array([p[1] for p in pairs], dtype=np.int64)
    return TranslationPairs(l1_ids, l2_ids, np.array([i not in added_ids for i in l2_ids], dtype=bool))


def words_to_add(dictionary, l1_words: dict[str, int], l2_words: dict[str, int], limit: int,
                 text_counts: Counter | None) -> list[str]:
    """Target-side dictionary words (letters only) that no case variant of which is an L2 whole-word token and
    whose source word is an L1 one: with text counts, the `limit` most frequent in the form most frequent there
    (absent ones not at all); without, the first `limit` in dictionary order, as written there."""
    if limit == 0:
        return []
    chosen: dict[str, int] = {}
    for source, target in dictionary.pairs:
        variants = case_variants(target)
        if not target.isalpha() or any(v in l2_words for v in variants):
            continue
        if not any(v in l1_words for v in case_variants(source)):
            continue
        if text_counts is None:
            chosen.setdefault(target, len(chosen))
            continue
        form = max(variants, key=lambda v: text_counts.get(v, 0))  # ties: the first variant
        if text_counts.get(form, 0) > 0:
            chosen.setdefault(form, text_counts[form])
    if text_counts is None:
        return list(chosen)[:limit]
    return sorted(chosen, key=lambda word: -chosen[word])[:limit]  # stable: dictionary order among equals


def add_whole_words(tokenizer, vocabulary, words: list[str]):
    """`tokenizer` with `words` appended to its model's vocabulary, each one word-start token (ids len(tokenizer)
    onwards). A tokenizer family that cannot give such tokens is an error saying to add none."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec["model"]
    kind = (vocabulary.family, model.get("type"))
    if kind == (BYTE_LEVEL, "BPE"):
        table = bytes_to_unicode()
        forms = ["".join(table[byte] for byte in f" {word}".encode("utf-8")) for word in words]
    elif kind == (SENTENCEPIECE, "BPE"):
        forms = [vocabulary.details["marker"] + word for word in words]
    elif kind == (WORDPIECE, "WordPiece"):
        normalizer = tokenizer.backend_tokenizer.normalizer
        forms = [normalizer.normalize_str(word) if normalizer is not None else word for word in words]
    else:
        raise VocabularyError(f"L2's tokenizer ({vocabulary.family}, {model.get('type')} model) cannot take new "
                              "whole-word tokens here; set max_new_words: 0 to enrich only the words it has.")
    if model.get("type") == "BPE":
        model["ignore_merges"] = True  # a pre-tokenised word that is one vocabulary entry becomes that token
    next_id = len(tokenizer)
    model["vocab"].update({form: next_id + offset for offset, form in enumerate(forms)})
    with tempfile.TemporaryDirectory(prefix="langswap-enrich-tokenizer-") as folder:
        save_tokenizer(tokenizer, folder)
        (Path(folder) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        extended = load_tokenizer(folder, "L2 tokenizer with the added words")
    grown = Vocabulary(extended)
    unspelled = [word for offset, word in enumerate(words)
                 if grown.encode_surface(word, word_start=True) != [next_id + offset]]
    if len(extended) != next_id + len(words) or unspelled:
        raise VocabularyError(f"L2's tokenizer does not give added words as one token (e.g. "
                              f"{', '.join(map(repr, unspelled[:3]))}): its pre-tokenizer does not split text into "
                              "words. Set max_new_words: 0 to enrich only the words it has.")
    return extended, grown


# -- the arithmetic ---------------------------------------------------------------------------------------------------

def projection_offsets(l1_rows: torch.Tensor, l1_anchors: torch.Tensor, l2_anchors: torch.Tensor) -> torch.Tensor:
    """TEMA's change of each pair's L2 row, the mean over anchors k of proj(a_k) = ((v_y,k . a_k) / ||a_k||^2) a_k
    with a_k = v_x,k - w (equations 1 and 2).

    l1_rows: (P, d) the pairs' L1 rows w; l1_anchors, l2_anchors: (K, d) the anchors' rows v_x, v_y. Returns
    (P, d). An a_k of zero (w is that anchor) has no direction and contributes zero."""
    pairs, dim = l1_rows.shape
    assert l1_anchors.shape == l2_anchors.shape and l1_anchors.shape[1] == dim, (l1_anchors.shape, l2_anchors.shape)
    offsets = torch.zeros_like(l1_rows)
    for v_x, v_y in zip(l1_anchors, l2_anchors):
        a = v_x - l1_rows
        squared = (a * a).sum(dim=1)
        scale = torch.where(squared > 0, (a @ v_y) / squared.clamp_min(torch.finfo(a.dtype).tiny), 0.0)
        offsets += scale[:, None] * a
    return offsets / len(l1_anchors)


def fit_linear_map(source: torch.Tensor, target: torch.Tensor, method: str) -> torch.Tensor:
    """The (d, d) map W with source @ W close to target, for (n, d) row-paired matrices: least squares (`lstsq`,
    needs n >= d), or orthogonal Procrustes times the best single scale (`procrustes`)."""
    pairs, dim = source.shape
    assert target.shape == (pairs, dim), (source.shape, target.shape)
    if method == "lstsq":
        if pairs < dim:
            raise VocabularyError(f"method lstsq fits a {dim} x {dim} map and needs at least {dim} dictionary pairs "
                                  f"of tokens L2 had; there are {pairs}. Use method procrustes, or a larger "
                                  "dictionary.")
        return torch.linalg.lstsq(source.double(), target.double()).solution.float()
    if method == "procrustes":
        rotation = torch.from_numpy(procrustes(source.numpy(), target.numpy())).double()
        rotated = source.double() @ rotation
        scale = (rotated * target.double()).sum() / (source.double() ** 2).sum().clamp_min(1e-30)
        return (scale * rotation).float()
    raise ValueError(method)


def enriched_rows(l1_matrix: torch.Tensor, l2_matrix: torch.Tensor, pairs: TranslationPairs, method: str,
                  blend: float, l1_anchor_ids: np.ndarray, l2_anchor_ids: np.ndarray
                  ) -> tuple[np.ndarray, torch.Tensor]:
    """(the L2 ids the pairs name, sorted; their new rows) for float32 matrices l1_matrix (V1, d), l2_matrix (V2, d).

    projection: u + the mean over the token's pairs of `projection_offsets`; lstsq/procrustes: (1 - blend) u +
    blend x the mean over its pairs of w @ W, W fitted on the `fit` pairs."""
    rows, inverse = np.unique(pairs.l2_ids, return_inverse=True)
    l1_rows = l1_matrix[torch.from_numpy(pairs.l1_ids)]
    if method == "projection":
        per_pair = projection_offsets(l1_rows, l1_matrix[torch.from_numpy(l1_anchor_ids)],
                                      l2_matrix[torch.from_numpy(l2_anchor_ids)])
    else:
        fit = torch.from_numpy(pairs.fit)
        mapping = fit_linear_map(l1_rows[fit], l2_matrix[torch.from_numpy(pairs.l2_ids)][fit], method)
        per_pair = l1_rows @ mapping
    index = torch.from_numpy(inverse.reshape(-1))
    means = torch.zeros(len(rows), l1_matrix.shape[1]).index_add_(0, index, per_pair)
    means /= torch.bincount(index, minlength=len(rows)).unsqueeze(1)
    old = l2_matrix[torch.from_numpy(rows)]
    new = old + means if method == "projection" else (1 - blend) * old + blend * means
    return rows, new


# -- the run ----------------------------------------------------------------------------------------------------------

def enrich(config: EnrichConfig, progress: bool = False) -> EnrichReport:
    """Enrich `config.l2` from `config.l1` as `config` says and write the output folder; returns what happened.
    Everything cheap is checked first; one process at a time writes an output folder (`langswap.locking`)."""
    config.validate()
    with OutputLock(config.output, "enrich output folder"), transformers_bars(progress):
        return _enrich(config, progress)


def _enrich(config: EnrichConfig, progress: bool) -> EnrichReport:
    config.validate()
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    _, l1_vocabulary = load_vocabulary(config.l1, f"L1 tokenizer (model folder '{config.l1}' must hold its tokenizer)")
    l2_tokenizer, l2_vocabulary = load_vocabulary(config.l2, f"L2 tokenizer (model folder '{config.l2}' must hold "
                                                             "its tokenizer)")
    dictionary = Dictionary.load(config.dictionary)
    l1_words, l2_words = whole_word_tokens(l1_vocabulary), whole_word_tokens(l2_vocabulary)
    direction = check_direction(dictionary, set(l1_words), set(l2_words), f"L1's vocabulary ('{config.l1}')",
                                f"L2's vocabulary ('{config.l2}')")
    anchors, l1_anchor_ids, l2_anchor_ids = ([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if config.method == "projection":  # the linear maps use no anchors
        anchors, l1_anchor_ids, l2_anchor_ids = resolve_anchors(config, l1_vocabulary, l2_vocabulary)
    lines = (read_text_lines(config.target_text, "target text") if config.target_text and config.max_new_words
             else None)
    counts = Counter(word for line in lines for word in WORD.findall(line)) if lines else None
    added = words_to_add(dictionary, l1_words, l2_words, config.max_new_words, counts)
    if not translation_pairs(dictionary, l1_words, l2_words).l1_ids.size and not added:
        raise VocabularyError(
            f"no pair of dictionary '{dictionary.name}' has its source word as a whole-word token of L1 and its "
            "target word as one of L2 (nor a word L2 lacks that could be added: max_new_words is "
            f"{config.max_new_words}). Check that the dictionary is source<TAB>target for these two models.")

    # loaded and checked as the transfer loads its source; of L1 only the token matrices are kept, so its model is
    # freed before L2's loads
    l1_matrices = load_checked_model(config.l1, l1_vocabulary, f"L1 '{config.l1}'", INTACT)[1]
    model, l2_matrices = load_checked_model(config.l2, l2_vocabulary, f"L2 '{config.l2}'", INTACT)
    _refuse_other_width(l1_matrices.embeddings.shape[1], l2_matrices.embeddings.shape[1], config, "embedding width")
    seconds["load"] = time.perf_counter() - clock

    training = None
    if added:
        clock = time.perf_counter()
        model, l2_tokenizer, l2_vocabulary, training = _add_words(config, model, l2_tokenizer, l2_vocabulary,
                                                                 l2_matrices, added, lines, progress)
        l2_words = whole_word_tokens(l2_vocabulary)
        l2_matrices = read_source_matrices(model, len(l2_vocabulary))
        seconds["add_words"] = time.perf_counter() - clock

    clock = time.perf_counter()
    added_ids = set(range(len(l2_vocabulary) - len(added), len(l2_vocabulary)))
    pairs = translation_pairs(dictionary, l1_words, l2_words, added_ids)
    rows, norms = _move_rows(config, model, l1_matrices, l2_matrices, pairs, l1_anchor_ids, l2_anchor_ids)
    seconds["enrich"] = time.perf_counter() - clock

    change = norms["input"]
    record_counts = {"dictionary_entries": len(dictionary), "translation_pairs": len(pairs),
                     "pairs_fitted": int(pairs.fit.sum()) if config.method != "projection" else 0,
                     "rows_changed": len(rows), "words_added": len(added), "anchors": len(anchors),
                     "l2_vocabulary": len(l2_vocabulary)}
    change_norm = ChangeNorm(mean=round(float(change.mean()), 6), max=round(float(change.max()), 6))
    if "head" in norms:
        change_norm.head_mean = round(float(norms["head"].mean()), 6)
        change_norm.head_max = round(float(norms["head"].max()), 6)
    record = EnrichRecord(
        langswap_version=__version__,
        config=to_dict(config),
        enrich=EnrichSection(method=config.method, l1=config.l1, l2=config.l2, anchors=anchors,
                             output_head=config.output_head if l2_matrices.output_embeddings is not None else "tied",
                             added_words=added, changed_rows=rows.tolist()),
        seed=config.seed,
        counts=record_counts,
        change_norm=change_norm,
        dictionary_direction=direction,
        l1_vocabulary=l1_vocabulary.summary(),
        l2_vocabulary=l2_vocabulary.summary(),
        tied_embeddings=l2_matrices.tied,
        new_word_training=training,
        seconds={key: round(value, 2) for key, value in seconds.items()},
    )
    _write_output(config, model, l2_tokenizer, record, rows, change, pairs, l1_vocabulary, l2_vocabulary,
                  added_ids)
    logger.info("enrich (%s): %s of %s L2 rows changed from %s pairs | %s words added | change norm mean %.4f, "
                "max %.4f", config.method, f"{len(rows):,}", f"{len(l2_vocabulary):,}", f"{len(pairs):,}",
                f"{len(added):,}", change_norm.mean, change_norm.max)
    return EnrichReport(Path(config.output), record_counts, change_norm, added, training, record.seconds)


def _move_rows(config: EnrichConfig, model, l1_matrices: SourceMatrices, l2_matrices: SourceMatrices,
               pairs: TranslationPairs, l1_anchor_ids: np.ndarray, l2_anchor_ids: np.ndarray
               ) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """The pairs' L2 rows of `model` moved (`enriched_rows`): the input matrix, and an untied head with
    `output_head: same` (from L1's head rows, or its input rows where L1 ties its head). Returns (the changed row
    ids, the L2 norm of each one's change by matrix: "input", and "head" where it was moved)."""
    matrices = [("input", l1_matrices.embeddings, l2_matrices.embeddings, model.get_input_embeddings().weight)]
    if l2_matrices.output_embeddings is not None and config.output_head == "same":
        l1_head = (l1_matrices.output_embeddings if l1_matrices.output_embeddings is not None
                   else l1_matrices.embeddings)
        matrices.append(("head", l1_head, l2_matrices.output_embeddings, model.get_output_embeddings().weight))
    norms = {}
    for which, l1_matrix, l2_matrix, weight in matrices:
        rows, new = enriched_rows(l1_matrix, l2_matrix, pairs, config.method, config.blend, l1_anchor_ids,
                                  l2_anchor_ids)
        norms[which] = (new - l2_matrix[torch.from_numpy(rows)]).norm(dim=1)
        with torch.no_grad():
            weight[torch.from_numpy(rows)] = new.to(weight.dtype)
    refuse_non_finite(model, "the enriched model", "The L1 or L2 rows it was made from are not finite, or the "
                      "anchors' rows are degenerate; try other anchors.")
    return rows, norms


def _add_words(config: EnrichConfig, model, tokenizer, vocabulary, matrices: SourceMatrices, words: list[str],
               lines: list[str] | None, progress: bool):
    """L2 (`model`, its `tokenizer`, `vocabulary` and token `matrices`) with `words` as new tokens: their rows the mean
    of L2's rows of their old spelling (`overlap` with the `subword` fallback, every other row copied), then, with
    target text, fine-tuned embeddings-only on the sentences that hold them. Returns (model, tokenizer, vocabulary,
    training summary or None)."""
    extended, grown = add_whole_words(tokenizer, vocabulary, words)
    inputs = TransferInputs(vocabulary, grown, matrices.embeddings)
    model, _, _ = apply_method(model, inputs, matrices, make_config("overlap", fallback="subword"))
    logger.info("added %d words to L2's tokenizer (%d tokens now)", len(words), len(extended))
    if lines is None:
        return model, extended, grown, None
    new_ids = set(range(len(vocabulary), len(grown)))
    sentences = _sentences_with(lines, set(words), new_ids, extended, config.max_sentences)
    return model, extended, grown, _train_new_rows(config, model, extended, sentences, new_ids, progress)


def _sentences_with(lines: list[str], words: set[str], token_ids: set[int], tokenizer, limit: int) -> list[str]:
    """Sentences of `lines` (split after . ! ?) in which the tokenizer gives one of `token_ids`, at most `limit`."""
    candidates = [sentence for line in lines for sentence in SENTENCE_END.split(line)
                  if not words.isdisjoint(WORD.findall(sentence))]
    found = []
    for start in range(0, len(candidates), 1000):
        chunk = candidates[start:start + 1000]
        for sentence, ids in zip(chunk, tokenizer(chunk, add_special_tokens=False)["input_ids"]):
            if not token_ids.isdisjoint(ids):
                found.append(sentence)
                if len(found) == limit:
                    return found
    return found


def _train_new_rows(config: EnrichConfig, model, tokenizer, sentences: list[str], new_ids: set[int],
                    progress: bool) -> NewWordTraining:
    """Embeddings-only `langswap train` of `model` on `sentences`, in a temporary folder beside the output; the new
    tokens' rows (input, and an untied head) are copied back into `model`, every other row is left as it was.
    Returns the training's summary."""
    if not sentences:
        raise VocabularyError(f"no sentence of target_text '{config.target_text}' holds an added word as a token "
                              "(only words after a space are). Give more target text, or no target text to keep "
                              "the added words' subword-mean rows.")
    tokens = sum(len(ids) + 1 for ids in tokenizer(sentences, add_special_tokens=False)["input_ids"])
    if tokens < config.sequence_length:
        raise ConfigError(f"the {len(sentences):,} sentences of target_text that hold added words have {tokens:,} "
                          f"tokens, fewer than one sequence of sequence_length {config.sequence_length}; give a "
                          "smaller sequence_length or more target text.")
    output = Path(config.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{output.name}.enrich-training-", dir=output.parent) as work:
        start = Path(work) / "l2-with-new-words"
        model.save_pretrained(start)
        save_tokenizer(tokenizer, start)
        corpus = Path(work) / "sentences.txt"
        corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        report = train(TrainConfig(
            model=str(start), train_text=str(corpus), output=str(Path(work) / "train"), preset="embeddings",
            steps=config.train_steps, batch_size=config.batch_size, sequence_length=config.sequence_length,
            learning_rate=config.learning_rate, seed=config.seed, save_steps=config.train_steps,
            eval_steps=config.train_steps, logging_steps=min(10, config.train_steps), save_total_limit=1),
            progress=progress)
        trained = load_model(report.model)
    ids = torch.tensor(sorted(new_ids))
    with torch.no_grad():
        layers = [(model.get_input_embeddings(), trained.get_input_embeddings())]
        if model.get_output_embeddings() is not None and not is_tied(model):
            layers.append((model.get_output_embeddings(), trained.get_output_embeddings()))
        for mine, theirs in layers:
            mine.weight[ids] = theirs.weight[ids].to(mine.weight.dtype)
    return NewWordTraining(sentences=len(sentences), tokens=tokens, steps=config.train_steps,
                           train_loss=report.phases[-1].train_loss if report.phases else None, preset="embeddings",
                           seconds=round(report.seconds, 1))


def _write_output(config: EnrichConfig, model, tokenizer, record: EnrichRecord, rows: np.ndarray, change: torch.Tensor,
                  pairs: TranslationPairs, l1_vocabulary, l2_vocabulary, added_ids: set[int]) -> None:
    """The output folder, written as the transfer writes its own (`transfer.steps.write_model_folder`), with a
    provenance.tsv line per changed L2 row: its id and token, the L1 tokens it was moved towards, the L2 norm of its
    change (`change`, in the order of `rows`), and whether it is an added word's row or one L2 had."""
    translations: dict[int, list[str]] = {}
    for l1_id, l2_id in zip(pairs.l1_ids.tolist(), pairs.l2_ids.tolist()):
        translations.setdefault(l2_id, []).append(show_token(l1_vocabulary, l1_id))
    lines = [(row, repr(show_token(l2_vocabulary, row)), " ".join(map(repr, translations[row])), f"{norm:.6f}",
              "added" if row in added_ids else "existing") for row, norm in zip(rows.tolist(), change.tolist())]

    def write_provenance(folder: Path) -> None:
        write_table(folder / "provenance.tsv", PROVENANCE_COLUMNS, lines)

    write_model_folder(Path(config.output), config.overwrite, model.save_pretrained, tokenizer, write_provenance,
                       record, language=config.language)
