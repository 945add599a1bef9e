"""How often the training text shows each new token of bench_extension.py's extended tokenizers.

Reads the tokenizers bench_extension.py saved in its work folder (`tokenizer-extend-N`) and that bench's training
text (`train.txt`, the training split less its development lines, the text the tokenizers learnt from), and prints
for each size: the training text's tokens, the new tokens' share of them, and how many new tokens it shows fewer
than 5 times and never, with the median count. Run bench_extension.py for the language first.

    python benchmarks/results/extension-sw-dev-extend-20000/extension_token_counts.py --language sw
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=("de", "sw"), required=True)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="bench_extension.py's work folder (default ~/.cache/langswap/bench-extension-LANG).")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-extension-{args.language}").expanduser()
    folders = sorted(workdir.glob("tokenizer-extend-*"), key=lambda path: int(re.sub(r"\D", "", path.name)))
    if not (workdir / "train.txt").is_file() or not folders:
        print(f"no extended tokenizers and train.txt in {workdir}: run benchmarks/bench_extension.py --language "
              f"{args.language} first. Nothing was counted.")
        return 0

    from langswap.models import load_tokenizer
    from langswap.resources.text import read_text_lines

    lines = read_text_lines(workdir / "train.txt", "training text")
    print("| new tokens | training tokens | new tokens' share | shown < 5 times | never shown | median count |")
    print("|---|---|---|---|---|---|")
    for folder in folders:
        tokenizer = load_tokenizer(folder)
        size = int(folder.name.rsplit("-", 1)[1])
        first = len(tokenizer) - size  # the new tokens come after every source token
        counts = collections.Counter()
        for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]:
            counts.update(ids)
        new = sorted(counts[token] for token in range(first, first + size))
        total = sum(counts.values())
        print(f"| {size:,} | {total:,} | {sum(new) / total:.1%} | {sum(c < 5 for c in new):,} | "
              f"{sum(c == 0 for c in new):,} | {new[len(new) // 2]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
