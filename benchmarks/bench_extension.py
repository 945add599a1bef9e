r"""Replacing SmolLM2's vocabulary against extending it: target bits per byte, English bits per byte and target tokens
per byte, at step 0 and after embedding-only training.

For a language (German or Swahili from the shared data): a replacement tokenizer of `--vocab` tokens trained on the
training text, transferred with the default method (`combined`, the language's dictionary, calibrated as `langswap
transfer` calibrates with target text); and SmolLM2's own tokenizer extended by each of `--sizes` tokens of the
training text (`langswap tokenizer --extend N --keep-text en.train.txt`), transferred with each of `--methods` (only
the new rows made; calibrated the same way). Each is a `langswap bench` run of its own (one target tokenizer per
bench): embedding-only updates (batch 2 x 128), measured at `--steps` on 300 lines (with `--eval dev`, development
lines held out of everything: by default drawn like the test split from the whole training split, `--dev-draw
test-like`, or its last 300 lines, `--dev-draw tail`; the first 300 test lines with `--eval test`) and on 300 lines of
the English test split read with each model's own tokenizer, what English keeps (its lines 301-600 for development
lines drawn like the test split, its first 300 otherwise). `--language en` extends SmolLM2 by tokens learnt from
English text itself (no `--keep-text`, no dictionary, no replacement row): a language the model reads well. With
`--separate`, each extension method also has its new rows kept off English at transfer time
(`calibration.source_text`: the first lines of the English training split), a row of its own. With `--distill
TOKENS`, each extension method also has its new input rows learnt from the source model reading the same text with
its own tokenizer (token distillation over TOKENS target tokens at the last layer, learning rate 1e-2; the teacher
reads each new token as its old pieces), its head untied and kept as the method made it (`--distill-head lm`: its new
output rows learn the next token, at `--distill-head-rate`); beside it the same transfer with the head untied and no
distillation (the control), and the control trained for as many updates as fit in the distilled row's time (the
bench's equal_time); with `--distill-replacement`, the replacement's method has the same rows. With
`--source-shares`, each of these transfers, and each method's plain one, also trains with the `extension` recipe (new
rows first), with that share of every batch English training text (`recipe.source_text`; 0: none), as rows of their
own; `--then none` trains the new rows alone for every step (`recipe.then`), so the source rows never move, and
`--rate` sets the recipe rows' peak rate.

    python benchmarks/bench_extension.py --language de --sizes 5000 10000 20000 --steps 0 200
    python benchmarks/bench_extension.py --language en --sizes 5000 10000 20000 --methods fvt --steps 0
    python benchmarks/bench_extension.py --language sw --sizes 5000 10000 --steps 0 200 --eval test
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --source-shares 0 0.5
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --source-shares 0.5 --then none
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --separate --steps 0
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --distill 20000
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --source-shares 0.5 --then none \
        --rate 5e-3
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --distill 20000 --distill-head lm
    python benchmarks/bench_extension.py --language de --sizes 10000 --methods fvt --distill 20000 --distill-replacement

The work folder (default ~/.cache/langswap/bench-extension-LANG[-testlike]) is resumable; each bench's table and
results are copied to benchmarks/results/extension-LANG[-testlike]-EVAL-TOKENIZER/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import TEST_LINE_CHARS, split_text  # noqa: E402
from bench_german_training import DEFAULT_DATA, REPO, run_and_record, shared_data_ready  # noqa: E402
from bench_tiktotok import DICTIONARIES  # noqa: E402

REPLACEMENT_SIZE = {"de": 49152, "sw": 16000}
# what a recipe row's label adds for each `--then` (the recipe's default adds nothing, so earlier rows keep their labels)
THEN_LABELS = {"embeddings": "", "none": " (new rows only)", "full": " (then full)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted([*DICTIONARIES, "en"]), required=True,
                        help="The target language; en: English self-extension (tokens learnt from English text, no "
                             "--keep-text, no dictionary, no replacement row).")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    parser.add_argument("--vocab", type=int, default=None, help="Replacement tokenizer size (default: 49,152 for "
                                                                  "German, 16,000 for Swahili).")
    parser.add_argument("--methods", nargs="+", default=["combined", "fvt"], help="Methods of the extensions.")
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 200])
    parser.add_argument("--source-shares", type=float, nargs="*", default=[],
                        help="Also train each extension method with the extension recipe and this share of every "
                             "batch English (0: the recipe alone); rows of their own.")
    parser.add_argument("--then", choices=tuple(THEN_LABELS), default="embeddings",
                        help="What the recipe rows of --source-shares train after the new rows alone "
                             "(recipe.then; none: the new rows alone for every step, the source rows never move).")
    parser.add_argument("--rate", type=float, default=None,
                        help="Peak learning rate of the recipe rows of --source-shares (default: the bench's, 5e-4).")
    parser.add_argument("--separate", action="store_true",
                        help="Also each extension method with its new rows kept off English at transfer time "
                             "(calibration.source_text: the English training split); rows of their own.")
    parser.add_argument("--distill", type=int, default=0, metavar="TOKENS",
                        help="Also each extension method distilled from the source model over TOKENS target tokens "
                             "(head untied and kept), beside the same with the head untied alone; rows of their own.")
    parser.add_argument("--distill-head", choices=("keep", "lm", "likelihood"), default="keep",
                        help="The distilled rows' untied head: keep (as the method and calibration made it), lm (its "
                             "new output rows learn the next token during distillation, distill.head) or likelihood "
                             "(they learn each chunk's log-probability under the source model).")
    parser.add_argument("--distill-head-rate", type=float, default=None,
                        help="With --distill-head lm: the head's own peak rate (distill.head_learning_rate; default: "
                             "the distillation's 1e-2).")
    parser.add_argument("--distill-replacement", action="store_true",
                        help="With --distill: the replacement's method has the same two rows (untied control and "
                             "distilled).")
    parser.add_argument("--eval", choices=("dev", "test"), default="dev")
    parser.add_argument("--dev-lines", type=int, default=300)
    parser.add_argument("--dev-draw", choices=("test-like", "tail"), default="test-like",
                        help="Development lines drawn like the test split and set aside from the training split "
                             "(test-like; English development lines are then splits/en.test.txt after its first 300 "
                             "lines; work and results folders get a `-testlike` suffix) or the training split's last "
                             "lines (tail; English read on the test split's first 300).")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.distill_replacement and not args.distill:
        parser.error("--distill-replacement distils the replacement as --distill distils the extensions; give "
                     "--distill TOKENS too.")
    if (args.distill_head != "keep" or args.distill_head_rate is not None) and not args.distill:
        parser.error("--distill-head and --distill-head-rate set the distilled rows' head; give --distill TOKENS too.")
    if args.distill_head_rate is not None and args.distill_head == "keep":
        parser.error("--distill-head-rate is the rate of a head that learns; give --distill-head lm or likelihood "
                     "too.")
    if args.rate is not None and not args.source_shares:
        parser.error("--rate sets the recipe rows' peak rate; give --source-shares too (0: the recipe alone).")
    return args


def recipe_entry(base: dict, share: float, english: Path, then: str = "embeddings", rate: float | None = None) -> dict:
    """The bench entry `base` (a method's transfer, its label and options) trained with the extension recipe, `share`
    of every batch `english` (0: none), then `then` after the new rows alone (the recipe's default, embeddings, or
    none or full), at peak rate `rate` (None: the bench's)."""
    recipe = {"source_text": str(english), "source_share": share} if share else {}
    if then != "embeddings":
        recipe["then"] = then
    label = base["label"] + ", extension recipe" + THEN_LABELS[then] + (f" + {share:.0%} English" if share else "")
    train = {"preset": "extension", "recipe": recipe}
    if rate is not None:
        label += f", peak rate {rate:g}"
        train["learning_rate"] = rate
    return {**base, "label": label, "train": train}


def separated_entry(method: str, english: Path) -> dict:
    """A bench entry of `method` with its new rows kept off English at transfer time (`calibration.source_text`),
    not distilled (which a transfer kept off the source language does by default; the `--distill` rows are those)."""
    return {"name": method, "calibration": {"source_text": str(english)}, "distill": {"tokens": 0},
            "label": f"{method}, kept off English"}


def distill_entries(method: str, tokens: int, head: str = "keep", head_rate: float | None = None) -> list[dict]:
    """Bench entries of `method` with its tied head untied: without distillation (the control) and distilled over
    `tokens` target tokens, the untied head kept as the method and calibration made it (`head` keep) or its new
    output rows learning the next token (`head` lm, at `head_rate`; None: the distillation's rate)."""
    untied = {"name": method, "calibration": {"tied_head": "untie"}, "label": f"{method}, head untied"}
    distill = {"tokens": tokens, "learning_rate": 1e-2, "tied_head": "untie", "head": head}
    label = f"{method}, distilled, head untied"
    if head != "keep":
        label += {"lm": ", head learns the next token", "likelihood": ", head learns the source's likelihood"}[head]
        label += f" at {head_rate:g}" if head_rate is not None else ""
        if head_rate is not None:
            distill["head_learning_rate"] = head_rate
    distilled = {**untied, "label": label, "distill": distill}
    return [untied, distilled] if tokens else []


def extension_entries(methods: list[str], args, english: Path) -> list[dict]:
    """The rows an extension's bench has beside its plain methods: the `--separate` rows, the `--distill` rows (the
    untied control and the distilled row), and the recipe rows of `--source-shares`: each of those transfers, and
    the plain one, trained with the extension recipe."""
    separated = [separated_entry(method, english) for method in methods] if args.separate else []
    distilled = distilled_entries(methods, args)
    plain = [{"name": method, "calibration": {}, "label": method} for method in methods]
    recipes = [recipe_entry(base, share, english, args.then, args.rate)
               for base in plain + separated + distilled for share in args.source_shares]
    return recipes + separated + distilled


def distilled_entries(methods: list[str], args) -> list[dict]:
    """Each method's `--distill` rows (`distill_entries` with the head options given); none without `--distill`."""
    return [entry for method in methods
            for entry in distill_entries(method, args.distill, args.distill_head, args.distill_head_rate)]


def replacement_entries(methods: list[str], args) -> list[dict]:
    """The rows the replacement's bench has beside its method: the `--distill` rows under `--distill-replacement`."""
    return distilled_entries(methods, args) if args.distill_replacement else []


def main(argv=None) -> int:
    args = parse_args(argv)
    language, splits = args.language, args.data / "splits"
    dictionary = args.data / "dicts" / DICTIONARIES[language] if language in DICTIONARIES else None
    needed = [splits / f"{language}.train.txt", splits / f"{language}.test.txt", splits / "en.train.txt",
              splits / "en.test.txt", *([dictionary] if dictionary else [])]
    if not shared_data_ready("bench_extension", args.data, needed):
        return 0
    suffix = "-testlike" if args.dev_draw == "test-like" else ""
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-extension-{language}{suffix}").expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    train, dev = split_text(splits / f"{language}.train.txt", workdir, 0, args.dev_lines, args.dev_draw,
                            TEST_LINE_CHARS[language] if args.dev_draw == "test-like" else 0)
    english = splits / "en.test.txt"
    if args.eval == "dev" and args.dev_draw == "test-like":  # the test split's lines beyond those reported
        english = workdir / "en-dev.txt"
        if not english.exists():
            lines = (splits / "en.test.txt").read_text(encoding="utf-8").splitlines()[300:600]
            english.write_text("\n".join(lines) + "\n", encoding="utf-8")

    from langswap.bench import REFERENCE
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.extension import extend_tokenizer
    from langswap.resources.text import read_text_lines
    from langswap.resources.tokenizer import train_tokenizer

    model = smollm2_135m()
    source = load_tokenizer(model)
    vocab = args.vocab or REPLACEMENT_SIZE[language]
    tokenizers = {f"replace-{vocab}": (workdir / f"tokenizer-replace-{vocab}", ["combined"])} if dictionary else {}
    tokenizers.update({f"extend-{size}": (workdir / f"tokenizer-extend-{size}", args.methods) for size in args.sizes})
    lines = keep = None
    for name, (folder, _) in tokenizers.items():
        if (folder / "tokenizer.json").exists():
            continue
        lines = lines or read_text_lines(train, "training text")
        with atomic_directory(folder, overwrite=True) as made:
            if name.startswith("replace"):
                save_tokenizer(train_tokenizer(source, train, vocab), made)
            else:
                keep = keep or (read_text_lines(splits / "en.train.txt", "English training text") if dictionary
                                else None)  # English self-extension keeps nothing
                save_tokenizer(extend_tokenizer(source, lines, int(name.split("-")[1]), keep_lines=keep).tokenizer,
                               made)

    table = []
    for name, (folder, methods) in tokenizers.items():
        bench = {
            "source_model": str(model), "target_tokenizer": str(folder), "language": language,
            "train_text": str(train), "eval_text": str(dev if args.eval == "dev" else splits / f"{language}.test.txt"),
            "eval_lines": 300, "source_text": str(english), "output": str(workdir / f"bench-{name}"),
            "steps": args.steps, "reference": name == next(iter(tokenizers)),
            # calibrated as a transfer with target text is (an empty section keeps the default)
            "methods": [{"name": method, "calibration": {}} for method in methods] + (
                extension_entries(methods, args, splits / "en.train.txt") if name.startswith("extend")
                else replacement_entries(methods, args)),
            "resources": {"dictionary": str(dictionary)} if dictionary else {},
            "train": {"preset": "embeddings", "batch_size": 2, "sequence_length": 128, "save_steps": 100,
                      "logging_steps": 10, "max_lines": 20000},
        }
        result = run_and_record(bench, REPO / "benchmarks" / "results" /
                                f"extension-{language}{suffix}-{args.eval}-{name}")
        for row in result["rows"]:
            table.append({"tokenizer": "source (reference)" if row["variant"] == REFERENCE else name, **row})
    print(summary(table, sorted(set(args.steps))))
    (workdir / f"summary-{args.eval}.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    return 0


def summary(rows: list[dict], steps: list[int]) -> str:
    """One line per (tokenizer, method): target and English bits per byte at each step, target tokens per byte."""
    from langswap.bench import REFERENCE

    by = {}
    for row in rows:
        by.setdefault((row["tokenizer"], row["variant"]), {})[row["step"]] = row
    head = (["tokenizer", "method"] + [f"bits per byte @ {s}" for s in steps]
            + [f"English bits per byte @ {s}" for s in steps] + ["tokens per byte"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (tokenizer, variant), at in by.items():
        first = at[min(at)]

        def cell(step, key):
            value = (at.get(step) or (first if variant == REFERENCE else {})).get(key)
            return "" if value is None else f"{value:.4f}"

        out.append("| " + " | ".join([tokenizer, variant] + [cell(s, "bits_per_byte") for s in steps]
                                     + [cell(s, "source_bits_per_byte") for s in steps]
                                     + [cell(min(at), "tokens_per_byte")]) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
