"""Extending a source tokenizer with tokens learnt from target-language text (`langswap tokenizer --extend N`).

The extended tokenizer keeps every source token at its id, the special tokens, normaliser, pre-tokeniser, decoder,
post-processor and chat template (the source's own files, with only the tokenization model's vocabulary grown), and
adds N tokens after the highest id the source uses (its model vocabulary and its added tokens). The new tokens come
from a tokenizer of the same family trained on the target text (`train_new_from_iterator`, so it reads text through
the same normaliser and pre-tokeniser), in the order that trainer learnt them:

- **BPE** (byte-level as GPT-2, Llama-3 and Qwen2.5; SentencePiece-style with byte fallback as Llama-2 and Mistral):
  BPE training continued from where the source's stopped. The target text's words are read by the source tokenizer;
  the pair of adjacent tokens that occurs most often (by word frequency) becomes a new merge and its result a new
  token, and so on until N tokens are added (pairs whose result the source already has are passed over). Characters
  of the text that the source lacks (read as byte-fallback tokens or unknown) come first, most frequent first, as
  tokens of their own. The new merges rank after every source merge, so a source word reads as before unless, once
  every source merge has applied, two of its tokens form a new merge; with `ignore_merges` (Llama-3) a word that is
  itself a new token is also read whole. `keep_lines` (source-language text) makes that exact: a pair that occurs in
  its words is never merged, so it tokenises exactly as before.
- **Unigram** (T5, XLM-R, ALBERT): the trained pieces the source lacks, most probable first, each with its score in
  the trained model (its log-probability in the target text). The Viterbi segmentation takes a new piece wherever it
  gives a likelier reading, so source text changes where a new piece outscores the source's pieces.
- **WordPiece** (BERT): the trained tokens the source lacks, in the trainer's order. WordPiece takes the longest
  match first, so a source word changes where a new token is a longer prefix of it (or of its remainder).

For Unigram and WordPiece, `keep_lines` strikes out every new token the extension would use on that text, round by
round, until the text reads exactly as before.

`extension_report` measures what changed; `langswap tokenizer --extend` prints it.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass

from tokenizers import Tokenizer

from langswap.errors import ConfigError, VocabularyError
from langswap.progress import bar as progress_bar
from langswap.resources.conventions import measure_conventions
from langswap.resources.tokenizer import classify_added_tokens, train_pieces, training_tokenizer, with_tokenizer_json

logger = logging.getLogger(__name__)

EXTENSIBLE = ("BPE", "Unigram", "WordPiece")
TRAINING_ROUNDS = 6  # trained vocabularies of 2, 4, ..., 64 times the asked size (plus the alphabet) at most


@dataclass
class Extension:
    """The extended tokenizer and what was added: the new tokens' strings in id order from `first_id`."""

    tokenizer: object
    family: str  # the tokenization model: BPE, Unigram or WordPiece
    source_tokens: int
    first_id: int
    added: list[str]
    trained_vocab: int  # BPE: distinct words counted; otherwise the size of the tokenizer trained on the text

    def report(self) -> dict:
        return {"family": self.family, "source_tokens": self.source_tokens, "added": len(self.added),
                "ids": [self.first_id, self.first_id + len(self.added) - 1],
                ("words" if self.family == "BPE" else "trained_vocab"): self.trained_vocab}


def tokenizer_spec(tokenizer) -> dict:
    if not getattr(tokenizer, "is_fast", False):
        raise VocabularyError("extending a tokenizer needs a fast tokenizer (a folder with tokenizer.json); this one "
                              f"is {type(tokenizer).__name__}. Convert it first (AutoTokenizer.from_pretrained(..., "
                              "use_fast=True) and save_pretrained).")
    return json.loads(tokenizer.backend_tokenizer.to_str())


def used_ids(spec: dict) -> set[int]:
    """Every id the tokenizer's model vocabulary and its added tokens use."""
    model = spec["model"]
    ids = set(range(len(model["vocab"]))) if model["type"] == "Unigram" else set(model["vocab"].values())
    return ids | {entry["id"] for entry in spec.get("added_tokens") or []}


