"""The source model as a teacher: what the transfer's token distillation and training share, and the teacher during
training (the language-model loss plus the distance between the student's hidden states and the teacher's, at the
chunk boundaries of the same text read by both tokenizers).

**Shared by both teachers.** `langswap.transfer.distill` teaches once, at transfer time, the new input rows
(`DistillConfig`, `distill.*`); training teaches in every update (`TeacherConfig`, `teacher.*`). Both configs derive
from `TeacherMatch`, which checks the options they share (`layers`, `distance`, `when`: one default, one set of
choices; each config declares the three fields with `layers_field`, `distance_field` and `when_field` in its own
place among its options, with a help text saying what its teacher reads), resolves the layers on a model
(`TeacherMatch.match_layers`) and decides whether the teacher teaches (`TeacherMatch.teaches`). Whether the teacher
reads the text better is one comparison (`LikelihoodCheck`): each side's next-token loss summed over the same bytes
(distillation: the held-out lines' chunks; training: the first training blocks). The distance is
`kernels.hidden_state_distance` for both.

**During training** the teacher is a term of the training loss in every update of a phase, so it reaches whatever the
phase trains:

    loss = next-token cross-entropy + teacher.weight * distance(student states, teacher states)
           + teacher.likelihood_weight * chunk_likelihood_match(student, teacher)

- **The teacher** is the source model named in the trained folder's record (`langswap.json`: the transfer's
  `source_model`, read with its `source_tokenizer`), or the folder `teacher.model` names, which must be of the same
  architecture (`model_type`) and width (`hidden_size`) as the student and have the blocks `teacher.layers` name.
  It is loaded once, frozen, in evaluation mode (no dropout), in the run's precision (bf16 or fp16 weights where the
  run uses them, else float32), and moved to the student's device at the first update. It is a copy, never the
  student's own body: in a full phase the body trains, and a teacher sharing it would teach the student itself. In
  an embedding-only phase the copy holds the same body weights, so its memory (one more model) is the whole cost.
- **What each reads.** A block of the store's stream (`store.StoreBlocks`) holds pieces of one or more documents, each
  framed [bos] text [eos] as the stream frames them. For every piece the document's text is read back from its source
  (`TokenStore.document_text`; a .gz or parquet part from the store's text copy, made once, since reading such a part
  back costs a decompression up to the document or a whole row group) and read again by the target tokenizer, which
  must give the ids the store holds (a piece where it does not is not matched and is counted in `teacher_mismatched`).
  The piece's bytes, from the end of the token before the block's first token of the document (or from the document's
  start) to the end of its last, are read by the source tokenizer, framed as the source tokenizer frames documents:
  both sides start at the same byte, so at every chunk boundary (`langswap.chunks`) they have read the same text from
  the same place. A cut inside a UTF-8 character moves the teacher's start to the next character (counted in
  `teacher_inexact_starts`). The teacher's sequence is cut at its position limit; matches beyond are dropped.
- **Distance** (`kernels.hidden_state_distance`, as `langswap.transfer.distill` uses it): at the matched positions of
  `teacher.layers` (default: the last block's output), "mse" divided channel by channel by the teacher's mean
  square, or "cosine". Chunks holding bytes one tokenizer cannot spell are not matched, and are counted
  (`teacher_unencodable_chunks` in the log and in each phase's summary).
- **Loss scaling** follows the language-model loss: where the Trainer normalises it over the whole accumulated batch,
  the distance (a per-micro-batch mean) is divided by the accumulation steps too, so `teacher.weight` means the
  same whatever the accumulation.
- **Cost**: the teacher's forward pass on every micro-batch (its sequence is as long as the source tokenizer reads
  the same text), reading each block's documents back from the source files and tokenising them again (both
  grow with the length of the documents a block cuts through; a .gz source is decompressed up to each document).
  The train log's tokens per second show it.

A teacher that reads the text worse than the student can only hold it back: before any update the first
training blocks are read by both (`teacher_check`), and under `teacher.when: teacher-better` (the default) a teacher
whose summed next-token loss over the same bytes is not lower is not used.

Refused, with the reason: masked LMs (their hidden state at a token reads the whole window, so two readings of the
same bytes need not agree at a boundary), recipes with several streams or a stream in another tokenizer (RAMEN's
bilingual recipe), FSDP and DeepSpeed (the teacher would be a whole unsharded copy on every process), and a teacher
of another architecture or width. Evaluation measures the language-model loss alone, so curves with and without a
teacher compare.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from langswap.chunks import ChunkAligner, adjacent_matches, cut, pair
from langswap.config import layer_indices
from langswap.errors import ConfigError, MissingResourceError
from langswap.kernels import hidden_state_distance
from langswap.models import HiddenStates, load_config, load_model, load_tokenizer, resolve_layers
from langswap.records import has_model_record, read_model_record
from langswap.training.data import document_positions, stream_frame

logger = logging.getLogger(__name__)

# what a batch carries for the teacher
KEYS = ("teacher_ids", "teacher_at", "student_at", "chunk_adjacent", "teacher_position_ids")
COUNTS = ("teacher_mismatched", "teacher_inexact_starts", "teacher_unencodable_chunks")
DISTANCES = ("mse", "cosine")  # what kernels.hidden_state_distance computes
WHEN = ("teacher-better", "always")


def layers_field(help_text: str):
    """A teacher config's `layers`: hidden-state layers matched, by default the last block's output."""
    return field(default=(-1,), metadata={"help": help_text})


def distance_field(help_text: str):
    """A teacher config's `distance` (`kernels.hidden_state_distance`), mse by default."""
    return field(default="mse", metadata={"help": help_text, "choices": DISTANCES})


