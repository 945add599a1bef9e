"""Step-0 bits per byte of method settings on German or Swahili, each alone and frequency-calibrated.

A quick look before a bench: the tokenizer, vectors (aligned on the dictionary) and dictionary of bench_tiktotok.py
(built when missing), SmolLM2-135M, every setting transferred in memory and scored on the first --eval-lines lines of
the language's test split, then calibrated (strength 1, on the training split) and scored again, as a transfer with
the training split as its target text does: a method's candidates (combined, mode auto) compared on the split's last
100 lines after calibrating each, which calibration leaves out of its counts and checks itself on (the uncalibrated
figure is of the candidate kept for the calibrated model).

    python benchmarks/results/peers-de-auto/explore_combined.py --language de --settings overlap "combined mode=choose"

A setting is a method name followed by key=value options (values read as YAML).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for the bench modules
from bench_german_training import DEFAULT_DATA, cached_resources  # noqa: E402
from bench_tiktotok import DICTIONARIES, swahili_resources  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(DICTIONARIES), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--settings", nargs="+", required=True)
    parser.add_argument("--eval-lines", type=int, default=300)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from langswap.transfer.calibrate import CalibrationConfig
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.methods.base import TransferInputs, make_config
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.kinds import resources_config
    from langswap.resources.kinds.vectors import load_aligned
    from langswap.resources.alignment import AlignConfig
    from langswap.resources.text import read_text_lines
    from langswap.surgery import read_source_matrices
    from langswap.tokens import Vocabulary
    from langswap.transfer.calibrate import tie_head
    from langswap.models import is_tied
    from langswap.surgery import install_embeddings
    from langswap.transfer import HELD_OUT_LINES, apply_method, calibrate_rows

    model_dir = smollm2_135m()
    built = cached_resources(args.data, model_dir) if args.language == "de" else swahili_resources(args.data, model_dir)
    dictionary = args.data / "dicts" / DICTIONARIES[args.language]
    aligned = load_aligned(resources_config(source_vectors=str(built["vectors"]["en"]),
                                            target_vectors=str(built["vectors"][args.language]),
                                            dictionary=str(dictionary)), AlignConfig())
    print(f"alignment: held-out precision@1 {aligned.report['precision_at_1']}", flush=True)
    model = load_model(model_dir)
    source, target = Vocabulary(load_tokenizer(model_dir)), Vocabulary(load_tokenizer(built["tokenizer"]))
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, matrices.embeddings,
                            resources={"vectors": aligned, "dictionary": Dictionary.load(dictionary)})
    splits = args.data / "splits"
    lines = read_text_lines(splits / f"{args.language}.test.txt", "test text", max_lines=args.eval_lines)
    train = read_text_lines(splits / f"{args.language}.train.txt", "training text", max_lines=20000)
    for setting in args.settings:
        name, *options = setting.split()
        config = make_config(name, **{k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in options)})
        clock = time.perf_counter()
        transferred, result, reports = apply_method(
            model, inputs, matrices, config, copy=True, held_out=train[-HELD_OUT_LINES:],
            finish=lambda m, r: {"calibration": calibrate_rows(m, target.tokenizer, r.mapping, CalibrationConfig(),
                                                               1.0, train)})
        report = reports["calibration"]
        calibrated = causal_lm_score(transferred, target.tokenizer, lines).bits_per_byte
        if not is_tied(transferred) and matrices.tied:  # calibration untied it (tied_head: untie)
            tie_head(transferred)
        install_embeddings(transferred, result.embeddings, result.output_embeddings, result.output_bias)
        plain = causal_lm_score(transferred, target.tokenizer, lines).bits_per_byte
        choice = f"kept {result.choice['chosen']} {result.choice.get('losses')}; " if result.choice else ""
        put_back = f"; calibration {report['skipped']}" if report.get("skipped") else ""
        print(f"| {args.language} | {setting} | {plain:.4f} | {calibrated:.4f} | {choice}{result.mapping.summary()}"
              f"{put_back} | {time.perf_counter() - clock:.0f} s |", flush=True)
        del transferred
    return 0


if __name__ == "__main__":
    sys.exit(main())
