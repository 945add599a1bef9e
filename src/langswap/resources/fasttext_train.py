"""Training fastText word vectors on a text file (`langswap fasttext`).

The text is split into words and punctuation first (fastText itself splits only on whitespace, so `Haus.` and
`Haus` would be two words), case kept. Training runs in a fresh child process: in a process that has already loaded
a Hugging Face tokenizer, fastText training was seen to fail with "Encountered NaN" again and again, while the same
file trained fine in a child. The model is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from langswap.errors import LangswapError, ResourceFormatError
from langswap.files import atomic_file, refuse_existing
from langswap.locking import OutputLock
from langswap.resources.segment import Segmenter
from langswap.resources.text import read_lines

logger = logging.getLogger(__name__)



@dataclass(frozen=True, kw_only=True)
class FastTextConfig:
    """fastText training options (names as in fastText)."""

    model: Literal["skipgram", "cbow"] = field(default="skipgram", metadata={"help": "skipgram or cbow."})
    dim: int = field(default=100, metadata={"help": "Vector dimension."})
    epoch: int = field(default=10, metadata={"help": "Passes over the text."})
    minCount: int = field(default=3, metadata={"help": "Words seen fewer times get no vector of their own."})
    minn: int = field(default=3, metadata={"help": "Shortest character n-gram."})
    maxn: int = field(default=6, metadata={"help": "Longest character n-gram (0 disables n-grams)."})
    ws: int = field(default=5, metadata={"help": "Context window: words on each side."})
    neg: int = field(default=5, metadata={"help": "Negative samples per positive one."})
    bucket: int = field(default=2_000_000, metadata={"help": "Hash buckets for n-grams."})
    lr: float = field(default=0.05, metadata={"help": "Learning rate."})
    thread: int = field(default=0, metadata={"help": "Threads; 0 = all cores (at least 11 run: fastText initialises "
                                                      "its vectors one tenth per thread)."})
    seed: int = field(default=0, metadata={"help": "Seed of the initialisation (training with several threads is "
                                                   "not bitwise reproducible)."})


def pretokenize(line: str, segment: Segmenter | None = None) -> str:
    """The line's words (`segment`'s, by default the `words` segmenter's), separated by single spaces."""
    return " ".join((segment or Segmenter("words"))(line))


def prepare_corpus(text_path: str | Path, out_path: str | Path, split_words: bool = True,
                   segment: Segmenter | None = None) -> int:
    """Write the word-split text for fastText (by `segment`, default `words`; `split_words` false: as it is, split on
    whitespace only); returns the number of words. Empty or non-UTF-8 text is an error."""
    words = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for line in read_lines(text_path, what="training text"):
            split = pretokenize(line, segment) if split_words else " ".join(line.split())
            if split:
                out.write(split + "\n")
                words += split.count(" ") + 1
    if words == 0:
        raise ResourceFormatError(f"training text '{text_path}' has no words; give a UTF-8 text file.")
    return words


def train_fasttext(text_path: str | Path, output: str | Path, config: FastTextConfig | None = None,
                   progress: bool = False, overwrite: bool = True, split_words: bool = True,
                   segment: Segmenter | None = None) -> Path:
    """Train fastText vectors on `text_path` and save the `.bin` model to `output`; returns the path. The text is
    split into words and punctuation first (by `segment`, `langswap.resources.segment`; default: the `words`
    segmenter), or with `split_words` false taken as whitespace-separated words. An
    existing `output` is replaced, or with `overwrite=False` refused before any work. One process at a time writes an
    output file: another gets `OutputLockedError` (`langswap.locking`), and the existence check is made under the
    lock."""
    with OutputLock(output, "fastText output file"):
        refuse_existing(output, overwrite, "output file")
        return _train_fasttext(text_path, output, config or FastTextConfig(), progress, split_words, segment)


def _train_fasttext(text_path: str | Path, output: str | Path, config: FastTextConfig, progress: bool,
                    split_words: bool = True, segment: Segmenter | None = None) -> Path:
    output = Path(output)
    if output.suffix != ".bin":
        raise LangswapError(f"fastText output '{output}' must end in .bin (the model with its n-grams).")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="langswap-fasttext-") as workdir:
        corpus = Path(workdir) / "corpus.txt"
        words = prepare_corpus(text_path, corpus, split_words, segment)
        logger.info("training fastText (%s, dim %d) on %s words of %s", config.model, config.dim, f"{words:,}",
                    text_path)
        options = asdict(config)
        options["thread"] = options["thread"] or (os.cpu_count() or 1)
        options["verbose"] = 2 if progress else 0
        with atomic_file(output) as partial:
            job = {"input": str(corpus), "output": str(partial), "options": options, "parent": os.getpid()}
            result = subprocess.run([sys.executable, "-m", "langswap.resources.fasttext_train", json.dumps(job)],
                                    stderr=None if progress else subprocess.PIPE, text=True)
            if result.returncode != 0 or not partial.exists():
                detail = (result.stderr or "").strip().splitlines()[-1:] if result.stderr else []
                raise LangswapError(f"fastText training on '{text_path}' failed ({'; '.join(detail) or 'no message'})"
                                    ". With very little text, lower --set minCount=1 or --set dim=50.")
    return output


def _exit_with_parent(parent: int, interval: float = 1.0) -> None:
    """End this process when process `parent`, which started it, is gone (killed, or stopped with Ctrl-C before it
    could wait): fastText's training holds every core until it finishes, and nothing would read its model."""
    def watch():
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _child(job: dict) -> None:
    import fasttext
    from fasttext import FastText

    _exit_with_parent(job["parent"])
    options = dict(job["options"])
    seed = options.pop("seed", 0)
    # fasttext 0.9.3's train_unsupervised rejects a `seed` keyword ("unexpected keyword argument 'seed'") although
    # its arguments have the field; it copies its defaults table into them, so the seed goes in through that table.
    defaults = getattr(FastText, "unsupervised_default", None)
    if isinstance(defaults, dict) and "seed" in defaults:
        defaults["seed"] = seed
    # fastText's DenseMatrix::uniform fills the input matrix one tenth per thread (blocks of m*n/10, one block for
    # each of `thread` threads), so with fewer threads the other rows keep whatever the memory held: garbage in small
    # models ("Encountered NaN" in about half the runs with thread=1), zeros in large ones. 11 threads cover all ten
    # tenths and the remainder; more threads than cores only interleave.
    options["thread"] = max(int(options.get("thread") or 1), 11)
    model = fasttext.train_unsupervised(job["input"], **options)
    model.save_model(job["output"])


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
