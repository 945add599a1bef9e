"""How a tokenizer family cuts text, measured from the source's own vocabulary, and a training pre-tokeniser that
makes a new vocabulary follow it.

A byte-level BPE tokenizer (GPT-2, Llama-3, Qwen) and a WordPiece one (BERT) split text into words before their
model sees it (a split regex, or whitespace and punctuation), so a trainer given their pre-tokeniser learns pieces
within those words. A SentencePiece-style tokenizer (Gemma, Llama-2, Mistral, T5, XLM-R) does not: its normaliser
turns spaces into `▁` and its model reads the whole line (Gemma-3: `Replace(" ", "▁")`, then a split on " ", which
no longer occurs; Llama-2, Mistral: no split at all). The conventions its pieces keep (a piece starts a word with
`▁` and never spans words, digits stand alone, punctuation is never joined to a word) were options of the
SentencePiece trainer, not of the pipeline, so `train_new_from_iterator` on such a tokenizer sees each line as one
word and learns `De▁`, `en▁` and `Voer▁ex▁opdrachten▁`.

`Conventions` reads those options back from the source's pieces (its model vocabulary without added tokens and
byte-fallback entries) and `training_pre_tokenizer` turns each convention the source keeps into a split used only
while training; the tokenizer written keeps the source's own pipeline. A new piece then never crosses a place where
the training split cut, so the source's pipeline reads text with the new pieces exactly as the split would have.

- **Word starts**: a piece with `▁` after its first character spans words. Under `SPAN_SHARE` of the source's pieces
  such (Gemma-3: 1 of 255,474, `>▁</`; Llama-2: none), text is split before every `▁`.
- **Digits**: the longest run of ASCII digits in one piece (Gemma-3, Llama-2: 1). Digits are split into runs of at
  most that length, apart from letters, unless at least `JOIN_SHARE` of the pieces with a digit also hold a letter.
  Only ASCII digits are ruled: Gemma-3 joins Bengali digits, and other scripts' digits stay free.
- **Punctuation**: a piece that holds a letter and a punctuation mark or symbol of Unicode's Common script (the
  marks shared by all scripts: `.`, `(`, `,`, `:`) joins a word to punctuation. Under `JOIN_SHARE` of the pieces
  with such a mark (Gemma-3: none with an ASCII mark; Llama-2: none), runs of those marks are split from words,
  with a leading `▁` kept on them as the source's `▁(` keeps it. Marks of one script only (Urdu's `۔`, Tibetan's
  tsheg), which SentencePiece joins to their words, stay free.

The rules apply to the SentencePiece family only; byte-level and WordPiece pipelines already split text into
words, and their split regex (GPT-2's, Llama-3's three-digit numbers, Qwen's single digits) is kept as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import regex

from langswap.reports import MatchingReport
from langswap.tokens import BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, canonical_token, detect_family

SPAN_SHARE = 0.01  # of all pieces: at or above it, the source's pieces span words and new ones may too
JOIN_SHARE = 0.05  # of the pieces that hold a digit (a mark): at or above it, the source joins them to letters

_BYTE_FALLBACK = regex.compile(r"^<0x[0-9A-Fa-f]{2}>$")
_ASCII_DIGITS = regex.compile(r"[0-9]+")
_LETTER = regex.compile(r"\p{L}")
_COMMON_MARK = regex.compile(r"[\p{P}\p{S}&&\p{Common}&&[^\u2581]]", flags=regex.V1)


@dataclass(frozen=True)
class Conventions:
    """What the source's pieces (model vocabulary less added tokens and byte-fallback entries) show of how its family
    cuts text. Counts are of pieces; `marker` is the word-start marker of the SentencePiece family (else None)."""

    family: str
    marker: str | None
    pieces: int
    inner_marker: int  # pieces with a word start after their first character (`De▁`, `>▁</`)
    trailing_marker: int  # pieces that end in a word start, not only of them (`De▁`)
    digit_run: int  # the longest run of ASCII digits in one piece (0: no piece holds one)
    with_digits: int
    digits_with_letters: int
    with_marks: int  # pieces holding a Common-script punctuation mark or symbol
    marks_with_letters: int

    @property
    def spans_words(self) -> bool:
        return self.inner_marker >= SPAN_SHARE * max(1, self.pieces)

    @property
    def joins_digits(self) -> bool:
        return self.digits_with_letters >= JOIN_SHARE * max(1, self.with_digits)

    @property
    def joins_marks(self) -> bool:
        return self.marks_with_letters >= JOIN_SHARE * max(1, self.with_marks)

    @property
    def ruled(self) -> bool:
        """Whether a training split is needed: the family's pipeline does not itself split text into words."""
        return self.family == SENTENCEPIECE

    def training_pre_tokenizer(self, source_pre_tokenizer: dict | None) -> dict | None:
        """The pre-tokeniser (tokenizers JSON) to train with: the source's, followed by a split for each convention
        its pieces keep (the SentencePiece family only)."""
        if not self.ruled:
            return source_pre_tokenizer
        marker = self.marker or "\u2581"
        rules = []
        if not self.spans_words:
            rules.append(_split({"String": marker}, "MergedWithNext"))
        if not self.joins_marks:
            rules.append(_split({"Regex": f"{regex.escape(marker)}?[[\\p{{P}}\\p{{S}}]&&\\p{{Common}}&&[^{marker}]]+"},
                                "Isolated"))
        if not self.joins_digits:
            run = max(1, self.digit_run)
            rules.append(_split({"Regex": "[0-9]" if run == 1 else f"[0-9]{{1,{run}}}"}, "Isolated"))
        if not rules:
            return source_pre_tokenizer
        parts = [] if source_pre_tokenizer is None else [source_pre_tokenizer]
        return {"type": "Sequence", "pretokenizers": parts + rules}

    def describe(self) -> str:
        """One line: the conventions the new pieces follow."""
        if not self.ruled:
            return f"{self.family}: the source's pre-tokeniser splits words; pieces follow it"
        words = "may span words" if self.spans_words else "never span words"
        digits = ("digits joined to letters as the source joins them" if self.joins_digits
                  else f"digits in runs of at most {max(1, self.digit_run)}")
        marks = "punctuation joined to words" if self.joins_marks else "punctuation apart from words"
        return (f"{self.family}: pieces {words} ({self.inner_marker:,} of the source's {self.pieces:,} do), {digits}, "
                f"{marks}")

    def breaks(self, other: "Conventions") -> list[str]:
        """What `other` (a new vocabulary, measured the same way) does that this source's pieces do not: spans words,
        ends in a word start, joins digits beyond this run, joins words to punctuation. Empty where it follows."""
        if self.family != other.family or not self.ruled:
            return []
        found = []
        allowed_inner = self.inner_marker / max(1, self.pieces) * other.pieces
        if not self.spans_words and other.inner_marker > max(allowed_inner, 0.001 * other.pieces):
            found.append(f"{other.inner_marker:,} of {other.pieces:,} pieces span words (the source: "
                         f"{self.inner_marker:,} of {self.pieces:,})")
        if other.trailing_marker > max(self.trailing_marker / max(1, self.pieces) * other.pieces, 0.001 * other.pieces):
            found.append(f"{other.trailing_marker:,} pieces end in the word-start marker (the source: "
                         f"{self.trailing_marker:,})")
        if not self.joins_digits and other.digit_run > max(1, self.digit_run):
            found.append(f"pieces join up to {other.digit_run} digits (the source: {max(1, self.digit_run)})")
        if not self.joins_marks and other.joins_marks:
            found.append(f"{other.marks_with_letters:,} pieces join words to punctuation (the source: "
                         f"{self.marks_with_letters:,})")
        return found

    def report(self) -> dict:
        return {"family": self.family, "pieces": self.pieces, "inner_marker": self.inner_marker,
                "trailing_marker": self.trailing_marker, "digit_run": self.digit_run,
                "digits_with_letters": self.digits_with_letters, "with_digits": self.with_digits,
                "marks_with_letters": self.marks_with_letters, "with_marks": self.with_marks,
                "spans_words": self.spans_words, "joins_digits": self.joins_digits, "joins_marks": self.joins_marks}


