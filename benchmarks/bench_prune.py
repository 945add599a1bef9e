"""Do an extension's new tokens pay? The ledger of each new token (`langswap.transfer.ledger`) on development lines,
and the model with the tokens that cost taken out (`langswap.resources.extension.prune_extension`, the rows kept
with them), at step 0.

SmolLM2-135M-Instruct extended by `--extend` tokens learnt from the language's training split (`langswap tokenizer
--extend N`, with `--keep-text splits/en.train.txt` unless the language is English), transferred with `--method`
(calibrated on the training text, as `langswap transfer` does with `calibration.text`). Development lines are drawn
like the test split and held out of the training text (bench_calibration.py's `--dev-draw test-like`), English
development lines are splits/en.test.txt's lines 301-600; the test splits' reported lines are not read. The ledger
is measured on the first half of the development lines (the check half) and the models are scored on the second half
(the scored half), so that what is pruned is chosen on lines the figures do not come from. A token is pruned where
its net on the check half is below zero: on the target text alone (`--on target`) or on both texts added up
(`--on both`: the English check lines' ledger too).

    python benchmarks/bench_prune.py --language de --extend 10000
    python benchmarks/bench_prune.py --language en --extend 10000 --method fvt

Prints a table (bits per byte and tokens per byte on the scored halves: the source model, the extension, the pruned
extension) and writes it with the ledgers' summaries to benchmarks/results/prune-LANG-N-METHOD/.
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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted([*DICTIONARIES, "en"]), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--extend", type=int, default=10000)
    parser.add_argument("--method", default="fvt")
    parser.add_argument("--on", choices=("target", "both"), default="both")
    parser.add_argument("--dev-lines", type=int, default=300)
    parser.add_argument("--workdir", type=Path, default=None)
    return parser.parse_args(argv)


def pruned_model(model, first: int, kept: list[int]):
    """`model` with only the source rows and the rows of the new tokens `kept` (in that order), padded as a transfer
    pads (the mean row up to a multiple of 64)."""
    import torch

    from langswap.models import is_tied
    from langswap.surgery import install_embeddings, output_bias

    index = torch.tensor(list(range(first)) + kept)
    rows = -(-len(index) // 64) * 64

    def select(matrix):
        chosen = matrix.detach()[index]
        fill = chosen.float().mean(dim=0).to(chosen.dtype).expand(rows - len(index), *chosen.shape[1:])
        return torch.cat([chosen, fill])

    head = model.get_output_embeddings()
    bias = output_bias(model)
    install_embeddings(model, select(model.get_input_embeddings().weight),
                       None if is_tied(model) else select(head.weight), None if bias is None else select(bias))
    return model


def main(argv=None) -> int:
    args = parse_args(argv)
    language, splits = args.language, args.data / "splits"
    needed = [splits / f"{language}.train.txt", splits / "en.train.txt", splits / "en.test.txt"]
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
    from langswap.resources.extension import extend_tokenizer, prune_extension, tokens_per_byte
    from langswap.resources.text import read_text_lines
    from langswap.transfer import transfer, transfer_config
    from langswap.transfer.ledger import new_token_ledger

    model_folder = smollm2_135m()
    source = load_tokenizer(model_folder)
    folder = workdir / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        keep = None if language == "en" else read_text_lines(splits / "en.train.txt", "English training text")
        with atomic_directory(folder, overwrite=True) as made:
            save_tokenizer(extend_tokenizer(source, read_text_lines(train, "training text"), args.extend,
                                            keep_lines=keep).tokenizer, made)
    extended_tokenizer = load_tokenizer(folder)
    output = workdir / f"transfer-{args.method}"
    if not (output / "langswap.json").exists():
        transfer(transfer_config({"source_model": str(model_folder), "target_tokenizer": str(folder),
                                  "method": args.method, "output": str(output),
                                  "calibration": {"text": str(train)}}))
    english = (splits / "en.test.txt").read_text(encoding="utf-8").splitlines()[300:600]
    target = dev.read_text(encoding="utf-8").splitlines()
    half = len(target) // 2
    check, scored = {"target": target[:half], "English": english[:150]}, {"target": target[half:],
                                                                           "English": english[150:]}
    first = len(source)
    model = load_model(output)
    ledgers = {name: new_token_ledger(model, source, extended_tokenizer, lines, first, progress=True)
               for name, lines in check.items()}
    net = ledgers["target"].net + (ledgers["English"].net if args.on == "both" else 0)
    losers = (net < 0).nonzero()[0] + first
    pruned = prune_extension(extended_tokenizer, first, losers.tolist())

    rows = {}
    for name, (reader, tokenizer) in {"source model": (load_model(model_folder), source),
                                      f"extended by {args.extend:,}": (model, extended_tokenizer)}.items():
        rows[name] = {text: causal_lm_score(reader, tokenizer, lines).as_dict() for text, lines in scored.items()}
    small = pruned_model(load_model(output), first, pruned.kept)
    rows[f"pruned to {len(pruned.kept):,} new tokens"] = {
        text: causal_lm_score(small, pruned.tokenizer, lines).as_dict() for text, lines in scored.items()}

    table = ["| model | bits per byte | tokens per byte | English bits per byte |", "|---|---|---|---|"]
    for name, scores in rows.items():
        table.append(f"| {name} | {scores['target']['bits_per_byte']:.4f} | "
                     f"{scores['target']['tokens_per_byte']:.4f} | {scores['English']['bits_per_byte']:.4f} |")
    summary = {
        "command": "python benchmarks/bench_prune.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "ledgers": {name: {"total_nats": round(ledger.total, 2), "bits_per_byte_change":
                           round(ledger.bits_per_byte_change(), 5), "losers": int((ledger.net < 0).sum()),
                           "read": int((ledger.occurrences > 0).sum())} for name, ledger in ledgers.items()},
        "pruned": {"asked": len(losers), "dropped": len(pruned.dropped), "cascaded": len(pruned.cascaded),
                   "spelled": len(pruned.spelled), "kept": len(pruned.kept)},
        "scores": rows,
        "tokens_per_byte_check": {"extended": tokens_per_byte(extended_tokenizer, check["target"]),
                                  "pruned": tokens_per_byte(pruned.tokenizer, check["target"])},
    }
    results = REPO / "benchmarks" / "results" / f"prune-{language}-{args.extend}-{args.method}"
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (results / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))
    print(json.dumps({key: summary[key] for key in ("ledgers", "pruned")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