def extend_tokenizer(source_tokenizer, lines: list[str], count: int, progress: bool = False,
                     keep_lines: list[str] | None = None) -> Extension:
    """`source_tokenizer` with `count` tokens learnt from `lines` added after its highest id (see the module
    docstring); `keep_lines` (source-language text) tokenises exactly as before. Refuses a
    count below 1, a tokenizer whose model is not BPE, Unigram or WordPiece, and a text that gives fewer new tokens
    than asked (saying how many it gave)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"extend is {count!r}; give the number of tokens to add (at least 1).")
    spec = tokenizer_spec(source_tokenizer)
    family = spec["model"]["type"]
    if family not in EXTENSIBLE:
        raise VocabularyError(
            f"a {family} tokenizer cannot be extended: only BPE, Unigram and WordPiece tokenizers have a vocabulary "
            "that new tokens can follow. Train a replacement tokenizer instead (leave out --extend).")
    if not lines:
        raise ConfigError("the text to extend the tokenizer from has no lines.")
    first_id = max(used_ids(spec)) + 1
    if family == "BPE":
        new, trained_vocab = _continued_bpe(source_tokenizer, spec, lines, count, keep_lines or [], progress)
        chosen = new[0]
    else:
        alphabet = len({char for line in lines[:20000] for char in line})
        size, trained = 2 * count + alphabet + 300, None
        conventions = measure_conventions(source_tokenizer)
        roles = classify_added_tokens(source_tokenizer, spec).by_kind["role"]
        for _ in range(TRAINING_ROUNDS):
            trained = train_pieces(spec, conventions, lines, size + len(roles), roles, progress)
            new = _new_tokens(spec, trained)
            if keep_lines:
                new = _apart_from(source_tokenizer, spec, new, count, first_id, keep_lines)
            if len(new) >= count or len(trained["model"]["vocab"]) < size + len(roles):
                break  # enough, or the text gave all it has
            size *= 2
        chosen, trained_vocab = new, len(trained["model"]["vocab"])
    if len(chosen) < count:
        raise ConfigError(f"the text gives {len(chosen):,} tokens the source tokenizer lacks ({len(lines):,} lines), "
                          f"fewer than the {count:,} asked; ask for at most {len(chosen):,} or give more text.")
    extended = with_tokenizer_json(source_tokenizer, _extended_spec(spec, new, count, first_id))
    added = extended.convert_ids_to_tokens(list(range(first_id, first_id + count)))
    _check_kept(source_tokenizer, extended)
    logger.info("extended a %d-token %s tokenizer by %d tokens (ids %d-%d)", len(source_tokenizer), family, count,
                first_id, first_id + count - 1)
    return Extension(extended, family, len(source_tokenizer), first_id, added, trained_vocab)


def _word_reader(tokenizer, spec: dict):
    """The source's normaliser with the pre-tokeniser of its family's conventions (resources/conventions.py: for the
    SentencePiece family, a split before each word-start marker, and digits and punctuation apart where the source's
    pieces keep them apart), which reads text into the words new merges stay within."""
    return training_tokenizer(spec, measure_conventions(tokenizer))


def _words(reader, lines: list[str]) -> Counter:
    """How often each word (pre-token) of `lines` occurs, as `_word_reader` reads them, so that no new merge joins
    what the source's pieces never join."""
    normalizer, pre_tokenizer = reader.normalizer, reader.pre_tokenizer
    words: Counter = Counter()
    for line in lines:
        text = normalizer.normalize_str(line) if normalizer is not None else line
        if pre_tokenizer is None:
            words[text] += 1
            continue
        words.update(piece for piece, _ in pre_tokenizer.pre_tokenize_str(text))
    words.pop("", None)
    return words


def merge_product(pair, prefix: str = "") -> str:
    """The token a BPE merge of `pair` makes: the two strings joined, the right one without the model's
    continuing-subword prefix."""
    left, right = pair
    return left + (right[len(prefix):] if prefix and right.startswith(prefix) else right)


