"""Zero-shot POS tagging, UD English-EWT to UD German-GSD, through RAMEN's bilingual model of SmolLM2-135M.

1. SmolLM2-135M is transferred to the German tokenizer of bench_tiktotok.py (49,152 tokens) with langswap's
   default method (`combined`, MUSE en-de, calibrated on splits/de.train.txt); kept under --workdir.
2. A short bilingual phase (`langswap train --preset ramen`): one body, the English and the German token tables,
   every batch half splits/en.train.txt and half splits/de.train.txt; it writes model/ (German) and source-model/
   (English) with one body.
3. A token-classification head is fine-tuned on English (EWT's dev split, the train split the shared data holds)
   and scored on German-GSD's test split, each row a way of reading German:
   - `zero-shot, bilingual`: fine-tuned on source-model/ with its embeddings frozen, German read through model/'s
     embeddings and tokenizer (RAMEN's zero-shot transfer);
   - `zero-shot, transfer only`: the same from SmolLM2 and the transfer of step 1, before any bilingual training;
   - `source model, its own tokenizer`: SmolLM2 fine-tuned on English and reading German through its English
     tokenizer (the same head with no transfer at all);
   - `supervised German`: model/ fine-tuned on GSD's dev split (a German training set) and scored on the same test.

Results: benchmarks/results/zero-shot-de/results.json and table.md.

    python benchmarks/bench_zero_shot.py [--steps 100] [--train-sentences 1000] [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_german_training import DEFAULT_DATA, REPO, shared_data_ready  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/zero-shot-de").expanduser())
    parser.add_argument("--steps", type=int, default=100, help="Updates of the bilingual phase.")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--train-sentences", type=int, default=1000, help="Sentences read of each split (GSD's test "
                        "has 977).")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results" / "zero-shot-de")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    splits, ud = args.data / "splits", args.data / "ud"
    needed = [splits / "de.train.txt", splits / "en.train.txt", args.data / "dicts" / "muse-en-de.tsv",
              ud / "en_ewt-ud-dev.conllu", ud / "de_gsd-ud-dev.conllu", ud / "de_gsd-ud-test.conllu"]
    if not shared_data_ready("bench_zero_shot", args.data, needed):
        return 0
    from bench_tiktotok import cached_resources

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.evaluation.token_classification import FinetuneConfig, finetune_token_classification
    from langswap.training.run import TrainConfig, train
    from langswap.transfer import transfer, transfer_config

    model = smollm2_135m()
    tokenizer = cached_resources(args.data, model)["tokenizer"]
    args.workdir.mkdir(parents=True, exist_ok=True)
    clock, seconds = time.perf_counter(), {}
    transferred = args.workdir / "transfer"
    if not (transferred / "langswap.json").is_file():
        transfer(transfer_config({"source_model": str(model), "target_tokenizer": str(tokenizer),
                                  "output": str(transferred), "overwrite": True,
                                  "resources": {"dictionary": str(args.data / "dicts" / "muse-en-de.tsv")},
                                  "calibration": {"text": str(splits / "de.train.txt")}}))
    seconds["transfer"] = round(time.perf_counter() - clock, 1)
    clock = time.perf_counter()
    bilingual = train(TrainConfig(
        model=str(transferred), train_text=str(splits / "de.train.txt"), output=str(args.workdir / "bilingual"),
        preset="ramen", steps=args.steps, batch_size=args.batch_size, sequence_length=args.sequence_length,
        save_steps=25, logging_steps=5, max_lines=20000,
        recipe={"source_model": str(model), "source_text": str(splits / "en.train.txt")}))
    seconds["bilingual"] = round(time.perf_counter() - clock, 1)
    german, english = bilingual.model, Path(bilingual.output) / "source-model"
    config = FinetuneConfig(epochs=args.epochs, learning_rate=args.learning_rate, batch_size=16,
                            max_sentences=args.train_sentences)
    test = ud / "de_gsd-ud-test.conllu"
    rows = [("zero-shot, bilingual", english, ud / "en_ewt-ud-dev.conllu", german),
            ("zero-shot, transfer only", model, ud / "en_ewt-ud-dev.conllu", transferred),
            ("source model, its own tokenizer", model, ud / "en_ewt-ud-dev.conllu", None),
            ("supervised German (GSD dev)", german, ud / "de_gsd-ud-dev.conllu", None)]
    results = []
    for label, tuned, train_split, zero_shot in rows:
        clock = time.perf_counter()
        result = finetune_token_classification(tuned, train_split, test, "pos", config, zero_shot=zero_shot)
        results.append({"row": label, "model": str(tuned), "train": train_split.name, "zero_shot": str(zero_shot),
                        "accuracy": round(result.accuracy, 4), "majority_baseline": round(result.majority_baseline, 4),
                        "train_sentences": result.train_sentences, "test_words": result.test_words,
                        "seconds": round(time.perf_counter() - clock, 1)})
        print(json.dumps(results[-1]), flush=True)
    out = args.results
    out.mkdir(parents=True, exist_ok=True)
    record = {"args": {key: str(value) for key, value in vars(args).items()}, "seconds": seconds,
              "bilingual_phase": [phase.as_dict() for phase in bilingual.phases], "rows": results}
    (out / "results.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    table = ["| reading German | fine-tuned on | accuracy | majority baseline |", "|---|---|---|---|"]
    table += [f"| {row['row']} | {row['train']} | {row['accuracy']:.4f} | {row['majority_baseline']:.4f} |"
              for row in results]
    (out / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
