"""Training a target tokenizer of the source model's family (`langswap tokenizer`).

The new tokenizer keeps the source's normaliser, pre-tokeniser, decoder, post-processor, chat template and the
settings of its tokenization model (byte fallback, unknown token, `##` prefix), so byte-level BPE stays byte-level
BPE, SentencePiece stays SentencePiece and WordPiece stays WordPiece. Its pieces are trained with the `tokenizers`
trainer of the source's model type, on the text as the source's pipeline reads it, cut where the source family's
conventions cut (resources/conventions.py: for the SentencePiece family, word starts, digits and punctuation as the
source's own pieces show them; other families by their own pre-tokeniser).

The vocabulary size asked is the size of the whole vocabulary the model gets. It holds, in this order:

- the source's added tokens that are kept (`AddedTokens`), at ids 0, 1, ...: tokens with a role (bos, eos, pad, unk,
  mask, cls, sep), those the chat template uses, those the tokenizer's or the model's config names (image and tool
  tokens), and any other added token that is not a placeholder. Placeholders (`<unusedN>`, `[unusedN]`,
  `<|reserved_special_token_N|>`, DeepSeek's `<｜place▁holder▁no▁N｜>`, Mistral's `[control_N]` and `<SPECIAL_N>`)
  are dropped unless `keep_placeholders`.
  Each kept token keeps its flags (special or not, normalised, stripping);
- the learnt pieces;
- for byte-fallback BPE (Llama-2, Gemma, Mistral), the 256 `<0xNN>` entries that spell characters the pieces lack,
  as ordinary vocabulary entries, as the source has them.

Not handled: slow tokenizers (no Rust trainer) and WordLevel models.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

from langswap.errors import VocabularyError
from langswap.resources.conventions import Conventions, measure_conventions, model_unknown
from langswap.resources.text import read_text_lines
from langswap.tokens import _component_types, names_a_token, special_token_roles

logger = logging.getLogger(__name__)

# a name of reserved, unused slots ending in its number: <unusedN>, [unusedN], <|reserved_special_token_N|>,
# DeepSeek's <｜place▁holder▁no▁N｜>, Mistral's [control_N] and <SPECIAL_N>
PLACEHOLDER = re.compile(r"(?i)(unused|reserved|place[\W_\u2581]*holder|control|special)[\W_\u2581]*"
                         r"(special[\W_\u2581]*token[\W_\u2581]*)?(no[\W_\u2581]*)?\d+[\W_\u2581]*$")
KINDS = ("role", "chat_template", "config", "other", "placeholder")
TRAINABLE = ("BPE", "Unigram", "WordPiece")


@dataclass
class AddedTokens:
    """The source's added tokens by kind (`KINDS`, first that applies), each a list of their tokenizer.json entries
    in source id order, and which kinds the new vocabulary keeps."""

    by_kind: dict[str, list[dict]]
    keep_placeholders: bool = False

    @property
    def kept(self) -> list[dict]:
        kinds = [kind for kind in KINDS if kind != "placeholder" or self.keep_placeholders]
        return sorted((entry for kind in kinds for entry in self.by_kind.get(kind, [])), key=lambda e: e["id"])

    def counts(self) -> dict[str, int]:
        return {kind: len(self.by_kind.get(kind, [])) for kind in KINDS}


@dataclass
class TrainedTokenizer:
    """A tokenizer trained by `train_tokenizer_on_lines` and what it holds."""

    tokenizer: object
    asked: int
    learnt: int  # pieces the trainer learnt (the alphabet included)
    byte_tokens: int
    added: AddedTokens
    conventions: Conventions
    lines: int
    warnings: list[str] = field(default_factory=list)
    never_shown: int | None = None  # pieces whose text the lines hold that never occur as they are read

    def report(self) -> dict:
        counts = self.added.counts()
        kept = {kind: number for kind, number in counts.items()
                if kind != "placeholder" or self.added.keep_placeholders}
        return {"vocab_size": len(self.tokenizer), "asked": self.asked, "learnt": self.learnt,
                "byte_fallback": self.byte_tokens, "kept_added": kept,
                "dropped_added": {} if self.added.keep_placeholders else {"placeholder": counts["placeholder"]},
                "conventions": self.conventions.describe(), "lines": self.lines, "never_shown": self.never_shown,
                "warnings": self.warnings}

    def summary(self) -> str:
        kept = self.report()["kept_added"]
        parts = ", ".join(f"{number:,} {kind.replace('_', ' ')}" for kind, number in kept.items() if number)
        dropped = self.added.counts()["placeholder"] if not self.added.keep_placeholders else 0
        return (f"{len(self.tokenizer):,} tokens: {self.learnt:,} learnt, {self.byte_tokens:,} byte fallback, "
                f"{sum(kept.values()):,} added tokens kept ({parts or 'none'})"
                + (f", {dropped:,} placeholders dropped" if dropped else "") + f"; {self.conventions.describe()}")


def train_tokenizer(source_tokenizer, text_path: str | Path, vocab_size: int | None = None,
                    max_lines: int | None = None, progress: bool = False, keep_placeholders: bool = False):
    """A tokenizer like `source_tokenizer`, trained on the lines of `text_path` (UTF-8, optionally .gz)."""
    return train_tokenizer_report(source_tokenizer, text_path, vocab_size, max_lines, progress,
                                  keep_placeholders).tokenizer


def train_tokenizer_report(source_tokenizer, text_path: str | Path, vocab_size: int | None = None,
                           max_lines: int | None = None, progress: bool = False,
                           keep_placeholders: bool = False) -> TrainedTokenizer:
    """`train_tokenizer`, with what the new vocabulary holds."""
    _check_fast(source_tokenizer)  # before the text is read
    lines = read_text_lines(text_path, what="tokenizer training text", max_lines=max_lines)
    trained = train_tokenizer_on_lines(source_tokenizer, lines, vocab_size, progress, keep_placeholders)
    logger.info("trained on %d lines of %s: %s", len(lines), text_path, trained.summary())
    return trained


def _check_fast(tokenizer) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise VocabularyError("training a tokenizer needs a fast source tokenizer (tokenizer.json).")


def train_tokenizer_on_lines(source_tokenizer, lines: list[str], vocab_size: int | None = None,
                             progress: bool = False, keep_placeholders: bool = False,
                             count_never_shown: bool = True) -> TrainedTokenizer:
    """`train_tokenizer_report` on lines in memory; `count_never_shown` False leaves `never_shown` uncounted (a
    tokenizer trained for a measurement of its own, not to train a model on the lines)."""
    _check_fast(source_tokenizer)
    spec = json.loads(source_tokenizer.backend_tokenizer.to_str())
    model_type = spec["model"]["type"]
    if model_type not in TRAINABLE:
        raise VocabularyError(f"a {model_type} tokenizer cannot be trained anew: only BPE, Unigram and WordPiece "
                              "tokenizers can. Give the transfer a target tokenizer trained elsewhere "
                              "(--target-tokenizer), or start from a model whose tokenizer is of one of those kinds.")
    vocab_size = vocab_size or len(source_tokenizer)
    added = classify_added_tokens(source_tokenizer, spec, model_config(source_tokenizer), keep_placeholders)
    byte_tokens = byte_fallback_tokens(spec)
    kept = added.kept
    room = vocab_size - len(byte_tokens) - len(kept)
    if room < 2:
        raise VocabularyError(
            f"--vocab-size {vocab_size:,} leaves no room for learnt pieces beside the {len(kept):,} added tokens kept "
            f"and the {len(byte_tokens):,} byte-fallback tokens this tokenizer family needs; give at least "
            f"{len(kept) + len(byte_tokens) + 2:,}.")
    conventions = measure_conventions(source_tokenizer)
    trained = train_pieces(spec, conventions, lines, room + len(kept), kept, progress)
    trained = _with_source_pipeline(trained, spec, kept, byte_tokens)
    learnt = len(trained["model"]["vocab"]) - len(kept) - len(byte_tokens)
    tokenizer = with_tokenizer_json(source_tokenizer, trained, kept)
    warnings = []
    if len(tokenizer) < vocab_size:
        warnings.append(f"the text gives {learnt:,} pieces, not the {room:,} asked: the vocabulary has "
                        f"{len(tokenizer):,} tokens, not {vocab_size:,}; give more text for a larger one.")
        logger.warning(warnings[-1])
    never, held = never_shown(tokenizer, lines, set(tokenizer.convert_tokens_to_ids(byte_tokens))) \
        if count_never_shown else (None, None)
    if never is not None and never > held / 10:
        warnings.append(f"{never:,} of the {held:,} pieces whose text the training text holds never occur when "
                        "it is read: the vocabulary holds its words whole, and a model trained on this text will "
                        "only ever lower the letters and syllables new text needs for other words (docs/design.md, "
                        "\"Tokens the training text never shows\"); a smaller vocabulary or more text shows more of "
                        "them.")
        logger.warning(warnings[-1])
    broken = conventions.breaks(measure_conventions(tokenizer))
    if broken:  # a defect of this module: the training split should rule these out
        warnings.append("the new pieces break the source's conventions: " + "; ".join(broken))
        logger.warning(warnings[-1])
    return TrainedTokenizer(tokenizer, vocab_size, learnt, len(byte_tokens), added, conventions, len(lines), warnings,
                            never)


def token_counts(tokenizer, lines: list[str], size: int) -> np.ndarray:
    """(size,) float64 count of each token id in `lines` (no special tokens added)."""
    counts = np.zeros(size, dtype=np.float64)
    for start in range(0, len(lines), 1000):
        ids = [i for row in tokenizer(lines[start:start + 1000], add_special_tokens=False)["input_ids"] for i in row]
        if ids:
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=size)[:size]
    return counts


def text_tokens(tokenizer, left_out: set[int] = frozenset()) -> list[str | None]:
    """Each token's text (`Vocabulary.word_text`: no surrounding whitespace), None for added tokens, `left_out` and
    tokens of partial UTF-8 or whitespace alone: the tokens a text can show as text."""
    from langswap.tokens import Vocabulary

    aside = set(tokenizer.added_tokens_decoder) | set(left_out)
    vocabulary = Vocabulary(tokenizer)
    return [None if index in aside else vocabulary.word_text(index) for index in range(len(tokenizer))]


def never_shown(tokenizer, lines: list[str], left_out: set[int] = frozenset()) -> tuple[int, int]:
    """(how many of `tokenizer`'s pieces whose text the lines hold never occur when `lines` are read, how many
    pieces' text the lines hold): learnt pieces (whose text came from the lines) and single characters the lines
    contain. Added tokens, `left_out`, pieces of partial UTF-8 or whitespace alone, and characters the lines never
    hold (most of a byte-level alphabet) are not counted: new text of the same kind needs them no more than the
    lines do."""
    shown = token_counts(tokenizer, lines, len(tokenizer)) > 0
    characters = set().union(*lines)
    held = [index for index, text in enumerate(text_tokens(tokenizer, left_out))
            if text and (len(text) > 1 or text in characters)]
    return int((~shown[held]).sum()), len(held)


def train_pieces(spec: dict, conventions: Conventions, lines: list[str], size: int, kept: list[dict],
                 progress: bool = False) -> dict:
    """The tokenizer.json of a tokenizer with the source pipeline's normaliser (`spec`) and a model of its type trained
    on `lines` to `size` tokens, `kept` (tokenizer.json added-token entries) first, its text cut as `conventions`
    say; its pre-tokeniser is the training one (`_with_source_pipeline` puts the source's back)."""
    training = training_tokenizer(spec, conventions)
    trainer = _trainer(spec, size, kept, progress)

    def batches(batch: int = 1000):
        for start in range(0, len(lines), batch):
            yield lines[start:start + batch]

    training.train_from_iterator(batches(), trainer=trainer, length=len(lines))
    return json.loads(training.to_str())


def classify_added_tokens(tokenizer, spec: dict, config: dict | None = None,
                          keep_placeholders: bool = False) -> AddedTokens:
    """The source's added tokens (`spec["added_tokens"]`) by kind; tokens with a role that are plain vocabulary
    entries (not added) are counted as added tokens with a role too, so that the new vocabulary has them."""
    roles = special_token_roles(tokenizer)
    role_ids = set(roles.values())
    unknown = model_unknown(spec)
    template = _chat_template_text(tokenizer)
    named = _config_named(tokenizer, config)
    entries = {entry["id"]: dict(entry) for entry in spec.get("added_tokens") or []}
    vocab = spec["model"]["vocab"]
    ids_of = {piece: index for index, (piece, _) in enumerate(vocab)} if spec["model"]["type"] == "Unigram" else vocab
    for token_id in role_ids - set(entries):
        content = tokenizer.convert_ids_to_tokens(token_id)
        entries[token_id] = {"id": token_id, "content": content, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
    if unknown and unknown in ids_of and ids_of[unknown] not in entries:
        entries[ids_of[unknown]] = {"id": ids_of[unknown], "content": unknown, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True}
    by_kind: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for token_id in sorted(entries):
        entry = entries[token_id]
        content = entry["content"]
        if token_id in role_ids or content == unknown:
            kind = "role"
        elif template and content in template:
            kind = "chat_template"
        elif content in named or token_id in named:
            kind = "config"
        elif PLACEHOLDER.search(content):
            kind = "placeholder"
        else:
            kind = "other"
        by_kind[kind].append(entry)
    return AddedTokens(by_kind, keep_placeholders)


def _chat_template_text(tokenizer) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(value) for value in template.values())
    return template or ""


def _config_named(tokenizer, config: dict | None) -> set:
    """Token strings the tokenizer's config names beside the roles (image, tool tokens: `image_token`, `boi_token`),
    and token ids the model's config names (`image_token_index`, `boi_token_index`, `image_token_id`)."""
    named: set = set()
    kwargs = getattr(tokenizer, "init_kwargs", {}) or {}
    for key, value in kwargs.items():
        if key.endswith("_token") and isinstance(value, str):
            named.add(value)
        elif key in ("model_specific_special_tokens", "extra_special_tokens") and isinstance(value, dict):
            named.update(v for v in value.values() if isinstance(v, str))
    for attribute in ("image_token", "boi_token", "eoi_token", "video_token", "audio_token"):
        value = getattr(tokenizer, attribute, None)
        if isinstance(value, str):
            named.add(value)

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if names_a_token(key):
                    values = value if isinstance(value, list) else [value]
                    named.update(v for v in values if isinstance(v, int) and not isinstance(v, bool))
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config or {})
    return named


def model_config(tokenizer) -> dict | None:
    """The model's config.json beside the tokenizer, when it was loaded from a model folder."""
    path = Path(str(getattr(tokenizer, "name_or_path", "") or "")) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def byte_fallback_tokens(spec: dict) -> list[str]:
    """The `<0xNN>` tokens of a byte-fallback BPE tokenizer's model vocabulary ([] for any other tokenizer)."""
    model = spec["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return []
    return [token for token in (f"<0x{byte:02X}>" for byte in range(256)) if token in model["vocab"]]


def training_tokenizer(spec: dict, conventions: Conventions):
    """The source's pipeline with an empty model of its type, no added tokens, no post-processor, and the training
    pre-tokeniser of its conventions: its normaliser and pre-tokeniser read text as the new pieces are learnt."""
    training = json.loads(json.dumps(spec))
    training["added_tokens"] = []
    training["post_processor"] = None
    training["pre_tokenizer"] = conventions.training_pre_tokenizer(spec.get("pre_tokenizer"))
    model = training["model"]
    if model["type"] == "BPE":
        model["vocab"], model["merges"] = {}, []
    elif model["type"] == "Unigram":
        unknown = model_unknown(spec)
        model["vocab"] = [[unknown, 0.0]] if unknown is not None else []
        model["unk_id"] = 0 if unknown is not None else None
    else:
        model["vocab"] = {}
    return Tokenizer.from_str(json.dumps(training))


def _trainer(spec: dict, size: int, kept: list[dict], progress: bool):
    """The `tokenizers` trainer of the source's model type for `size` tokens, the kept added tokens first."""
    model = spec["model"]
    special = [AddedToken(entry["content"], single_word=entry.get("single_word", False),
                          lstrip=entry.get("lstrip", False), rstrip=entry.get("rstrip", False),
                          normalized=entry.get("normalized", False), special=True) for entry in kept]
    if model["type"] == "BPE":
        options = {key: model[key] for key in ("continuing_subword_prefix", "end_of_word_suffix")
                   if model.get(key) is not None}
        parts = _component_types(spec.get("pre_tokenizer"))
        if any(part.get("type") == "ByteLevel" for part in parts):
            options["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
        return trainers.BpeTrainer(vocab_size=size, special_tokens=special, show_progress=progress, **options)
    if model["type"] == "Unigram":
        return trainers.UnigramTrainer(vocab_size=size, special_tokens=special, unk_token=model_unknown(spec),
                                       show_progress=progress)
    prefix = model.get("continuing_subword_prefix") or "##"
    return trainers.WordPieceTrainer(vocab_size=size, special_tokens=special, continuing_subword_prefix=prefix,
                                     show_progress=progress)


def _with_source_pipeline(trained: dict, spec: dict, kept: list[dict], byte_tokens: list[str]) -> dict:
    """The trained tokenizer.json with the source's pre-tokeniser, model settings and post-processor (its token ids
    moved to the new ones), the kept added tokens with their own flags, and the byte-fallback entries appended."""
    trained = json.loads(json.dumps(trained))
    trained["pre_tokenizer"] = spec.get("pre_tokenizer")
    model = trained["model"]
    for key, value in spec["model"].items():  # byte_fallback, unk_token, fuse_unk, ignore_merges, dropout ...
        if key not in ("vocab", "merges", "unk_id"):
            model[key] = value
    vocab = model["vocab"]
    if model["type"] == "Unigram":  # the trainer may learn a piece spelled as a kept token, which holds a slot first
        contents = {entry["content"] for entry in kept}
        vocab[:] = vocab[:len(kept)] + [item for item in vocab[len(kept):] if item[0] not in contents]
        unknown = model_unknown(spec)
        model["unk_id"] = next((index for index, (piece, _) in enumerate(vocab) if piece == unknown), None)
    ids = {piece: index for index, (piece, _) in enumerate(vocab)} if model["type"] == "Unigram" else dict(vocab)
    if byte_tokens and model["type"] == "BPE":
        missing = [token for token in byte_tokens if token not in vocab]
        vocab.update({token: len(vocab) + offset for offset, token in enumerate(missing)})
        ids = dict(vocab)
    trained["added_tokens"] = [{**entry, "id": ids[entry["content"]]} for entry in kept]
    trained["post_processor"] = _moved_ids(spec.get("post_processor"), ids)
    return trained


def _moved_ids(processor: dict | None, ids: dict[str, int]) -> dict | None:
    """A post-processor (tokenizers JSON) with the ids of the special tokens it inserts looked up in `ids`."""
    if processor is None:
        return None
    processor = json.loads(json.dumps(processor))

    def new_id(token: str) -> int:
        if token not in ids:
            raise VocabularyError(f"the source's post-processor inserts '{token}', which the new vocabulary lacks; "
                                  "it was dropped as a placeholder: add --keep-placeholders.")
        return ids[token]

    if processor.get("type") == "Sequence":
        processor["processors"] = [_moved_ids(part, ids) for part in processor.get("processors") or []]
    for value in (processor.get("special_tokens") or {}).values():
        value["ids"] = [new_id(token) for token in value["tokens"]]
    for key in ("cls", "sep"):
        if isinstance(processor.get(key), list):
            processor[key] = [processor[key][0], new_id(processor[key][0])]
    return processor


def _only_kept(config: dict, contents: set[str]) -> dict:
    """A tokenizer config without the lists' entries naming added tokens that were dropped."""
    def kept(value) -> bool:
        text = value.get("content") if isinstance(value, dict) else value
        return not isinstance(text, str) or text in contents or not PLACEHOLDER.search(text)

    for key in ("additional_special_tokens", "extra_special_tokens"):
        value = config.get(key)
        if isinstance(value, list):
            config[key] = [item for item in value if kept(item)]
    return config


def with_tokenizer_json(tokenizer, spec: dict, kept: list[dict] | None = None):
    """`tokenizer` with its tokenizer.json replaced by `spec`, reloaded through save_pretrained, so the wrapper keeps
    its special tokens, settings and chat template. With `kept` (the added tokens `spec` holds, at new ids), the
    source's config files are rewritten to name only those."""
    with tempfile.TemporaryDirectory(prefix="langswap-tokenizer-") as folder:
        tokenizer.save_pretrained(folder)
        (Path(folder) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        if kept is not None:
            _config_names_kept(Path(folder), spec, {entry["content"] for entry in kept})
        return type(tokenizer).from_pretrained(folder)


def _config_names_kept(folder: Path, spec: dict, contents: set[str]) -> None:
    """The saved tokenizer_config.json and special_tokens_map.json naming only the added tokens kept, at their ids."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            config = _only_kept(json.loads(path.read_text(encoding="utf-8")), contents)
            if "added_tokens_decoder" in config:
                config["added_tokens_decoder"] = {
                    str(entry["id"]): {key: entry[key] for key in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special") if key in entry}
                    for entry in spec.get("added_tokens") or []}
            path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