def _continued_bpe(source_tokenizer, spec: dict, lines: list[str], count: int, keep_lines: list[str],
                   progress: bool) -> tuple[tuple[list[str], list], int]:
    """(new tokens, the merge making each or None for a single character) by BPE training continued from the
    source's state on `lines` (module docstring), and the number of distinct words counted."""
    model = spec["model"]
    prefix = model.get("continuing_subword_prefix") or ""
    known = set(model["vocab"]) | {entry["content"] for entry in spec.get("added_tokens") or []}
    word_reader = _word_reader(source_tokenizer, spec)
    words = _words(word_reader, lines)
    tokens: list[str] = []
    pairs: list = []
    source_model = reader = source_tokenizer.backend_tokenizer.model
    if model.get("byte_fallback") or model.get("unk_token"):  # characters the source spells as bytes or unknown
        characters: Counter = Counter()
        for word, frequency in words.items():
            for character in word:
                if character not in known:
                    characters[character] += frequency
        for character, _ in characters.most_common(count):
            tokens.append(character), pairs.append(None), known.add(character)
        if tokens:  # words read as if those characters were tokens already
            widened = json.loads(json.dumps(spec))
            widened["model"]["vocab"].update({token: 10 ** 9 + offset for offset, token in enumerate(tokens)})
            reader = Tokenizer.from_str(json.dumps(widened)).model
    forbidden = set()
    for word in _words(word_reader, keep_lines):
        symbols = [token.value for token in source_model.tokenize(word)]
        forbidden.update(zip(symbols, symbols[1:]))

    sequences = [[token.value for token in reader.tokenize(word)] for word in words]
    frequencies = list(words.values())
    pair_counts: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for index, (symbols, frequency) in enumerate(zip(sequences, frequencies)):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += frequency
            where[pair].add(index)
    heap = [(-number, pair) for pair, number in pair_counts.items()]
    heapq.heapify(heap)

    bar = progress_bar(progress, count, "new merges", unit="token")
    while len(tokens) < count and heap:
        negative, pair = heapq.heappop(heap)
        if -negative != pair_counts.get(pair, 0):  # stale: pushed again with its current count where it has one
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], pair))
            continue
        result = merge_product(pair, prefix)
        if pair in forbidden or result in known or any("<0x" in part and len(part) == 6 for part in pair):
            continue  # a pair of the kept text, an existing token made another way, or raw bytes
        tokens.append(result), pairs.append(pair), known.add(result)
        if bar is not None:
            bar.update(1)
        for index in where.pop(pair, ()):
            symbols, frequency = sequences[index], frequencies[index]
            merged, position = [], 0
            while position < len(symbols):
                if position + 1 < len(symbols) and (symbols[position], symbols[position + 1]) == pair:
                    merged.append(result)
                    position += 2
                else:
                    merged.append(symbols[position])
                    position += 1
            if len(merged) == len(symbols):
                continue
            for old in zip(symbols, symbols[1:]):
                pair_counts[old] -= frequency
            for fresh in zip(merged, merged[1:]):
                pair_counts[fresh] += frequency
                where[fresh].add(index)
                if result in fresh:
                    heapq.heappush(heap, (-pair_counts[fresh], fresh))
            sequences[index] = merged
        pair_counts.pop(pair, None)
    if bar is not None:
        bar.close()
    return (tokens, pairs), len(words)


def _new_tokens(source: dict, trained: dict) -> list:
    """The trained Unigram or WordPiece tokenizer's tokens the source lacks, in the order they would be added: for
    Unigram [(piece, score)], most probable first; for WordPiece [token], in the trainer's order."""
    model, trained_model = source["model"], trained["model"]
    specials = {entry["content"] for entry in trained.get("added_tokens") or []}
    known = {entry["content"] for entry in source.get("added_tokens") or []}
    if model["type"] == "Unigram":
        known |= {piece for piece, _ in model["vocab"]}
        new = [(piece, score) for piece, score in trained_model["vocab"] if piece not in known and piece not in specials]
        return sorted(new, key=lambda item: -item[1])  # stable: equal scores keep the trainer's order
    known |= set(model["vocab"])
    ordered = sorted(trained_model["vocab"].items(), key=lambda item: item[1])
    return [token for token, _ in ordered if token not in known and token not in specials]