def _split(pattern: dict, behavior: str) -> dict:
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": False}


def model_unknown(spec: dict) -> str | None:
    """The tokenization model's unknown token (BPE and WordPiece name it, Unigram gives its id), or None."""
    model = spec.get("model") or {}
    if model.get("type") == "Unigram":
        return model["vocab"][model["unk_id"]][0] if model.get("unk_id") is not None else None
    return model.get("unk_token")


def model_pieces(spec: dict) -> list[str]:
    """The model vocabulary's entries of a tokenizer.json `spec`, less its added tokens and byte-fallback entries."""
    model = spec.get("model") or {}
    vocab = model.get("vocab") or {}
    pieces = [piece for piece, _ in vocab] if model.get("type") == "Unigram" else list(vocab)
    added = {entry["content"] for entry in spec.get("added_tokens") or []} | {model_unknown(spec)}
    return [piece for piece in pieces if piece not in added and not _BYTE_FALLBACK.match(piece)]


def measure_conventions(tokenizer, pieces: list[str] | None = None) -> Conventions:
    """The conventions of `tokenizer`'s pieces (`pieces`: only these of its entries, e.g. an extension's new ones)."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    family, details = detect_family(tokenizer)
    marker = details.get("marker") if family == SENTENCEPIECE else None
    counts = dict(pieces=0, inner_marker=0, trailing_marker=0, digit_run=0, with_digits=0, digits_with_letters=0,
                  with_marks=0, marks_with_letters=0)
    for piece in model_pieces(spec) if pieces is None else pieces:
        token = canonical_token(0, piece, family, details, set())
        text = (" " if token.word_start else "") + token.raw.decode("utf-8", errors="ignore")
        counts["pieces"] += 1
        if not text.strip():  # whitespace alone: a run of word starts spans no word
            continue
        if family in (SENTENCEPIECE, BYTE_LEVEL):
            counts["inner_marker"] += " " in text[1:]
            counts["trailing_marker"] += text.endswith(" ")
        runs = _ASCII_DIGITS.findall(text)
        letters = bool(_LETTER.search(text))
        if runs:
            counts["with_digits"] += 1
            counts["digit_run"] = max(counts["digit_run"], max(map(len, runs)))
            counts["digits_with_letters"] += letters
        if _COMMON_MARK.search(text):
            counts["with_marks"] += 1
            counts["marks_with_letters"] += letters
    return Conventions(family=family, marker=marker, **counts)


ANCHOR = "\n"  # read before each surface, so a word start is read as one; no family joins a line break to a word
BREAK_ANCHOR = "a"  # read before whitespace, which "\n" would join


def independent_copies(source_tokenizer, target_tokenizer) -> tuple[dict[int, int], set[int]]:
    """Target id -> source id for each target token that the source reads as one token of the same surface, found
    without tokens.py's canonical forms: the target token is decoded after a line break (its surface with any leading
    space, the word start, included), and the source reads the same text after a line break; where what follows the
    line break is one source token that decodes back to that surface, the target token can be copied (a surface of
    whitespace alone, or one that starts with a line break or a tab, is read after "a" instead, as "\n" would join
    it). A WordPiece continuation is looked up by its `##` spelling, the string the source reads as that token.
    Returns the copies and the target ids counted: added tokens and tokens whose surface is not whole UTF-8 (byte-level partial
    characters, byte-fallback entries) have no surface to read and are not."""
    source_added = set(source_tokenizer.get_added_vocab())
    added = set(target_tokenizer.get_added_vocab())
    anchor_target = target_tokenizer(ANCHOR, add_special_tokens=False)["input_ids"]
    names = target_tokenizer.convert_ids_to_tokens(list(range(len(target_tokenizer))))
    family, details = detect_family(target_tokenizer)
    source_vocab = source_tokenizer.get_vocab()
    ids, texts, found, counted = [], [], {}, set()
    continuation = details.get("prefix", "##")
    for token_id, name in enumerate(names):
        if name is None or name in added or _BYTE_FALLBACK.match(name):
            continue
        if family == WORDPIECE and name.startswith(continuation) and len(name) > len(continuation):
            counted.add(token_id)
            if name in source_vocab and name not in source_added:
                found[token_id] = source_vocab[name]
            continue
        ids.append(token_id)
    surfaces = target_tokenizer.batch_decode([anchor_target + [token_id] for token_id in ids],
                                             clean_up_tokenization_spaces=False)
    anchor_text = target_tokenizer.decode(anchor_target, clean_up_tokenization_spaces=False)
    kept = []
    for token_id, surface in zip(ids, surfaces):
        if not surface.startswith(anchor_text):
            continue
        surface = surface[len(anchor_text):]
        if not surface or "\ufffd" in surface:
            continue
        kept.append(token_id), texts.append(surface), counted.add(token_id)
    # a surface of whitespace alone, or one that starts with a line break or a tab, would join the line break
    # before it: read it after "a"
    anchors = [BREAK_ANCHOR if not text.strip() or (text[:1].isspace() and text[:1] != " ") else ANCHOR
               for text in texts]
    anchor_ids = {anchor: source_tokenizer(anchor, add_special_tokens=False)["input_ids"]
                  for anchor in (ANCHOR, BREAK_ANCHOR)}
    anchor_texts = {anchor: source_tokenizer.decode(ids, clean_up_tokenization_spaces=False)
                    for anchor, ids in anchor_ids.items()}
    read = source_tokenizer([anchor + text for anchor, text in zip(anchors, texts)],
                            add_special_tokens=False)["input_ids"]
    candidates = {}
    for token_id, text, anchor, source_ids in zip(kept, texts, anchors, read):
        prefix = anchor_ids[anchor]
        if source_ids[:len(prefix)] != prefix or len(source_ids) != len(prefix) + 1:
            continue
        candidates[token_id] = (source_ids[-1], text, anchor)
    backs = source_tokenizer.batch_decode([anchor_ids[anchor] + [source_id]
                                           for source_id, _, anchor in candidates.values()],
                                          clean_up_tokenization_spaces=False)
    source_names = source_tokenizer.convert_ids_to_tokens([source_id for source_id, _, _ in candidates.values()])
    for (token_id, (source_id, text, anchor)), back, source_name in zip(candidates.items(), backs, source_names):
        if source_name in source_added:
            continue
        if back.startswith(anchor_texts[anchor]) and back[len(anchor_texts[anchor]):] == text:
            found[token_id] = source_id
    return found, counted


def independent_matches(source_tokenizer, target_tokenizer) -> dict:
    """What `matching_report` compares a transfer's copies with, made once for a pair of tokenizers: the independent
    copies, the target's added ids and its ordinary token count, and the conventions its pieces break."""
    added = set(target_tokenizer.get_added_vocab().values())
    breaks = measure_conventions(source_tokenizer).breaks(measure_conventions(target_tokenizer))
    copies, counted = independent_copies(source_tokenizer, target_tokenizer)
    return {"copies": copies, "counted": counted, "added": added,
            "ordinary": len(target_tokenizer) - len(added), "breaks": breaks}