def when_field(help_text: str):
    """A teacher config's `when`: teacher-better (teach only where `LikelihoodCheck` finds the teacher reading the
    text better) by default, or always."""
    return field(default="teacher-better", metadata={"help": help_text, "choices": WHEN})


@dataclass(frozen=True, kw_only=True)
class TeacherMatch:
    """What the transfer's distillation (`DistillConfig`) and training's teacher (`TeacherConfig`) share: the
    hidden-state `layers` matched, the `distance`, and `when` the teacher teaches.

    A base without fields: each config declares the three with `layers_field`, `distance_field` and `when_field`
    where they stand among its own options (the order of its YAML keys and flags, which inheriting fields would
    change), and with help of its own, since the two teachers read different text for `when`. `OPTION` is the
    config's section (`distill`, `teacher`), naming its options in errors."""

    OPTION: ClassVar[str]

    def __post_init__(self):
        object.__setattr__(self, "layers", layer_indices(self.layers, f"{self.OPTION}.layers"))
        if self.distance not in DISTANCES:
            raise ConfigError(f"{self.OPTION}.distance is {self.distance!r}; choose mse or cosine.")
        if self.when not in WHEN:
            raise ConfigError(f"{self.OPTION}.when is {self.when!r}; choose teacher-better or always.")

    def match_layers(self, student_config, teacher_config=None) -> tuple[int, ...]:
        """`layers` as block numbers 1 .. L of a model of `student_config` (`models.resolve_layers`). The teacher is
        the student's own body (distillation) unless `teacher_config` is given: a teacher model of its own
        (training's source model or `teacher.model`), refused where its architecture, width or blocks at these
        layers are not the student's."""
        if teacher_config is not None:
            for key, what in (("model_type", "architecture"), ("hidden_size", "width")):
                mine, theirs = getattr(student_config, key, None), getattr(teacher_config, key, None)
                if mine != theirs:
                    raise ConfigError(f"the teacher's {what} ({key} {theirs!r}) is not the model's ({mine!r}): "
                                      "hidden states are matched layer by layer, so the teacher must be the model's "
                                      "source or one of the same architecture and width. Name another with "
                                      "teacher.model, or set teacher.weight: 0.")
        option = f"{self.OPTION}.layers"
        resolved = resolve_layers(student_config, self.layers, option)
        if teacher_config is not None and resolve_layers(teacher_config, self.layers, option) != resolved:
            raise ConfigError(f"{option} {list(self.layers)} name other blocks in the teacher "
                              f"({teacher_config.num_hidden_layers} blocks) than in the model "
                              f"({student_config.num_hidden_layers}); give layers both have, counted from the first.")
        return resolved

    def teaches(self, check: dict) -> bool:
        """Whether the teacher teaches after `check` (a `LikelihoodCheck.report`, or `not_measured`'s): always under
        `when: always`; under `teacher-better` unless it was measured reading the text worse than the student (a
        check that could not measure lets it teach)."""
        return self.when == "always" or not check.get("teacher_worse")