KEEP_ROUNDS = 20


def _apart_from(source_tokenizer, spec: dict, candidates: list, count: int, first_id: int,
                keep_lines: list[str]) -> list:
    """Unigram and WordPiece candidates without those the first `count` would use on `keep_lines`: the extension is
    built, the kept text read, every new token it uses struck out and the next candidates taken, until the kept text
    reads exactly as before."""
    name = (lambda item: item[0]) if spec["model"]["type"] == "Unigram" else (lambda item: item)
    struck: set = set()
    for _ in range(KEEP_ROUNDS):
        left = [item for item in candidates if name(item) not in struck]
        chosen = left[:count]
        if not chosen:
            return left
        extended = with_tokenizer_json(source_tokenizer, _extended_spec(spec, chosen, len(chosen), first_id))
        used = {token_id for ids in extended(keep_lines, add_special_tokens=False)["input_ids"] for token_id in ids
                if token_id >= first_id}
        if not used:
            return left
        struck |= {name(chosen[token_id - first_id]) for token_id in used}
    raise ConfigError(f"after {KEEP_ROUNDS} rounds new tokens still change how the kept text reads; give a kept text "
                      "closer to the source language, or extend without --keep-text.")


def _extended_spec(spec: dict, new, count: int, first_id: int) -> dict:
    spec = json.loads(json.dumps(spec))
    model = spec["model"]
    if model["type"] == "Unigram":
        vocab = model["vocab"]
        if first_id > len(vocab):  # added tokens beyond the pieces: their places are held by their own strings
            by_id = {entry["id"]: entry["content"] for entry in spec.get("added_tokens") or []}
            lowest = min(score for _, score in vocab) if vocab else 0.0
            vocab.extend([by_id.get(index, f"<unused_{index}>"), lowest - 10.0] for index in range(len(vocab), first_id))
        vocab.extend([piece, score] for piece, score in new[:count])
        return spec
    # The library gives an added token that its model's vocabulary lacks the id after the vocabulary's size, whatever
    # tokenizer.json says; a source whose added tokens follow its vocabulary (Llama-3's 256 reserved tokens, Qwen2.5's)
    # would see them moved behind the new tokens. Entered in the vocabulary at their own ids, they keep them; the model
    # never makes them (no merge spells them, and added tokens are split off before the model reads the text).
    taken = set(model["vocab"].values())
    for entry in spec.get("added_tokens") or []:
        if entry["id"] not in taken and entry["content"] not in model["vocab"]:
            model["vocab"][entry["content"]] = entry["id"]
    if model["type"] == "WordPiece":
        model["vocab"].update({token: first_id + offset for offset, token in enumerate(new[:count])})
    else:
        tokens, pairs = new
        model["vocab"].update({token: first_id + offset for offset, token in enumerate(tokens[:count])})
        as_strings = bool(model.get("merges")) and isinstance(model["merges"][0], str)
        for pair in pairs[:count]:
            if pair is not None:
                model["merges"].append(" ".join(pair) if as_strings else list(pair))
    return spec


def _check_kept(source_tokenizer, extended) -> None:
    moved = first_differing_id(source_tokenizer, extended)
    if moved is not None:  # a defect of this module, never of the user's input
        raise AssertionError(f"extension moved source id {moved}")
    if source_tokenizer.all_special_tokens != extended.all_special_tokens:
        raise AssertionError("extension changed the special tokens")


def first_differing_id(source_tokenizer, target_tokenizer) -> int | None:
    """The first source id (0 to len(source) - 1) whose token the target tokenizer spells otherwise or lacks (None:
    the target keeps every source id, so it is the source's tokenizer or extends it)."""
    ids = list(range(len(source_tokenizer)))
    before = source_tokenizer.convert_ids_to_tokens(ids)
    after = target_tokenizer.convert_ids_to_tokens(ids[:len(target_tokenizer)])
    for token_id, token in enumerate(before):
        if token_id >= len(after) or after[token_id] != token:
            return token_id
    return None


