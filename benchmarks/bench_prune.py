"""Do an extension's new tokens pay? The ledger of each new token (`langswap.transfer.ledger`) on development lines,
and the model with the tokens that cost taken out (`langswap prune`), at step 0.

SmolLM2-135M-Instruct extended by `--extend` tokens learnt from the language's training split (`langswap tokenizer
--extend N`, with `--keep-text splits/en.train.txt` unless the language is English), transferred with `--method`
(calibrated on the training text, as `langswap transfer` does with `calibration.text`). Development lines are drawn
like the test split and held out of the training text (bench_calibration.py's `--dev-draw test-like`), English
development lines are splits/en.test.txt's lines 301-600; the test splits' reported lines are not read. The ledger
is measured on the first half of the development lines (the check half) and the models are scored on the second half
(the scored half), so that what is pruned is chosen on lines the figures do not come from. A token is pruned where
its net on the check half is below zero: on the target text alone (`--on target`) or on both texts added up
(`--on both`: the English check lines' ledger too), by `--rule` (`langswap prune --rule`: auto, the default, chooses
one across the check half's own two halves); `--swap-halves` judges on the scored half and scores the check half.

    python benchmarks/bench_prune.py --language de --extend 10000
    python benchmarks/bench_prune.py --language en --extend 10000 --method fvt
    python benchmarks/bench_prune.py --language en --extend 10000 --distill 20000 --distill-head likelihood
    python benchmarks/bench_prune.py --language de --extend 10000 --separate --distill 20000 --train 200
    python benchmarks/bench_prune.py --language de --extend 10000 --method combined --dictionary --separate
    python benchmarks/bench_prune.py --language sw --extend 10000 --method combined --dictionary --separate \
        --as-shipped --train 200

With `--train UPDATES`, the extension and the pruned extension are also trained with the extension recipe (with
`--source-share` of every batch English training text, every row from the first update, its default there;
`--new-rows-fraction 0.5`: the new rows alone for the first half) and scored on the same halves, beside
the control: the source model with every embedding row trained as many updates on the same mix (`embeddings`).
Every model is then also scored on the check halves (`check_scores`, two more columns): a choice between trained
models, such as the extension recipe's phases, is made on those, not on the scored halves.

Prints a table (bits per byte and tokens per byte on the scored halves: the source model, the extension, the pruned
extension where the pruning took any token out, the extension cut to the source's rows and read with the source
tokenizer where the expected-count fit moved source rows (what that fit does without new tokens), and with `--train`
each trained) and writes it with the ledgers' summaries to
benchmarks/results/prune-LANG-N-METHOD[-dict][-separate][-nofit][-sourcerows-on|off][-distillT-HEAD[-rateR][-coverage]]
-ON/ (`-lrR` after the head where --distill-rate is not 1e-2, `-shipped` with --as-shipped: the transfer's own
defaults, the README's extension line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import TEST_LINE_CHARS, split_text  # noqa: E402
from bench_german_training import DEFAULT_DATA, REPO, shared_data_ready  # noqa: E402
from bench_tiktotok import DICTIONARIES  # noqa: E402

PAPERS_RATE = 5e-4  # the causal peak of every recipe but the extension's; runs at another peak are named by it


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted([*DICTIONARIES, "en"]), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--extend", type=int, default=10000)
    parser.add_argument("--method", default="fvt")
    parser.add_argument("--dictionary", action="store_true",
                        help="give the transfer the language's dictionary (resources.dictionary, as the README's "
                             "extension line does), which `combined` reads")
    parser.add_argument("--on", choices=("target", "both"), default="both")
    parser.add_argument("--distill", type=int, default=0, metavar="TOKENS",
                        help="Distil the new rows from the source model over TOKENS target tokens at transfer time "
                             "(head untied, as bench_extension.py's --distill rows) before the ledger reads them.")
    parser.add_argument("--as-shipped", action="store_true",
                        help="Leave the distillation's settings and calibration.tied_head unset, so that the transfer "
                             "resolves them as `langswap transfer` does (with --separate: distilled by the extension's "
                             "defaults, the head untied only where the learned rows are kept); suffix -shipped.")
    parser.add_argument("--distill-rate", type=float, default=1e-2,
                        help="With --distill: the distillation's peak rate (distill.learning_rate).")
    parser.add_argument("--distill-head", choices=("keep", "lm", "likelihood"), default="keep",
                        help="With --distill: what the untied head's new output rows learn (distill.head).")
    parser.add_argument("--distill-head-rate", type=float, default=None,
                        help="With --distill-head lm or likelihood: the head's own peak rate "
                             "(distill.head_learning_rate; default: the distillation's 1e-2).")
    parser.add_argument("--distill-order", choices=("random", "coverage"), default="random",
                        help="With --distill: the order the training lines are read in (distill.order).")
    parser.add_argument("--separate", action="store_true",
                        help="Keep the new rows off English at transfer time (calibration.source_text: the English "
                             "training split), as bench_extension.py's --separate rows.")
    parser.add_argument("--count-fit", choices=("auto", "off"), default="auto",
                        help="calibration.count_fit: auto (the default: an extension's new rows fitted to their "
                             "counts) or off (variant suffix -nofit).")
    parser.add_argument("--source-rows", choices=("auto", "on", "off"), default="auto",
                        help="calibration.count_fit_source_rows: auto (the default: with --separate, the fit is also "
                             "tried over the source rows), on (also without English text: an English "
                             "self-extension; variant suffix -sourcerows-on) or off (suffix -sourcerows-off).")
    parser.add_argument("--train", type=int, default=0, metavar="UPDATES",
                        help="Also train the extension and the pruned extension for UPDATES updates of the extension "
                             "recipe (batch 2 x 128 on the training text, --source-share of every batch English), and "
                             "as a control the source model's every row as long on the same mix, and score them on "
                             "the same halves.")
    parser.add_argument("--train-preset", choices=("extension", "embeddings"), default="extension",
                        help="With --train: the recipe the extension and the pruned extension train by (embeddings: "
                             "every row from the first update, as the control trains; results suffix "
                             "-train-embeddings).")
    parser.add_argument("--new-rows-fraction", type=float, default=None,
                        help="With --train and the extension recipe: recipe.new_rows_fraction (default: the recipe's "
                             "own, 0 with English in the batches; 0.5 trains the new rows alone for the first half; "
                             "suffix -newrowsF).")
    parser.add_argument("--train-calibration", choices=("spare-rare", "keep"), default=None,
                        help="With --train: train.calibration for the extension's runs (the control has no move to "
                             "take off); default: train's own (keep for the extension recipe with English in every "
                             "batch, spare-rare otherwise); suffix -trainkeep where the runs start from keep.")
    parser.add_argument("--train-rate", type=float, default=None,
                        help="With --train: the extension's runs' peak rate (train.learning_rate; default: the "
                             "recipe's own, 1e-4 for the extension recipe, 5e-4 for embeddings; the control keeps "
                             "5e-4); suffix -trainlrR where it is not 5e-4 (results without the suffix are "
                             "the papers' 5e-4, --train-rate 0.0005).")
    parser.add_argument("--source-share", type=float, default=0.5,
                        help="With --train: the share of every batch that is English training text "
                             "(recipe.source_share; 0: none; results suffix -englishS unless 0.5).")
    parser.add_argument("--rule", choices=("auto", "cascade", "weighed"), default="auto",
                        help="langswap prune --rule (variant suffix -rule-RULE unless auto).")
    parser.add_argument("--swap-halves", action="store_true",
                        help="Judge on the scored half and score on the check half (suffix -swapped): a pruning "
                             "rule chosen this way is chosen on lines the reported figures do not come from.")
    parser.add_argument("--score-check", action="store_true",
                        help="Score every model on the check halves too (as --train does), to choose a setting on "
                             "them rather than on the scored halves.")
    parser.add_argument("--dev-lines", type=int, default=300)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if (args.distill_head != "keep" or args.distill_head_rate is not None) and not args.distill:
        parser.error("--distill-head and --distill-head-rate set the distilled rows' head; give --distill TOKENS too.")
    if args.distill_rate != 1e-2 and not args.distill:
        parser.error("--distill-rate is the distillation's rate; give --distill TOKENS too.")
    if args.distill_order != "random" and not args.distill:
        parser.error("--distill-order orders the distillation's lines; give --distill TOKENS too.")
    if args.as_shipped and (args.distill or args.count_fit != "auto" or args.source_rows != "auto"):
        parser.error("--as-shipped transfers with the defaults; leave out --distill, --count-fit and --source-rows.")
    if args.distill_head_rate is not None and args.distill_head == "keep":
        parser.error("--distill-head-rate is the rate of a head that learns; give --distill-head lm or likelihood.")
    if args.train_preset != "extension" and not args.train:
        parser.error("--train-preset is the recipe of the --train updates; give --train UPDATES too.")
    if args.new_rows_fraction is not None and (not args.train or args.train_preset != "extension"):
        parser.error("--new-rows-fraction is the extension recipe's; give --train UPDATES with --train-preset "
                     "extension.")
    if args.train_calibration is not None and not args.train:
        parser.error("--train-calibration sets how the --train updates start; give --train UPDATES too.")
    if args.train_rate is not None and not args.train:
        parser.error("--train-rate is the extension runs' peak rate; give --train UPDATES too.")
    if args.source_share != 0.5 and not args.train:
        parser.error("--source-share is the English share of the --train updates; give --train UPDATES too.")
    if not 0 <= args.source_share < 1:
        parser.error(f"--source-share is a share of every batch, at least 0 and below 1, not {args.source_share}.")
    if args.dictionary and args.language not in DICTIONARIES:
        parser.error(f"--dictionary gives the language's dictionary; there is none for {args.language}.")
    if args.separate and args.language == "en":
        parser.error("--separate keeps the new rows off English; an English self-extension has no other language.")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    language, splits = args.language, args.data / "splits"
    needed = [splits / f"{language}.train.txt", splits / "en.train.txt", splits / "en.test.txt",
              *([args.data / "dicts" / DICTIONARIES[language]] if args.dictionary else [])]
    if not shared_data_ready("bench_prune", args.data, needed):
        return 0
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-prune-{language}-{args.extend}").expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    train, dev = split_text(splits / f"{language}.train.txt", workdir, 0, args.dev_lines, "test-like",
                            TEST_LINE_CHARS[language])

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.files import atomic_directory
    from langswap.models import load_model, load_tokenizer, save_tokenizer
    from langswap.records import read_model_record
    from langswap.resources.extension import extend_tokenizer, tokens_per_byte
    from langswap.resources.text import read_text_lines
    from langswap.transfer import transfer, transfer_config
    from langswap.transfer.prune import PruneJob, prune

    model_folder = smollm2_135m()
    source = load_tokenizer(model_folder)
    folder = workdir / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        keep = None if language == "en" else read_text_lines(splits / "en.train.txt", "English training text")
        with atomic_directory(folder, overwrite=True) as made:
            save_tokenizer(extend_tokenizer(source, read_text_lines(train, "training text"), args.extend,
                                            keep_lines=keep).tokenizer, made)
    extended_tokenizer = load_tokenizer(folder)
    variant = (args.method + ("-dict" if args.dictionary else "") + ("-separate" if args.separate else "")
            + ("-nofit" if args.count_fit == "off" else "")
            + (f"-sourcerows-{args.source_rows}" if args.source_rows != "auto" else "")
            + (f"-distill{args.distill}-{args.distill_head}" if args.distill else "")
            + (f"-lr{args.distill_rate:g}" if args.distill_rate != 1e-2 else "")
            + (f"-rate{args.distill_head_rate:g}" if args.distill_head_rate is not None else "")
            + ("-coverage" if args.distill_order == "coverage" else "")
            + ("-shipped" if args.as_shipped else ""))
    output = workdir / f"transfer-{variant}"
    if not (output / "langswap.json").exists():
        config = {"source_model": str(model_folder), "target_tokenizer": str(folder), "method": args.method,
                  "output": str(output), "calibration": {"text": str(train), "count_fit": args.count_fit,
                                  "count_fit_source_rows": args.source_rows}}
        if args.separate:
            config["calibration"]["source_text"] = str(splits / "en.train.txt")
        if args.dictionary:
            config["resources"] = {"dictionary": str(args.data / "dicts" / DICTIONARIES[language])}
        if not args.as_shipped:  # not distilled unless asked (a transfer kept off English distils by default)
            config["distill"] = {"tokens": 0}
        if args.distill:  # as bench_extension.py's distilled rows
            config["calibration"]["tied_head"] = "untie"
            config["distill"] = {"tokens": args.distill, "learning_rate": args.distill_rate, "tied_head": "untie",
                                 "head": args.distill_head, "order": args.distill_order}
            if args.distill_head_rate is not None:
                config["distill"]["head_learning_rate"] = args.distill_head_rate
        transfer(transfer_config(config))
    english = (splits / "en.test.txt").read_text(encoding="utf-8").splitlines()[300:600]
    target = dev.read_text(encoding="utf-8").splitlines()
    half = len(target) // 2
    check, scored = {"target": target[:half], "English": english[:150]}, {"target": target[half:],
                                                                           "English": english[150:]}
    if args.swap_halves:
        check, scored = scored, check
    suffix = (f"-rule-{args.rule}" if args.rule != "auto" else "") + ("-swapped" if args.swap_halves else "")
    for name, lines in check.items():
        (workdir / f"check-{name}{suffix}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pruned_folder = workdir / f"pruned-{variant}-{args.on}{suffix}"
    if not (pruned_folder / "langswap.json").exists():
        english_check = str(workdir / f"check-English{suffix}.txt") if args.on == "both" else None
        prune(PruneJob(model=str(output), text=str(workdir / f"check-target{suffix}.txt"), lines=len(check["target"]),
                       source_text=english_check, output=str(pruned_folder), rule=args.rule, overwrite=True),
              progress=True)
    report = read_model_record(pruned_folder).pruning
    record = read_model_record(output)
    distillation = getattr(record, "distillation", None)
    pruned_tokenizer = load_tokenizer(pruned_folder)

    rows, check_rows = {}, {}

    def score(name: str, reader, tokenizer, both: bool = False) -> None:
        rows[name] = {text: causal_lm_score(reader, tokenizer, lines).as_dict() for text, lines in scored.items()}
        if both:  # the check half too: what a choice between trained models is made on
            check_rows[name] = {text: causal_lm_score(reader, tokenizer, lines).as_dict()
                                for text, lines in check.items()}

    # a pruning that took nothing out wrote the extension itself again: it is neither scored nor trained twice
    pruned_row = (f"pruned to {report.kept:,} new tokens", pruned_folder, pruned_tokenizer)
    models = ((f"extended by {args.extend:,}", output, extended_tokenizer), *((pruned_row,) if report.dropped else ()))
    both = bool(args.train) or args.score_check  # the check halves scored too
    for name, path, tokenizer in (("source model", model_folder, source), *models):
        score(name, load_model(path), tokenizer, both=both)
    fit = getattr(record, "count_fit", None)
    if fit is not None and fit.kept and fit.source_rows:  # what the fit of the source rows does without new tokens
        cut = load_model(output)
        cut.resize_token_embeddings(len(source))
        score("the extension's source rows alone (new tokens cut)", cut, source, both=both)
    english_train = None if language == "en" else splits / "en.train.txt"
    planned = train_config(output, workdir, train, english_train, args.train, args.source_share, args.train_preset,
                           args.new_rows_fraction, args.train_calibration, args.train_rate) if args.train else None
    start, rate = (planned.calibration, peak_rate(planned)) if planned else (None, None)
    if args.train:
        for name, path, tokenizer in models:
            reader = load_model(trained_model(path, path.parent, train, english_train, args.train, args.source_share,
                                              preset=args.train_preset, new_rows=args.new_rows_fraction,
                                              calibration=args.train_calibration, rate=args.train_rate))
            trained = f"{name}, {args.train} updates" + (" of every row" if args.train_preset == "embeddings" else "")
            score(trained, reader, tokenizer, both=True)
        # the control: the source model's every row trained as long on the same mix (`embeddings`), no row moved
        # onto the target text's frequency line (the extension recipe moves only new rows)
        reader = load_model(trained_model(model_folder, workdir, train, english_train, args.train, args.source_share,
                                          preset="embeddings"))
        score(f"source model, {args.train} updates of every row", reader, source, both=True)

    table = ["| model | bits per byte | tokens per byte | English bits per byte |"
             + (" check half | check half, English |" if check_rows else ""),
             "|---|---|---|---|" + ("---|---|" if check_rows else "")]
    for name, scores in rows.items():
        checked = check_rows.get(name)
        table.append(f"| {name} | {scores['target']['bits_per_byte']:.4f} | "
                     f"{scores['target']['tokens_per_byte']:.4f} | {scores['English']['bits_per_byte']:.4f} |"
                     + (f" {checked['target']['bits_per_byte']:.4f} | {checked['English']['bits_per_byte']:.4f} |"
                        if checked else (" | |" if check_rows else "")))
    summary = {
        "command": "python benchmarks/bench_prune.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "pruning": report.as_dict(),
        "distillation": distillation.as_dict() if distillation is not None else None,
        "scores": rows,
        "check_scores": check_rows or None,
        "training": {"updates": args.train, "preset": args.train_preset, "control_preset": "embeddings",
                     "new_rows_fraction": args.new_rows_fraction, "calibration": start,
                     "phases": [[phase.name, phase.steps] for phase in planned_phases(planned)],
                     "source_share": args.source_share, "learning_rate": rate, "batch_size": 2,
                     "sequence_length": 128} if args.train else None,
        "tokens_per_byte_check": {"extended": tokens_per_byte(extended_tokenizer, check["target"]),
                                  "pruned": tokens_per_byte(pruned_tokenizer, check["target"])},
    }
    results = REPO / "benchmarks" / "results" / (f"prune-{language}-{args.extend}-{variant}-{args.on}{suffix}"
                                                  + ("-train-embeddings" if args.train_preset == "embeddings" else "")
                                                  + (f"-newrows{args.new_rows_fraction:g}"
                                                     if args.new_rows_fraction is not None else "")
                                                  + ("-trainkeep" if start == "keep" else "")
                                                  + (f"-trainlr{rate:g}" if rate and rate != PAPERS_RATE else "")
                                                  + (f"-english{args.source_share:g}"
                                                     if args.train and args.source_share != 0.5 else ""))
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (results / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))
    print(json.dumps(summary["pruning"], indent=2))
    return 0


def train_config(model: Path, parent: Path, train: Path, english: Path | None, updates: int, share: float,
                 preset: str = "extension", new_rows: float | None = None, calibration: str | None = None,
                 rate: float | None = None):
    """The TrainConfig of `model` trained for `updates` updates of `preset` (extension: `new_rows` of them the new
    rows alone, the recipe's default where None, then every row; embeddings: every row throughout, none
    recalibrated; batch 2 x 128 on the first 20,000 lines of `train`, `share` of every batch `english` where given;
    `calibration`: train.calibration, its default where None; `rate`: train.learning_rate), its output a folder in
    `parent` named by those settings and the calibration start they resolve to."""
    from langswap.config import from_dict
    from langswap.training.options import TrainConfig

    mixed = english is not None and share
    recipe = {"source_text": str(english), "source_share": share} if mixed else {}
    if new_rows is not None:
        recipe["new_rows_fraction"] = new_rows
    options = {**({"unshown_rows": "train"} if preset == "embeddings" else {}),
               **({"calibration": calibration} if calibration is not None else {}),
               **({"learning_rate": rate} if rate is not None else {}),
               "model": str(model), "train_text": str(train), "preset": preset, "recipe": recipe, "steps": updates,
               "batch_size": 2, "sequence_length": 128, "save_steps": 100, "logging_steps": 10, "max_lines": 20000}
    resolved = from_dict(TrainConfig, {**options, "output": str(parent)}, where="train.")
    phases = planned_phases(resolved)
    start, peak = resolved.calibration, phases[0].learning_rate
    # a self-extension's recipe trains every row from the first update where new_rows is unset: named as --new-rows 0
    every_row = preset == "extension" and new_rows is None and not mixed and len(phases) == 1
    name = (f"{model.name}-trained{updates}" + (f"-{preset}" if preset != "extension" else "")
            + (f"-newrows{new_rows:g}" if new_rows is not None else "-newrows0" if every_row else "")
            + (f"-english{share:g}" if mixed else "")
            + ("-keep" if start == "keep" else "") + (f"-lr{peak:g}" if peak != PAPERS_RATE else ""))
    return from_dict(TrainConfig, {**options, "output": str(parent / name)}, where="train.")


def planned_phases(config) -> list:
    """A TrainConfig's phases as its recipe plans them for a causal LM."""
    from langswap.training.recipes.base import plan_phases

    return plan_phases(config, "causal")


def peak_rate(config) -> float:
    """The peak rate a TrainConfig's first phase trains at (train.learning_rate, or its recipe's own)."""
    return planned_phases(config)[0].learning_rate


def trained_model(model: Path, parent: Path, train: Path, english: Path | None, updates: int, share: float,
                  preset: str = "extension", new_rows: float | None = None, calibration: str | None = None,
                  rate: float | None = None) -> Path:
    """The folder of `model` trained as `train_config` says; a finished run is reused."""
    from langswap.training.run import train as train_model

    config = train_config(model, parent, train, english, updates, share, preset, new_rows, calibration, rate)
    return Path(train_model(config, progress=True).model)

if __name__ == "__main__":
    sys.exit(main())
