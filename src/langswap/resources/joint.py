"""Word vectors of two languages in one space from one fastText model trained on code-switched text of both.

Procrustes rotates one language's fastText space onto another's, which works when both were trained on large,
comparable corpora, so that the two spaces have nearly the same shape. On a million words of each language they do
not, and the rotation retrieves a held-out word's translation a few times in a hundred. Here the two spaces are one
from the start: the source and the target text are written into one corpus, and in every line each word that the
dictionary translates is replaced by one of its translations with probability `share` (in both directions), so a
word and its translations share contexts and end up close. fastText is trained on that corpus (`train_joint_vectors`).
On the shared German data (about a million words a language, different domains), written once (`passes: 1`), this
ties differently spelled translations no better than Procrustes (held-out precision@1 over such words 0.026 against
0.031; docs/results.md): its lead on all held-out words comes from same-spelled pairs, which share one vector
here. Each further pass writes both texts again with switches of their own; with eight passes (and 5 epochs)
differently spelled translations are retrieved at 0.091 and all held-out words at 0.257 by CSLS.

- Words are split as `langswap fasttext` splits them (`langswap.resources.segment`: the target text by
  `target_segmenter`, for languages written without spaces); a word is found in the dictionary as
  written, lower-cased or title-cased, and a translation replaces it as the dictionary spells it.
- Lines of the two texts are shuffled together (seeded), so fastText's decaying learning rate treats both alike.
- A share of the dictionary's source words (`heldout_words`, at most a fifth; case variants held out together) is
  never switched, in either direction: those pairs measure how well the space retrieves translations it was not
  shown (precision@1, nearest neighbour and CSLS, among the target text's words).
- Beside the model, `<model>.words.json` holds each language's words with their counts in its own text (before
  switching), and the report. `load_joint_vectors` gives each language a view of the one model: its words and
  counts, every vector (n-grams included) from the shared model.

The same word in both languages (`die`, `also`, names) gets one vector; for a method that copies identical tokens
first this costs little, and for related languages it is an anchor.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError, VocabularyError
from langswap.files import atomic_write_text
from langswap.resources.dictionary import Dictionary, case_variants
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.retrieval import dictionary_precision
from langswap.resources.segment import SEGMENTER_NAMES, segmenter
from langswap.resources.text import read_lines
from langswap.resources.vectors import WordVectors

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class JointConfig:
    """How the code-switched corpus is made."""

    share: float = field(default=0.5, metadata={"help": "Probability that a word the dictionary translates is "
                                                        "replaced by a translation."})
    heldout_words: int = field(default=1500, metadata={"help": "Source words of the dictionary never switched, to "
                                                                "measure precision@1 (at most a fifth)."})
    passes: int = field(default=1, metadata={"help": "Times each text is written into the corpus, each time with "
                                                     "its own random switches."})
    seed: int = field(default=0, metadata={"help": "Seed of the held-out words, the switching and the line order."})
    retrieval_words: int = field(default=200_000, metadata={"help": "Most frequent target words searched when "
                                                                     "measuring precision@1."})
    target_segmenter: str = field(default="auto", metadata={
        "help": "How the target text is split into words: auto (by target_language: jieba for zh, fugashi for ja, "
                "pythainlp for th, else words), words (runs of letters), or a named segmenter.",
        "choices": SEGMENTER_NAMES})
    target_language: str | None = field(default=None, metadata={"help": "The target text's ISO 639 code, for "
                                                                         "target_segmenter: auto."})

    def __post_init__(self):
        if not 0 < self.share <= 1:
            raise ConfigError(f"share is {self.share}; give a probability in (0, 1], e.g. 0.5.")
        if self.heldout_words < 0:
            raise ConfigError(f"heldout_words is {self.heldout_words}; give 0 or more.")
        if self.passes < 1:
            raise ConfigError(f"passes is {self.passes}; give 1 or more.")


JOINT_FASTTEXT = FastTextConfig(dim=100, epoch=10, minCount=3)  # as the per-language vectors of the benchmarks


def _lookup(table: dict[str, list[str]], word: str) -> list[str] | None:
    for variant in case_variants(word):
        found = table.get(variant)
        if found:
            return found
    return None


def switching_tables(dictionary: Dictionary, held: set[str]):
    """(source word -> translations, target word -> translations, held-out pairs): every pair in both directions,
    except the pairs of the `held` source words (lower-cased), which are returned apart."""
    forward: dict[str, list[str]] = {}
    backward: dict[str, list[str]] = {}
    heldout = []
    for source, target in dictionary.pairs:
        if source.casefold() in held:
            heldout.append((source, target))
            continue
        forward.setdefault(source, [])
        if target not in forward[source]:
            forward[source].append(target)
        backward.setdefault(target, [])
        if source not in backward[target]:
            backward[target].append(source)
    return forward, backward, heldout


def _known(counts: Counter, word: str) -> bool:
    return any(variant in counts for variant in case_variants(word))


def write_code_switched_corpus(source_text: str | Path, target_text: str | Path, dictionary: Dictionary,
                               output: str | Path, config: JointConfig) -> dict:
    """Write the shuffled, code-switched corpus of both texts to `output`; returns the word counts of each text,
    the switches made and the held-out pairs (chosen among the pairs whose two words the texts hold)."""
    texts = {"source": source_text, "target": target_text}
    split: dict[str, list[list[str]]] = {}
    counts = {"source": Counter(), "target": Counter()}
    segments = {"source": segmenter("words"), "target": segmenter(config.target_segmenter, config.target_language)}
    for side, path in texts.items():
        split[side] = [words for line in read_lines(path, what=f"{side} text") if (words := segments[side](line))]
        for words in split[side]:
            counts[side].update(words)
        if not counts[side]:
            raise ConfigError(f"the {side} text '{path}' has no words.")
    covered = sorted({source.casefold() for source, target in dictionary.pairs
                      if _known(counts["source"], source) and _known(counts["target"], target)})
    if not covered:
        raise VocabularyError(
            f"no pair of dictionary '{dictionary.name}' has its source word in '{source_text}' and its target word "
            f"in '{target_text}', so nothing ties the two languages together. Check that the dictionary is "
            "source<TAB>target for these two texts (the source text's language first).")
    count = min(config.heldout_words, len(covered) // 5)
    held = set(random.Random(config.seed).sample(covered, count)) if count else set()
    forward, backward, heldout = switching_tables(dictionary, held)
    rng = random.Random(config.seed + 1)
    switched = {"source": 0, "target": 0}
    lines: list[str] = []
    for _ in range(config.passes):
        for side, table in (("source", forward), ("target", backward)):
            for words in split[side]:
                written = list(words)
                for index, word in enumerate(written):
                    translations = _lookup(table, word)
                    if translations and rng.random() < config.share:
                        written[index] = rng.choice(translations)
                        switched[side] += 1
                lines.append(" ".join(written))
    rng.shuffle(lines)
    with open(output, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
    return {"counts": counts, "switched": switched, "heldout": heldout, "lines": len(lines),
            "covered_source_words": len(covered), "heldout_words": count}


def train_joint_vectors(source_text: str | Path, target_text: str | Path, dictionary_path: str | Path,
                        output: str | Path, config: JointConfig | None = None,
                        options: FastTextConfig = JOINT_FASTTEXT, progress: bool = False,
                        overwrite: bool = True) -> dict:
    """Train the joint model into `output` (.bin) and write `<output>.words.json` beside it; returns the report
    (switches, lines, held-out precision@1)."""
    config = config or JointConfig()
    dictionary = Dictionary.load(dictionary_path)
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="langswap-joint-") as workdir:
        corpus = Path(workdir) / "corpus.txt"
        made = write_code_switched_corpus(source_text, target_text, dictionary, corpus, config)
        logger.info("code-switched corpus: %s lines; %s source and %s target words switched (share %g); %s "
                    "held-out pairs", f"{made['lines']:,}", f"{made['switched']['source']:,}",
                    f"{made['switched']['target']:,}", config.share, f"{len(made['heldout']):,}")
        train_fasttext(corpus, output, options, progress=progress, overwrite=overwrite, split_words=False)
    words = word_lists(made)
    report = {"joint_vectors": output.name, "dictionary": str(dictionary_path), "lines": made["lines"],
              "switched": made["switched"], "covered_source_words": made["covered_source_words"],
              "heldout_words": made["heldout_words"], "config": asdict(config), "fasttext": asdict(options),
              "source_words": len(words["source"]), "target_words": len(words["target"])}
    source, target = views(output, words)
    report.update(heldout_precision(source, target, made["heldout"], config.retrieval_words))
    write_words_file(output, report, words)
    return report


def word_lists(made: dict) -> dict:
    """Each language's words with their counts in its own text, most frequent first, from what
    `write_code_switched_corpus` returned: the `words` of the words file."""
    return {side: [[word, count] for word, count in made["counts"][side].most_common()]
            for side in ("source", "target")}


def write_words_file(model: str | Path, report: dict, words: dict) -> None:
    """`<model>.words.json`, which `load_joint_vectors` reads: the report (its `config` the JointConfig) and the
    word lists (`word_lists`)."""
    atomic_write_text(words_path(model), json.dumps({"report": report, "words": words}, ensure_ascii=False))


def words_path(model: str | Path) -> Path:
    model = Path(model)
    return model.with_name(model.name + ".words.json")


def views(model_path: str | Path, words: dict):
    """The source and target language's views of one joint model: each its words and counts, one model."""
    model = WordVectors.load(model_path)
    out = []
    for side in ("source", "target"):
        listed = [word for word, _ in words[side]]
        freqs = [count for _, count in words[side]]
        out.append(model.view(listed, freqs, f"{Path(model_path).name} ({side})"))
    return tuple(out)


def load_joint_vectors(model_path: str | Path):
    """(source view, target view, report) of a model `train_joint_vectors` wrote."""
    sidecar = words_path(model_path)
    if not sidecar.is_file():
        raise MissingResourceError(f"'{sidecar}' is missing: joint vectors are written with their word lists by "
                                   "`langswap fasttext SOURCE_TEXT --joint TARGET_TEXT --dictionary DICT`; train "
                                   "them again.")
    data = json.loads(sidecar.read_text(encoding="utf-8"))
    source, target = views(model_path, data["words"])
    return source, target, data["report"]


def heldout_precision(source, target, heldout: list[tuple[str, str]], retrieval_words: int) -> dict:
    """Precision@1 of the held-out pairs whose words each text has, among the target text's words."""
    pairs = [(s, t) for s, t in heldout if source.word_id(s) >= 0 and target.word_id(t) >= 0]
    queries = sorted({s for s, _ in pairs})
    if not queries:
        return {"precision_at_1": None, "precision_at_1_csls": None, "queries": 0}
    result = dictionary_precision(source, target, pairs, queries, ks=(1,), retrieval_words=retrieval_words)
    result["heldout_pairs"] = len(heldout)
    return result