def tokens_per_byte(tokenizer, lines: list[str]) -> float:
    """Tokens the tokenizer makes of `lines` (no special tokens) per UTF-8 byte."""
    tokens = sum(len(ids) for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]) if lines else 0
    return tokens / max(1, sum(len(line.encode("utf-8")) for line in lines))


def word_tokens_per_byte(tokenizer, lines: list[str]) -> float:
    """Words per UTF-8 byte of `lines` as `_word_reader` reads them for `tokenizer`: the fewest tokens per byte a BPE
    extension of it can reach, since its new merges stay within those words (each word one token at best)."""
    words = _words(_word_reader(tokenizer, tokenizer_spec(tokenizer)), lines)
    return sum(words.values()) / max(1, sum(len(line.encode("utf-8")) for line in lines))


def changed_lines(source_tokenizer, extended, lines: list[str]) -> int:
    """How many of `lines` the extended tokenizer reads otherwise than the source."""
    if not lines:
        return 0
    before = source_tokenizer(lines, add_special_tokens=False)["input_ids"]
    after = extended(lines, add_special_tokens=False)["input_ids"]
    return sum(a != b for a, b in zip(before, after))


@dataclass
class Pruned:
    """An extended tokenizer with some of its new tokens taken out (`prune_extension`); ids are the extended
    tokenizer's."""

    tokenizer: object
    kept: list[int]  # the new tokens kept, in their order: kept[k] is now id first_id + k
    dropped: list[int]  # the tokens asked for that went
    cascaded: list[int]  # tokens that went because a merge making them reads a token that went
    spelled: list[int]  # tokens asked for that stay: characters the source lacks, spelled by no merge


def prune_extension(tokenizer, first_id: int, drop, keep_characters: bool = True) -> Pruned:
    """The extended `tokenizer` without its new tokens `drop` (ids from `first_id`), the new tokens kept renumbered
    in their order from `first_id`, every source id as it was. BPE: a dropped token's merge goes, and with it every
    later merge that reads a token gone, whose token goes too (`cascaded`); a new token no merge makes (a character
    the source lacks) stays, since the text it spells would otherwise read as unknown (`spelled`). Unigram and
    WordPiece lose the tokens alone, except those of one character (after WordPiece's continuing-subword prefix),
    which stay for the same reason. `keep_characters=False` takes those out too (`source_of_extension`)."""
    spec = tokenizer_spec(tokenizer)
    model = spec["model"]
    asked = sorted({int(token) for token in drop})
    if any(token < first_id for token in asked):
        raise ConfigError(f"only new tokens (ids from {first_id}) can be pruned; {asked[0]} is a source token.")
    cascaded = []
    if model["type"] == "Unigram":
        pieces = model["vocab"]
        spelled = [token for token in asked if token < len(pieces) and len(pieces[token][0]) == 1
                   and keep_characters]
        gone = {token for token in asked if token < len(pieces)} - set(spelled)
        kept = [token for token in range(first_id, len(pieces)) if token not in gone]
        model["vocab"] = pieces[:first_id] + [pieces[token] for token in kept]
    else:
        vocab = model["vocab"]
        name = {token: piece for piece, token in vocab.items()}
        gone = {token for token in asked if token in name}
        if model["type"] == "BPE":
            gone, cascaded, spelled = _pruned_merges(model, name, first_id, gone, keep_characters)
        else:  # WordPiece: a word with a character no token holds reads as one unknown token
            prefix = model.get("continuing_subword_prefix") or ""
            spelled = sorted(token for token in gone if len(name[token].removeprefix(prefix)) == 1
                             and keep_characters)
            gone -= set(spelled)
        kept = sorted(token for token in name if token >= first_id and token not in gone)
        model["vocab"] = {piece: token for piece, token in vocab.items() if token < first_id}
        model["vocab"].update({name[token]: first_id + offset for offset, token in enumerate(kept)})
    pruned = with_tokenizer_json(tokenizer, spec)
    _check_kept_ids(tokenizer, pruned, first_id)
    return Pruned(pruned, kept, sorted(set(asked) & gone), cascaded, spelled)


