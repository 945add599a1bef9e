"""`langswap prune`: an extended model without the new tokens that cost more than they save on held-out text.

An extension's new tokens are chosen by how often their text occurs, not by what they do to the model's loss; a
token the model predicts badly, or one that takes probability where it does not belong, makes the model worse at
what it read before. The ledger (`langswap.transfer.ledger`) gives each new token its net on development text
(nats saved where it is read, less what it takes elsewhere), and on source-language text too where it is given (a
token that costs English more than it saves the target language goes). Which tokens go is a rule (`RULES`): those
whose summed net is below zero, with every token made from one of them (`cascade`); or each token weighed with the
tokens made from it, so that a part stays where its products pay (`weighed`, `tokens_to_drop`). A few hundred lines
leave most of an extension's tokens unread or read a few times, and whether taking out what they show costing pays
depends on the language and the extension, so `auto` (the default) reads each text's lines in two halves (alternate
lines), takes out what `cascade` chooses on one half, counts what the other half's ledger says those tokens were
worth there, both ways (`held_out_gains`), and prunes by `cascade` where that saves nats, otherwise not at all.
`weighed` is not among its choices: the parts it keeps are read where their products went, which the ledger of the
unpruned model cannot see, and on German the model it pruned read held-out lines worse than `cascade`'s though the
ledger rated it higher. The chosen tokens are taken out of the tokenizer (`resources.extension.prune_extension`: for
BPE with every later merge that reads one of them; characters the text needs stay), and their rows out of the model;
the tokens kept are renumbered after the source, their rows moved with them, and so are calibration's move
(`calibration_move.CalibrationMove.rows`) and the provenance tables; the padding rows after them are the mean of the old
padding rows, up to a multiple of `pad_to_multiple` and at least the source model's row count. The folder is written
under a temporary name and renamed when complete; its langswap.json is the input's, with the vocabulary and the rows by
how they were made as they now are (counted from the provenance tables; left out where there are none), a `pruning`
section saying what went and why (a second pruning replaces it), and without the transfer's held-out figures, which were
of the model before pruning; the other sections (methods, calibration) describe the transfer as it was.

One pass: taking tokens out changes how the text is read around them, so the pruned model's ledger is not the input's
less the losers; run the command again on its output to prune what then costs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from langswap.calibration_move import MOVE_FILE, CalibrationMove
from langswap.errors import ConfigError, MissingResourceError
from langswap.files import refuse_existing
from langswap.locking import OutputLock
from langswap.models import is_tied, load_model, load_tokenizer
from langswap.records import has_model_record, read_model_record
from langswap.reports import PruningReport, VocabularyReport
from langswap.resources.extension import new_token_products, prune_extension, source_of_extension
from langswap.resources.text import read_text_lines
from langswap.start_rows import START_FILE, StartRows
from langswap.surgery import install_embeddings, output_bias
from langswap.tokens import Vocabulary
from langswap.transfer.ledger import new_token_ledger
from langswap.transfer.steps import write_model_folder

logger = logging.getLogger(__name__)

PROVENANCE_FILES = ("provenance.tsv", "provenance-head.tsv")

RULES = ("cascade", "weighed")
RULE_WHY = {
    "cascade": "net nats below 0 on the judged lines (saved where read, less what it takes elsewhere)",
    "weighed": "net nats below 0 on the judged lines (saved where read, less what it takes elsewhere), counting what "
               "the tokens made from it save",
    "none": "cascade, choosing on one half of the judged lines, saved no nats on the other half",
}


@dataclass(kw_only=True)
class PruneJob:
    """`langswap prune`: which extended model, judged on which text, written where."""

    model: str = field(default="", metadata={
        "help": "Folder of a model whose tokenizer extends its source's (a `langswap transfer` output into an "
                "extension, trained or not).", "positional": True})
    text: str = field(default="", metadata={
        "help": "Target-language development text, held out of training: the new tokens are judged on its first "
                "--lines lines."})
    source_text: str | None = field(default=None, metadata={
        "help": "Source-language text judged the same way, its ledger added to the target text's: a token that "
                "costs the source language more than it saves the target goes."})
    output: str = field(default="", metadata={"help": "Folder to write the pruned model to."})
    lines: int = field(default=300, metadata={"help": "Lines of each text read."})
    first_new: int | None = field(default=None, metadata={
        "help": "Id of the first new token (default: the record's vocabulary.kept)."})
    rule: str = field(default="auto", metadata={
        "help": "Which tokens go: cascade (net below zero, with every token made from one that goes), weighed (a "
                "token weighed with the tokens made from it, so that a part stays for its products), or auto: "
                "cascade where its choice on each half of the lines saves nats on the other half, nothing otherwise.",
        "choices": ("auto", *RULES)})
    max_length: int = field(default=512, metadata={"help": "Tokens of a line read on either side."})
    pad_to_multiple: int = field(default=64, metadata={"help": "Round the matrices' rows up to a multiple of this."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing output folder."})

    def check(self) -> None:
        for name in ("model", "text", "output"):
            if not getattr(self, name):
                raise ConfigError(f"langswap prune needs --{name.replace('_', '-')}" if name != "model"
                                  else "langswap prune needs the model folder (the first argument).")
        if not Path(self.model).is_dir():
            raise MissingResourceError(f"model folder '{self.model}' does not exist.")
        for path in (self.text, self.source_text):
            if path and not Path(path).is_file():
                raise MissingResourceError(f"text '{path}' does not exist or is not a file.")
        if self.rule not in ("auto", *RULES):
            raise ConfigError(f"--rule is auto or one of {', '.join(RULES)}, not '{self.rule}'.")
        if self.lines < 1 or self.max_length < 2 or self.pad_to_multiple < 1:
            raise ConfigError("--lines and --pad-to-multiple must be at least 1, --max-length at least 2.")
        if Path(self.output).resolve() == Path(self.model).resolve():
            raise ConfigError("--output is the model folder itself; give a new folder (the input stays as it is).")
        refuse_existing(self.output, self.overwrite)


@dataclass
class PruneResult:
    output: str
    report: PruningReport

    def summary(self) -> str:
        return f"{self.report.summary()}; written to {self.output}"

    def as_dict(self) -> dict:
        return {"output": self.output, "pruning": self.report.as_dict()}


def prune(job: PruneJob, progress: bool = False) -> PruneResult:
    """Prune the new tokens of `job.model` that `job.rule` takes out by their nets on the texts (module docstring).
    One process at a time writes an output folder: another gets `OutputLockedError` (`langswap.locking`)."""
    job.check()
    with OutputLock(job.output, "pruned model folder"):
        return _prune(job, progress)


def _prune(job: PruneJob, progress: bool) -> PruneResult:
    folder = Path(job.model)
    if not has_model_record(folder):
        raise MissingResourceError(f"'{folder}' has no langswap.json: give a folder written by `langswap transfer` "
                                   "(or trained from one by `langswap train`).")
    record = read_model_record(folder)
    vocabulary = getattr(record, "vocabulary", None)
    first = job.first_new if job.first_new is not None else (vocabulary.kept if vocabulary is not None
                                                              and vocabulary.extended else None)
    if first is None:
        raise ConfigError(f"'{folder}' has no record of an extended vocabulary (langswap.json's vocabulary.kept); "
                          "give --first-new, the id of its first new token.")
    tokenizer = load_tokenizer(folder)
    if not 0 < first < len(tokenizer):
        raise ConfigError(f"--first-new is {first}, and the tokenizer has {len(tokenizer):,} tokens: the new tokens "
                          "must start inside it.")
    source = source_of_extension(tokenizer, first)
    model = load_model(folder)
    texts = {"target": job.text, **({"source": job.source_text} if job.source_text else {})}
    read = {name: [line for line in read_text_lines(path, f"{name} text", max_lines=job.lines) if line.strip()]
            for name, path in texts.items()}
    # each text's lines in two halves (alternate lines), each read on its own: the rules are tried across them
    halves = [{name: new_token_ledger(model, source, tokenizer, lines[part::2], first, job.max_length, progress)
               for name, lines in read.items()} for part in (0, 1)]
    ledgers = {name: halves[0][name] + halves[1][name] for name in texts}
    products = new_token_products(tokenizer, first)
    summed = [sum(half[name].net for name in texts) for half in halves]
    held_out = held_out_gains(summed, products, first)
    rule = job.rule if job.rule != "auto" else "cascade" if held_out["cascade"] > 0 else "none"
    net = summed[0] + summed[1]
    occurrences = sum(ledger.occurrences for ledger in ledgers.values())
    drop, held = rule_drop(rule, net, products, first)
    pruned = prune_extension(tokenizer, first, drop)
    rows = max(-(-(first + len(pruned.kept)) // job.pad_to_multiple) * job.pad_to_multiple,
               (vocabulary.source_rows or 0) if vocabulary is not None else 0)
    index = np.asarray(list(range(first)) + pruned.kept, dtype=np.int64)
    old_rows = _take_rows(model, index, rows, len(tokenizer))
    report = PruningReport(
        text=job.text, source_text=job.source_text, lines={name: len(lines) for name, lines in read.items()},
        new_before=len(tokenizer) - first, kept=len(pruned.kept), dropped=len(pruned.dropped),
        unread=int(sum(occurrences[token - first] == 0 for token in pruned.dropped)),
        cascaded=len(pruned.cascaded), spelled=len(pruned.spelled), held=held,
        nats=round(sum(ledger.total for ledger in ledgers.values()), 3),
        bits_per_byte_change={name: round(ledger.bits_per_byte_change(), 5) for name, ledger in ledgers.items()},
        rule=rule, held_out=held_out, why=RULE_WHY[rule])
    if hasattr(record, "vocabulary"):
        record.vocabulary = _vocabulary(vocabulary, first, len(pruned.kept), rows)
    if getattr(record, "target_vocabulary", None) is not None:
        record.target_vocabulary = Vocabulary(pruned.tokenizer).summary()
    for key, name in (("counts", "provenance.tsv"), ("head_counts", "provenance-head.tsv")):
        if getattr(record, key, None):  # rows by how they were made: those kept
            setattr(record, key, _kinds(folder / name, index) if (folder / name).is_file() else {})
    if getattr(record, "metrics", None) is not None:  # figures of the model before pruning
        record.metrics = None
    record.pruning = report

    def save_model(out: Path) -> None:
        model.save_pretrained(out)
        if (folder / MOVE_FILE).is_file():  # padding rows: beyond the move, so never moved
            CalibrationMove.load(folder / MOVE_FILE).rows(np.concatenate(
                [index, np.full(rows - len(index), old_rows)])).save(out / MOVE_FILE)
        if (folder / START_FILE).is_file():  # the rows of the tokens kept, renumbered
            StartRows.load(folder / START_FILE).rows(index).save(out / START_FILE)

    def write_provenances(out: Path) -> None:
        new_id = {int(old): new for new, old in enumerate(index)}
        for name in PROVENANCE_FILES:
            if (folder / name).is_file():
                _renumber_table(folder / name, out / name, new_id)

    write_model_folder(Path(job.output), job.overwrite, save_model, pruned.tokenizer, write_provenances, record)
    logger.info("%s", report.summary())
    return PruneResult(job.output, report)


def rule_drop(rule: str, net: np.ndarray, products: list[tuple[int, list[int]]],
              first: int) -> tuple[list[int], int]:
    """(the new tokens `rule` takes out, those with a net below zero it keeps for their products): `cascade` every
    token whose own net is below zero; `weighed` those `tokens_to_drop` takes out; `none` nothing."""
    if rule == "none":
        return [], 0
    if rule == "cascade":
        return (np.flatnonzero(net < 0) + first).tolist(), 0
    return tokens_to_drop(net, products, first)


def with_products(drop, products: list[tuple[int, list[int]]]) -> set[int]:
    """The tokens `drop` with every token made from one of them (`prune_extension`'s cascade)."""
    gone = set(drop)
    for token, made in reversed(products):  # parts first
        if token in gone:
            gone.update(made)
    return gone


def held_out_gains(halves: list[np.ndarray], products: list[tuple[int, list[int]]], first: int) -> dict[str, float]:
    """Nats each rule saves on held-out lines: the tokens it takes out judged on one half of the lines (the new
    tokens' nets on each half), their net on the other half given back (to first order, what the other half saves
    without them), both ways summed."""
    gains = {}
    for rule in RULES:
        gain = 0.0
        for net, other in ((halves[0], halves[1]), (halves[1], halves[0])):
            gone = with_products(rule_drop(rule, net, products, first)[0], products)
            gain -= float(sum(other[token - first] for token in gone))
        gains[rule] = round(gain, 3)
    return gains


def tokens_to_drop(net: np.ndarray, products: list[tuple[int, list[int]]], first: int) -> tuple[list[int], int]:
    """(the new tokens to take out, how many of those with a net below zero stay): taking a BPE token out takes out
    every token made from it (`prune_extension`), so a token is weighed with what goes with it: its value is its own
    net plus the positive values of its products still kept, and it goes where that is below zero. `products`: each
    new token with the tokens made from it, products first (`new_token_products`). A product that goes lowers the value
    of the tokens it is made from, so the values are weighed again without it until nothing more goes."""
    gone: set[int] = set()
    while True:
        value: dict[int, float] = {}
        for token, made in products:
            value[token] = float(net[token - first]) + sum(max(value[product], 0.0) for product in made
                                                           if product not in gone and product in value)
        drop = {token for token, worth in value.items() if worth < 0}
        closed = with_products(drop, products)
        if closed == gone:
            held = sum(1 for token, _ in products if net[token - first] < 0 and token not in closed)
            return sorted(drop), held
        gone = closed


def _take_rows(model, index: np.ndarray, rows: int, tokens: int) -> int:
    """`model`'s token matrices reduced to the rows `index`, in that order, then padding rows up to `rows` (the mean
    of the old padding rows after the old `tokens`, or of every row where there were none); returns the old row
    count."""
    old = model.get_input_embeddings().weight.shape[0]
    chosen = torch.from_numpy(index)

    def taken(matrix: torch.Tensor) -> torch.Tensor:
        matrix = matrix.detach()
        spare = matrix[tokens:] if old > tokens else matrix
        fill = spare.to(torch.float32).mean(dim=0).to(matrix.dtype)
        return torch.cat([matrix[chosen], fill.expand(rows - len(index), *matrix.shape[1:])])

    head = model.get_output_embeddings()
    bias = output_bias(model)
    install_embeddings(model, taken(model.get_input_embeddings().weight),
                       None if is_tied(model) or head is None else taken(head.weight),
                       None if bias is None else taken(bias))
    return old


def _vocabulary(before: VocabularyReport | None, first: int, kept: int, rows: int) -> VocabularyReport:
    padding = [first + kept, rows - 1] if rows > first + kept else None
    source_rows = before.source_rows if before is not None else None
    return VocabularyReport(mode="extended", kept=first, new=[first, first + kept - 1] if kept else None,
                            padding=padding, rows=rows, source_rows=source_rows)


def _kinds(path: Path, index: np.ndarray) -> dict[str, int]:
    """How many of the rows `index` a provenance table gives each kind (its third column)."""
    wanted = set(index.tolist())
    kinds: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        token_id, _, kind = line.split("\t", 3)[:3]
        if int(token_id) in wanted:
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _renumber_table(path: Path, target: Path, new_id: dict[int, int]) -> None:
    """A provenance table with only the rows of ids in `new_id`, their ids renumbered."""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [lines[0]]
    rows = {}
    for line in lines[1:]:
        token_id, rest = line.split("\t", 1)
        if int(token_id) in new_id:
            rows[new_id[int(token_id)]] = f"{new_id[int(token_id)]}\t{rest}"
    kept.extend(rows[token] for token in sorted(rows))
    target.write_text("\n".join(kept) + "\n", encoding="utf-8")