def matching_report(copied: dict[int, int], independent: dict) -> MatchingReport:
    """The transfer's copies (`copied`: target id -> source id, the rows it copied from a source token of the same
    form; added tokens, matched by their literal text, are left out) against `independent_matches`: how many each
    finds among the tokens with a whole surface (`copied_whole`; `copied_partial` are the copies of partial UTF-8 and
    byte-fallback tokens, which have none), how many agree, the share of the target's tokens copied, and the
    conventions the target's pieces break."""
    found, counted = independent["copies"], independent["counted"]
    copied = {token_id: source_id for token_id, source_id in copied.items() if token_id not in independent["added"]}
    whole = {token_id: source_id for token_id, source_id in copied.items() if token_id in counted}
    agree = sum(1 for token_id, source_id in whole.items() if found.get(token_id) == source_id)
    return MatchingReport(copied=len(copied), copied_whole=len(whole), copied_partial=len(copied) - len(whole),
                          independent=len(found), agree=agree, only_transfer=len(whole) - agree,
                          only_independent=len(set(found) - set(whole)),
                          share_copied=round(len(copied) / max(1, independent["ordinary"]), 4),
                          target_tokens=independent["ordinary"], breaks_conventions=independent["breaks"])


def matching_warnings(report: MatchingReport) -> list[str]:
    """What a transfer must say loudly about its matching: pieces that break the source family's conventions, and a
    copy count far from the independent one."""
    warnings = []
    if report.breaks_conventions:
        warnings.append("the target tokenizer's pieces break the source family's conventions ("
                        + "; ".join(report.breaks_conventions) + "): few of its tokens match the source's, and "
                        "the model reads it poorly. Train it with `langswap tokenizer --source SOURCE`, which follows "
                        "them.")
    gap = abs(report.copied_whole - report.independent)
    if gap > max(10, 0.02 * report.independent):
        warnings.append(f"the transfer copied {report.copied_whole:,} tokens where an independent count (each "
                        f"target token decoded and read by the source tokenizer) finds {report.independent:,} that the "
                        f"source reads as one token of the same text ({report.agree:,} agree): the two "
                        "tokenizers' conventions differ; check the target tokenizer's normaliser and pre-tokeniser.")
    return warnings