def new_token_products(tokenizer, first_id: int) -> list[tuple[int, list[int]]]:
    """Each new token (ids from `first_id`) of a BPE extension with the new tokens made by a merge that reads it,
    products after the tokens they read (in merge order, the last merge's parts first; a token no merge makes, such
    as a character, after every product): the order in which pruning can weigh a token with what goes with it
    (`prune_extension` takes out every product of a token it takes out). Unigram and WordPiece tokens are made by no
    merge: each is its own, with no products."""
    spec = tokenizer_spec(tokenizer)
    model = spec["model"]
    if model["type"] != "BPE":
        size = len(model["vocab"]) if model["type"] == "Unigram" else max(model["vocab"].values()) + 1
        return [(token, []) for token in range(first_id, size)]
    vocab, prefix = model["vocab"], model.get("continuing_subword_prefix") or ""
    merges = model["merges"]
    pairs = [merge.split(" ", 1) if isinstance(merge, str) else list(merge) for merge in merges]
    products: dict[int, list[int]] = {token: [] for token in vocab.values() if token >= first_id}
    made = []
    for pair in pairs:
        product = vocab.get(merge_product(pair, prefix))
        if product is None or product < first_id:
            continue
        made.append(product)
        for part in {vocab.get(piece) for piece in pair}:
            if part is not None and part >= first_id:
                products[part].append(product)
    order = list(dict.fromkeys(reversed(made)))  # a token two merges make comes at the later one
    return [(token, products[token]) for token in order + sorted(set(products) - set(made))]


def _pruned_merges(model: dict, name: dict, first_id: int, gone: set[int],
                   keep_characters: bool = True) -> tuple[set[int], list[int], list[int]]:
    """A BPE model's merges without those making or reading a token gone (`model` changed in place); returns (every
    token gone, those gone by the cascade, those asked for that no merge makes and so stay)."""
    merges = model["merges"]
    as_strings = bool(merges) and isinstance(merges[0], str)
    pairs = [merge.split(" ", 1) if as_strings else list(merge) for merge in merges]
    prefix = model.get("continuing_subword_prefix") or ""
    made = {model["vocab"].get(merge_product(pair, prefix)) for pair in pairs}
    spelled = sorted(token for token in gone if token not in made) if keep_characters else []
    gone = gone - set(spelled)
    pieces = {name[token] for token in gone}
    kept_merges, cascaded = [], []
    for pair, merge in zip(pairs, merges):
        product = merge_product(pair, prefix)
        if product in pieces or pair[0] in pieces or pair[1] in pieces:
            token = model["vocab"].get(product)
            if token is not None and token >= first_id and product not in pieces:
                pieces.add(product)
                gone.add(token)
                cascaded.append(token)
            continue
        kept_merges.append(merge)
    model["merges"] = kept_merges
    return gone, sorted(cascaded), spelled


def _check_kept_ids(tokenizer, pruned, first_id: int) -> None:
    vocab, kept = tokenizer.get_vocab(), pruned.get_vocab()
    if any(kept.get(piece) != token for piece, token in vocab.items() if token < first_id):  # a defect here
        raise AssertionError("pruning moved a source id")


def source_of_extension(tokenizer, first_id: int):
    """The source tokenizer an extension was made from: every token from `first_id` on taken out, characters
    included, with their merges (the source's own files otherwise, as the extension kept them)."""
    spec = tokenizer_spec(tokenizer)
    new = [token for token in tokenizer.get_vocab().values() if token >= first_id]
    if spec["model"]["type"] == "Unigram":
        new = list(range(first_id, len(spec["model"]["vocab"])))
    return prune_extension(tokenizer, first_id, new, keep_characters=False).tokenizer