class LikelihoodCheck:
    """Does the teacher read the text better than the student? Each side's next-token loss (nats) summed over the
    same bytes, counted in `unit`s (distillation: "chunk", the held-out lines' chunks; training: "block", the first
    training blocks); `report` gives each side's nats per unit and `teacher_worse` where the teacher's sum is not
    lower. Each side's softmax runs over its own tokenizer's tokens: the caller cuts the logits to them."""

    def __init__(self, unit: str):
        self.unit = unit
        self.units = 0  # counted by the caller, as it reads them
        self.nats = {"teacher": 0.0, "student": 0.0}

    def add(self, side: str, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """`side` ("teacher" or "student") predicting `targets` (N,) with `logits` (N, V) float32."""
        self.nats[side] += float(F.cross_entropy(logits, targets, reduction="sum"))

    def report(self, **extra) -> dict:
        """measured, the units read, `extra` (e.g. what was left out), each side's nats per unit, teacher_worse."""
        teacher, student, unit = self.nats["teacher"], self.nats["student"], self.unit
        return {"measured": True, f"{unit}s": self.units, **extra,
                f"teacher_nats_per_{unit}": round(teacher / self.units, 4),
                f"student_nats_per_{unit}": round(student / self.units, 4), "teacher_worse": teacher >= student}


def not_measured(why: str) -> dict:
    """A check's report where it could not be measured: the teacher then teaches (`TeacherMatch.teaches`)."""
    return {"measured": False, "why": why}


@dataclass(frozen=True, kw_only=True)
class TeacherConfig(TeacherMatch):
    """The source model as a teacher during training (`langswap.training.teacher`)."""

    OPTION = "teacher"

    weight: float = field(default=0.0, metadata={
        "help": "Weight of the hidden-state distance to the teacher in the training loss (0: no teacher)."})
    model: str | None = field(default=None, metadata={
        "help": "Teacher model folder (with its tokenizer); default: the source model named in the model folder's "
                "langswap.json. Same architecture and width as the model."})
    layers: tuple[int, ...] = layers_field(
        "Hidden-state layers matched, as distill.layers counts them: 1 is the first block's output, -1 the last "
        "one's; several are averaged.")
    distance: str = distance_field(
        "mse (squared error divided channel by channel by the teacher's mean square) or cosine.")
    likelihood_weight: float = field(default=0.0, metadata={
        "help": "Weight of the chunk-likelihood match (approximate likelihood matching, as tokenkit's ALM): each "
                "chunk's probability under the model pushed towards the teacher's, by binary cross-entropy."})
    when: str = when_field(
        "teacher-better (teach only where the teacher, reading the first training blocks with its own tokenizer "
        "before any update, gives their text a higher likelihood than the model does: a teacher that reads the "
        "language worse can only hold it back) or always.")

    def __post_init__(self):
        super().__post_init__()
        for name in ("weight", "likelihood_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                    or value == float("inf"):
                raise ConfigError(f"teacher.{name} is {value!r}; give a finite number of at least 0 (0: off).")

    @property
    def enabled(self) -> bool:
        return self.weight > 0 or self.likelihood_weight > 0


def teacher_folders(config: TeacherConfig, model: str | Path) -> tuple[str, str]:
    """(teacher model, teacher tokenizer) for a run training `model`: `config.model`, else the source model (and
    source tokenizer) that the folder's record names."""
    if config.model:
        if not Path(config.model).is_dir():
            raise MissingResourceError(f"teacher.model '{config.model}' is not a folder; give a model folder with "
                                       "its tokenizer, of the same architecture and width as the model.")
        return config.model, config.model
    record = read_model_record(model) if has_model_record(model) else None
    source = (record.config or {}).get("source_model") if record is not None else None
    if not source:
        raise ConfigError(f"teacher.weight is set, but '{model}' records no source model (its langswap.json is "
                          "missing or was not written by `langswap transfer`); name the teacher with "
                          "teacher.model=FOLDER.")
    return source, (record.config or {}).get("source_tokenizer") or source


class TeacherBlocks(torch.utils.data.Dataset):
    """A store's blocks (`StoreBlocks`, causal) with the teacher's reading of each: `teacher_ids` (S,) the source
    tokenizer's ids of the same text, `student_at` / `teacher_at` (M,) the matched positions in the block and in
    `teacher_ids`, `chunk_adjacent` (M,) whether each one's previous ends the chunk just before it in the same
    document (`chunks.adjacent_matches`), and the counts of COUNTS."""

    def __init__(self, blocks, target_tokenizer, source_tokenizer, positions: int | None, progress: bool = False):
        self.blocks, self.store, self.positions = blocks, blocks.store, positions
        self.store.prepare_texts(progress)  # .gz and parquet parts read back from a plain copy
        self.target_before, self.target_after, _frame, _body = stream_frame(target_tokenizer, "causal", 4)
        self.source_before, self.source_after, _frame, _body = stream_frame(source_tokenizer, "causal", 4)
        self.aligner = ChunkAligner(source_tokenizer, target_tokenizer)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict:
        item = self.blocks[index]
        start = index * self.blocks.body
        end = start + self.blocks.body
        starts = self.store.documents[:, 0]
        document = int(np.searchsorted(starts, start, side="right")) - 1
        teacher: list[np.ndarray] = []
        student_at: list[np.ndarray] = []
        teacher_at: list[np.ndarray] = []
        adjacent: list[np.ndarray] = []
        counts = dict.fromkeys(COUNTS, 0)
        length = 0
        while document < self.store.num_documents and int(starts[document]) < end:
            piece = self._piece(document, start, end, length, counts)
            for ids, matched_student, matched_teacher, follows in piece:
                teacher.append(ids)
                student_at.append(matched_student)
                teacher_at.append(matched_teacher)
                adjacent.append(follows)
                length += len(ids)
            document += 1
        ids = np.concatenate(teacher) if teacher else np.zeros(0, dtype=np.int64)
        student = np.concatenate(student_at) if student_at else np.zeros(0, dtype=np.int64)
        matched = np.concatenate(teacher_at) if teacher_at else np.zeros(0, dtype=np.int64)
        follows = np.concatenate(adjacent) if adjacent else np.zeros(0, dtype=bool)
        if self.positions is not None and len(ids) > self.positions:
            keep = matched < self.positions
            ids, student, matched, follows = ids[:self.positions], student[keep], matched[keep], follows[keep]
        return {**item, "teacher_ids": ids.astype(np.int64), "student_at": student.astype(np.int64),
                "teacher_at": matched.astype(np.int64), "chunk_adjacent": follows.astype(bool), **counts}

    def _piece(self, document: int, start: int, end: int, offset: int, counts: dict):
        """[(teacher ids, student positions, teacher positions, adjacency)] of document `document`'s part of the
        block [start, end) of the stream; `offset`: the teacher's tokens before it in the block."""
        first = int(self.store.documents[document, 0])
        last = (int(self.store.documents[document + 1, 0]) if document + 1 < self.store.num_documents
                else self.store.num_tokens)
        text_first, text_last = first + len(self.target_before), last - len(self.target_after)
        out = []
        if self.target_before and start <= first < end:
            out.append((np.asarray(self.source_before, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                        np.zeros(0, bool)))
        a, b = max(start, text_first) - text_first, min(end, text_last) - text_first
        if a < b:
            out.append(self._text(document, text_first, text_last, a, b, start, offset + sum(len(p[0]) for p in out), counts))
        if self.target_after and start <= last - 1 < end:
            out.append((np.asarray(self.source_after, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                        np.zeros(0, bool)))
        return out

    def _text(self, document: int, text_first: int, text_last: int, a: int, b: int, start: int, offset: int,
              counts: dict):
        """The teacher's reading of the document's text tokens a .. b - 1, the matched positions and their
        adjacency."""
        empty = np.zeros(0, dtype=np.int64)
        text = self.store.document_text(document)
        reading = self.aligner.read_target([text])[0]
        stored = np.asarray(self.store.tokens[text_first:text_last], dtype=np.int64)
        if not np.array_equal(reading.ids, stored):
            counts["teacher_mismatched"] += 1
            return empty, empty, empty, np.zeros(0, dtype=bool)
        data = text.encode("utf-8")
        byte_start = int(reading.ends[a - 1]) if a else 0
        byte_end = int(reading.ends[b - 1])
        while byte_start < byte_end and (data[byte_start] & 0xC0) == 0x80:  # inside a character
            byte_start += 1
            counts["teacher_inexact_starts"] += 1
        while byte_end < len(data) and (data[byte_end] & 0xC0) == 0x80:
            byte_end += 1
        piece = data[byte_start:byte_end].decode("utf-8")
        source = self.aligner.read_source([piece])[0]
        aligned = pair(piece, source, cut(reading, a, b, byte_start, byte_end))
        keep = ~aligned.unencodable
        counts["teacher_unencodable_chunks"] += int(aligned.unencodable.sum())
        student = aligned.target_at[keep] + a + text_first - start
        teacher = aligned.source_at[keep] + offset
        return (source.ids.astype(np.int64), student.astype(np.int64), teacher.astype(np.int64),
                adjacent_matches(aligned.unencodable))


class TeacherCollator:
    """The run's collator, with the teacher's readings of the blocks right-padded into `teacher_ids` (B, S) and the
    matched positions flattened: `student_at` into B x L, `teacher_at` into B x S."""

    def __init__(self, collator, pad_id: int = 0, end_id: int | None = None):
        self.collator, self.pad_id = collator, pad_id
        self.objective = getattr(collator, "objective", None)
        # with the run's document mask, the teacher's documents are kept apart too: its positions restart after each
        # of its end-of-text tokens
        self.end_id = end_id if getattr(collator, "document_mask", False) else None

    def __call__(self, items: list[dict]) -> dict:
        views = [{key: item.pop(key) for key in KEYS + COUNTS if key in item} for item in items]
        batch = self.collator(items)
        if not views or "teacher_ids" not in views[0]:
            return batch
        width = max(1, max(len(view["teacher_ids"]) for view in views))
        length = batch["input_ids"].shape[1]
        ids = np.full((len(views), width), self.pad_id, dtype=np.int64)
        for row, view in enumerate(views):
            ids[row, :len(view["teacher_ids"])] = view["teacher_ids"]
        batch["teacher_ids"] = torch.from_numpy(ids)
        if self.end_id is not None:
            batch["teacher_position_ids"] = document_positions(batch["teacher_ids"], self.end_id)["position_ids"]
        batch["student_at"] = torch.from_numpy(np.concatenate(
            [view["student_at"] + row * length for row, view in enumerate(views)]).astype(np.int64))
        batch["teacher_at"] = torch.from_numpy(np.concatenate(
            [view["teacher_at"] + row * width for row, view in enumerate(views)]).astype(np.int64))
        batch["chunk_adjacent"] = torch.from_numpy(np.concatenate(
            [np.asarray(view["chunk_adjacent"], dtype=bool) for view in views]))
        for key in COUNTS:
            batch[key] = sum(int(view.get(key, 0)) for view in views)
        return batch

    def __getattr__(self, name):  # mask() and the rest of the run's collator
        if name == "collator":  # not set yet (unpickling in a data-loader worker)
            raise AttributeError(name)
        return getattr(self.collator, name)


class Teacher:
    """The frozen teacher model and what the loss needs of it; it counts, per log interval and over the phase, the
    mean distance, the matched positions per micro-batch and the pieces of text not matched (COUNTS)."""

    def __init__(self, model, config: TeacherConfig, layers: tuple[int, ...]):
        self.model, self.config, self.layers = model, config, layers
        self.check: dict | None = None  # `teacher_check`'s report, where it ran
        self.sizes: tuple[int, int] | None = None  # (teacher's, model's) tokenizer sizes: each softmax's tokens
        self.model.requires_grad_(False)
        self.model.eval()
        self._states = HiddenStates(model.base_model, layers, model.config.num_hidden_layers)
        self._interval = self._empty()
        self._phase = self._empty()

    @staticmethod
    def _empty() -> dict:
        return {"distance": 0.0, "likelihood": 0.0, "micro_batches": 0, "matched": 0, **dict.fromkeys(COUNTS, 0)}

    def loss(self, student, batch: dict) -> torch.Tensor:
        """The teacher's term of one micro-batch's loss (float32 scalar): `weight` times the hidden-state distance
        plus `likelihood_weight` times the chunk-likelihood match, the teacher reading `batch`'s text. `student`:
        the model's output with its hidden states (and logits, for the likelihood term)."""
        device = student.hidden_states[-1].device
        if next(self.model.parameters()).device != device:
            self.model.to(device)
        with torch.no_grad():
            positions = batch.get("teacher_position_ids")
            extra = {} if positions is None else {"position_ids": positions.to(device)}
            if self.config.likelihood_weight:
                teacher = self.model(input_ids=batch["teacher_ids"].to(device), output_hidden_states=True,
                                     use_cache=False, **extra)
                teacher_states = teacher.hidden_states
            else:
                # without the likelihood term only hidden states are read: the body alone, and only up to the
                # deepest matched block, spares the teacher's head (logits over the source vocabulary cost as much
                # as several layers of a small model) and the blocks above that one
                teacher_states = self._states(input_ids=batch["teacher_ids"].to(device), **extra)
        student_at, teacher_at = batch["student_at"].to(device), batch["teacher_at"].to(device)
        distance = hidden_state_distance(student.hidden_states, teacher_states, student_at, teacher_at,
                                         self.layers, self.config.distance)
        term = self.config.weight * distance
        likelihood = None
        if self.config.likelihood_weight:
            if getattr(student, "logits", None) is None:
                raise ConfigError("teacher.likelihood_weight needs the model's logits, which this run does not "
                                  "compute (liger_kernel's fused loss); turn liger_kernel off or set "
                                  "teacher.likelihood_weight: 0.")
            adjacent = batch.get("chunk_adjacent")
            likelihood = chunk_likelihood_match(student.logits, batch["input_ids"].to(device), teacher.logits,
                                                batch["teacher_ids"].to(device), student_at, teacher_at, self.sizes,
                                                None if adjacent is None else adjacent.to(device))
            term = term + self.config.likelihood_weight * likelihood
        for totals in (self._interval, self._phase):
            totals["distance"] += float(distance.detach())
            totals["likelihood"] += 0.0 if likelihood is None else float(likelihood.detach())
            totals["micro_batches"] += 1
            totals["matched"] += len(batch["student_at"])
            for key in COUNTS:
                totals[key] += int(batch.get(key, 0))
        return term

    def _report(self, totals: dict) -> dict:
        count = totals["micro_batches"]
        if not count:
            return {}
        return {"teacher_distance": round(totals["distance"] / count, 5),
                **({"teacher_likelihood": round(totals["likelihood"] / count, 5)}
                   if self.config.likelihood_weight else {}),
                "teacher_matched": round(totals["matched"] / count, 1),
                **{key: totals[key] for key in COUNTS if totals[key]}}

    def interval(self) -> dict:
        """Mean distance and matched positions per micro-batch, and the COUNTS, since the last call."""
        out, self._interval = self._report(self._interval), self._empty()
        return out

    def phase_summary(self) -> dict:
        """The same over the phase so far (this process), with the teacher's settings; then starts again."""
        out = {**self._report(self._phase), "weight": self.config.weight, "layers": list(self.layers),
               "distance": self.config.distance, "likelihood_weight": self.config.likelihood_weight,
               "check": self.check}
        self._phase = self._empty()
        return out


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, stable at both ends."""
    return torch.where(x > -0.6931, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def chunk_log_likelihoods(student_logits, student_ids, teacher_logits, teacher_ids, student_at, teacher_at,
                          sizes: tuple[int, int] | None,
                          adjacent: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(student's, teacher's) log-probability of each chunk, float32: the text between two consecutive matched
    positions of a row is the same bytes on both sides, and its log-probability the sum of the log-probs of the
    tokens after the first position up to the second (the teacher's side carries no gradient). Logits (B, T, V) and
    (B, S, V'), ids (B, T) and (B, S), positions flat into B*T and B*S; each softmax runs over its own tokenizer's
    `sizes` (teacher, model). `adjacent` (bool, one per matched position; `chunks.adjacent_matches`): only the
    spans ending at a position whose previous one ends the chunk just before count, so a span holding a chunk one
    side could not spell (an unknown token is cheap to predict) or the seam between two documents is left out.
    Empty where no row holds two such positions."""

    def chunk_sums(logits, ids, at, size):
        logits = logits[..., :size] if size else logits
        rows, length = ids.shape
        token = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        running = torch.cat([token.new_zeros(rows, 1), token.cumsum(1)], dim=1).reshape(-1)  # sum before each pos
        return running[at], at // length

    teacher_size, student_size = sizes or (None, None)
    student_sum, student_row = chunk_sums(student_logits, student_ids, student_at, student_size)
    with torch.no_grad():
        teacher_sum, teacher_row = chunk_sums(teacher_logits, teacher_ids, teacher_at, teacher_size)
    same_row = (student_row[1:] == student_row[:-1]) & (teacher_row[1:] == teacher_row[:-1])
    if adjacent is not None:
        assert adjacent.shape == student_at.shape, (adjacent.shape, student_at.shape)
        same_row = same_row & adjacent[1:].to(same_row.device)
    # chunk k: the tokens after matched position k-1 up to position k, predicted from positions k-1 .. k-1 + n
    return (student_sum[1:] - student_sum[:-1])[same_row], (teacher_sum[1:] - teacher_sum[:-1])[same_row]


def chunk_likelihood_match(student_logits, student_ids, teacher_logits, teacher_ids, student_at, teacher_at,
                           sizes: tuple[int, int] | None, adjacent: torch.Tensor | None = None) -> torch.Tensor:
    """Approximate likelihood matching (tokenkit's ALM, its binary cross-entropy form): each chunk's probability
    under the student, p_s, is pushed towards the teacher's, p_t, by -[p_t log p_s + (1 - p_t) log(1 - p_s)],
    averaged over the chunks (`chunk_log_likelihoods` says what a chunk is and what the arguments are)."""
    log_student, log_teacher = chunk_log_likelihoods(student_logits, student_ids, teacher_logits, teacher_ids,
                                                     student_at, teacher_at, sizes, adjacent)
    if not len(log_student):
        return student_logits.new_zeros((), dtype=torch.float32)
    log_student, log_teacher = log_student.clamp(max=-1e-6), log_teacher.clamp(max=-1e-6)
    p_teacher = log_teacher.exp()
    return -(p_teacher * log_student + (1 - p_teacher) * _log1mexp(log_student)).mean()


CHECK_BLOCKS = 16  # training blocks both models read before any update to decide whether the teacher teaches


def teacher_check(teacher_model, student_model, view: TeacherBlocks, sizes: tuple[int, int],
                  blocks: int = CHECK_BLOCKS, batch_size: int = 4) -> dict:
    """Whose likelihood of the text of the first `blocks` training blocks is higher, the teacher's (reading
    `teacher_ids`) or the student's (reading the block), before any update (neither has trained on them)? In each
    block both sums of next-token losses run from its first matched position to its last, so they cover the same
    bytes; each softmax runs over its own tokenizer's tokens (`sizes`: teacher's, student's). Gives nats per block
    for each side and `teacher_worse` where the teacher's sum is not lower (`LikelihoodCheck`)."""
    items = [view[index] for index in range(min(blocks, len(view)))]
    items = [item for item in items if len(item["student_at"]) >= 2]
    if not items:
        return not_measured("no training block has two matched positions")
    check = LikelihoodCheck("block")
    check.units = len(items)
    device = next(student_model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            part = items[start:start + batch_size]
            for side, model, ids_key, at_key, size in (
                    ("student", student_model, "input_ids", "student_at", sizes[1]),
                    ("teacher", teacher_model, "teacher_ids", "teacher_at", sizes[0])):
                rows = [torch.as_tensor(item[ids_key], dtype=torch.long) for item in part]
                width = max(len(row) for row in rows)
                ids = torch.zeros(len(rows), width, dtype=torch.long)
                for index, row in enumerate(rows):
                    ids[index, :len(row)] = row
                logits = model(input_ids=ids.to(device), use_cache=False).logits[..., :size].float()
                for index, item in enumerate(part):
                    first, last = int(item[at_key][0]), int(item[at_key][-1])
                    check.add(side, logits[index, first:last], ids[index, first + 1:last + 1].to(device))
    return check.report()


def load_teacher(config: TeacherConfig, model_folder: str | Path, student_config, dtype) -> tuple[Teacher, object]:
    """(the Teacher, its tokenizer) for a run training `model_folder` (a model of `student_config`), its weights in
    `dtype`."""
    folder, tokenizer_folder = teacher_folders(config, model_folder)
    layers = config.match_layers(student_config, load_config(folder))
    tokenizer = load_tokenizer(tokenizer_folder, f"teacher tokenizer '{tokenizer_folder}'")
    model = load_model(folder).to(dtype or torch.float32)
    logger.info("teacher: %s (tokenizer %s), weight %g, layers %s, %s", folder, tokenizer_folder, config.weight,
                list(layers), config.distance)
    return Teacher(model, config, layers), tokenizer
