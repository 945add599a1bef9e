"""Translation probabilities between two tokenizers' tokens, from word-aligned parallel text (RAMEN).

RAMEN (Tran, 2020) starts each target token's embedding from the source tokens it translates to. With parallel text
the probabilities come from a word aligner run on both sides at the subword level:

1. **Reading** (`read_parallel`): one `source<TAB>target` file or two line-aligned files. Files of different line
   counts are refused with both counts. A pair with an empty side (an empty line, or one that tokenises to nothing)
   carries no link and is skipped, as is a pair with a side longer than `max_tokens` tokens (the aligner's cost
   grows with the square of the length); the report counts both.
2. **Aligning** (`align_token_ids`): each side tokenised by its own tokenizer (no special tokens) and written as
   token ids, so the aligner's lower-casing and whitespace splitting see one word per token. eflomal (Östling and
   Tiedemann, 2016; the `eflomal` package, a Gibbs sampler over IBM-1, HMM and fertility models) aligns the pairs
   in both directions, and the two link sets are symmetrised: grow-diag-final-and (Koehn et al., 2005) by default,
   or their intersection. eflomal seeds its sampler itself, so two runs may differ in a few links.
3. **Probabilities** (`translation_table`): p(source token | target token) = links(s, t) / links(t) over the
   symmetrised links, after dropping pairs seen fewer than `min_count` times (links(t) counts what is kept, so
   every row sums to 1). The table is compressed by target row (CSR), never a V_t x V_s matrix.
4. **Saving and loading** (`TranslationTable.save`, `load`): a folder with `translations.npz` (indptr, indices,
   probabilities) and `report.json` (the tokenizers' digests and sizes, the options and the report). A table is
   refused when its tokenizers are not the ones given (`TranslationTable.check_tokenizers`), when its arrays do not
   fit each other, or when a row does not sum to 1.
5. **The cache** (`cached_translation_table`): a table built from text is kept under a digest of both texts'
   bytes, both tokenizers and the options, in `cache_dir()/translation-tables/`.

The report: pairs read, used and skipped; links; the target tokens with probabilities (`covered_tokens`, and
`coverage`, their share of the target vocabulary; `covered_occurrences`, the share of target-side token occurrences
whose token has probabilities) and the mean entropy of a covered row in nats.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError
from langswap.files import atomic_directory, cache_dir, hash_file
from langswap.reports import TableReport
from langswap.resources.token_vectors import tokenizer_digest

logger = logging.getLogger(__name__)

TABLE_FORMAT = 1
TABLE_FILE = "translations.npz"
REPORT_FILE = "report.json"
SYMMETRIZATIONS = ("grow-diag-final-and", "intersection")
BATCH_LINES = 1000


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """How parallel text becomes translation probabilities."""

    symmetrize: str = field(default="grow-diag-final-and", metadata={
        "help": "How the two directions' links are combined: grow-diag-final-and (the intersection grown towards "
                "the union; Koehn et al., 2005) or intersection (only links both directions found)."})
    min_count: int = field(default=2, metadata={
        "help": "Links a (source token, target token) pair needs to keep its probability; rarer pairs are "
                "dropped as noise."})
    max_tokens: int = field(default=200, metadata={
        "help": "Pairs with a side longer than this many tokens are skipped."})
    max_lines: int = field(default=0, metadata={"help": "Pairs read at most (0: all)."})

    def __post_init__(self):
        if self.symmetrize not in SYMMETRIZATIONS:
            raise ConfigError(f"symmetrize is {self.symmetrize!r}; give one of {', '.join(SYMMETRIZATIONS)}.")
        if self.min_count < 1:
            raise ConfigError(f"min_count is {self.min_count}; give 1 or more links.")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens is {self.max_tokens}; give 1 or more tokens.")
        if self.max_lines < 0:
            raise ConfigError(f"max_lines is {self.max_lines}; give 0 (all) or more.")


def read_parallel(source: str | Path, target: str | Path | None = None,
                  max_lines: int = 0) -> tuple[list[str], list[str]]:
    """The two sides of parallel text, line by line: `source` alone is a `source<TAB>target` file; with `target`,
    two files with one line per pair. Refused: a missing file, files of different line counts, a TSV line without
    exactly one TAB (the line is named)."""
    source = Path(source)
    for path in (source, target):
        if path is not None and not Path(path).is_file():
            raise MissingResourceError(f"parallel text '{path}' does not exist.")
    if target is None:
        left, right = [], []
        with open(source, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if max_lines and len(left) >= max_lines:
                    break
                parts = line.rstrip("\n").rstrip("\r").split("\t")
                if len(parts) != 2:
                    raise ResourceFormatError(
                        f"'{source}' line {number} has {len(parts) - 1} TABs; a parallel TSV line is "
                        "source<TAB>target, with exactly one TAB. Fix the line, or give the two sides as two files "
                        "(--source-text and --target-text).")
                left.append(parts[0])
                right.append(parts[1])
        return left, right
    sides = []
    for path in (source, Path(target)):
        with open(path, encoding="utf-8", errors="replace") as handle:
            sides.append([line.rstrip("\n").rstrip("\r") for line in handle])
    if len(sides[0]) != len(sides[1]):
        raise ResourceFormatError(
            f"parallel files have different line counts: '{source}' {len(sides[0]):,} lines, '{target}' "
            f"{len(sides[1]):,}. Line i of one must translate line i of the other; re-export both from the same "
            "aligned corpus.")
    if max_lines:
        sides = [side[:max_lines] for side in sides]
    return sides[0], sides[1]


def tokenize_lines(tokenizer, lines: list[str]) -> list[list[int]]:
    """Each line's token ids, without special tokens."""
    out: list[list[int]] = []
    for start in range(0, len(lines), BATCH_LINES):
        batch = [line.strip() for line in lines[start:start + BATCH_LINES]]
        ids = tokenizer(batch, add_special_tokens=False)["input_ids"] if any(batch) else [[] for _ in batch]
        out.extend([list(row) for row in ids])
    return out


def _import_eflomal():
    try:
        import eflomal
    except ImportError as error:
        raise MissingResourceError("aligning parallel text needs the word aligner eflomal: pip install eflomal (it "
                              "compiles a small C program; about a minute).") from error
    return eflomal


def align_token_ids(source_ids: list[list[int]], target_ids: list[list[int]]) -> tuple[list[str], list[str]]:
    """eflomal's forward and reverse links (`i-j` source-target positions, a line per pair) for non-empty pairs."""
    eflomal = _import_eflomal()
    with tempfile.TemporaryDirectory(prefix="langswap-eflomal-") as folder:
        forward, reverse = Path(folder) / "forward", Path(folder) / "reverse"
        eflomal.Aligner().align([" ".join(map(str, ids)) for ids in source_ids],
                                [" ".join(map(str, ids)) for ids in target_ids],
                                links_filename_fwd=str(forward), links_filename_rev=str(reverse), quiet=True)
        links = [path.read_text(encoding="utf-8").split("\n")[:len(source_ids)] for path in (forward, reverse)]
    for name, lines in zip(("forward", "reverse"), links):
        if len(lines) != len(source_ids):
            raise RuntimeError(f"eflomal wrote {len(lines)} {name} link lines for {len(source_ids)} pairs")
    return links[0], links[1]


def _parse_links(line: str) -> set[tuple[int, int]]:
    out = set()
    for item in line.split():
        i, _, j = item.partition("-")
        out.add((int(i), int(j)))
    return out


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(forward: set[tuple[int, int]], reverse: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Koehn et al.'s symmetrisation: the intersection, grown by neighbouring (diagonals included) union links that
    align a so far unaligned word, then each direction's links between two unaligned words."""
    union = forward | reverse
    alignment = forward & reverse
    aligned_source = {i for i, _ in alignment}
    aligned_target = {j for _, j in alignment}
    added = True
    while added:
        added = False
        for i, j in sorted(alignment):
            for di, dj in _NEIGHBOURS:
                point = (i + di, j + dj)
                if point in union and point not in alignment and (
                        point[0] not in aligned_source or point[1] not in aligned_target):
                    alignment.add(point)
                    aligned_source.add(point[0])
                    aligned_target.add(point[1])
                    added = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in aligned_source and j not in aligned_target:
                alignment.add((i, j))
                aligned_source.add(i)
                aligned_target.add(j)
    return alignment


def symmetrize(forward: set[tuple[int, int]], reverse: set[tuple[int, int]], how: str) -> set[tuple[int, int]]:
    if how == "intersection":
        return forward & reverse
    return grow_diag_final_and(forward, reverse)


@dataclass
class TranslationTable:
    """p(source token | target token), compressed by target row: row t's source ids are
    indices[indptr[t]:indptr[t + 1]] with probabilities probs[...] (summing to 1; an empty row has none)."""

    indptr: np.ndarray  # (V_t + 1,) int64
    indices: np.ndarray  # (nnz,) int64
    probs: np.ndarray  # (nnz,) float32
    source_size: int
    source_digest: str
    target_digest: str
    report: TableReport = field(default_factory=TableReport)

    def __post_init__(self):
        self.report = TableReport.from_dict(self.report, "the translation table's report")

    @property
    def target_size(self) -> int:
        return len(self.indptr) - 1

    def row(self, target_id: int) -> tuple[np.ndarray, np.ndarray]:
        start, stop = int(self.indptr[target_id]), int(self.indptr[target_id + 1])
        return self.indices[start:stop], self.probs[start:stop]

    def covered(self) -> np.ndarray:
        """Target ids with probabilities."""
        return np.flatnonzero(np.diff(self.indptr) > 0)

    def check_tokenizers(self, source_tokenizer, target_tokenizer, where: str = "translation table") -> None:
        """Refuse the table unless it was built with these two tokenizers."""
        for side, tokenizer, digest, size in (("source", source_tokenizer, self.source_digest, self.source_size),
                                              ("target", target_tokenizer, self.target_digest, self.target_size)):
            if tokenizer_digest(tokenizer) != digest or len(tokenizer) != size:
                raise MissingResourceError(
                    f"{where} was built with another {side} tokenizer ({size:,} tokens, digest {digest}; the "
                    f"{side} tokenizer given has {len(tokenizer):,}, digest {tokenizer_digest(tokenizer)}): its "
                    f"ids name other tokens. Build it again with these tokenizers (`langswap align-parallel`), or "
                    "give the parallel text instead of the table.")

    def save(self, folder: str | Path, overwrite: bool = False) -> None:
        """Write `translations.npz` and `report.json` into `folder` (built beside it, then renamed)."""
        with atomic_directory(Path(folder), overwrite) as temporary:
            with open(temporary / TABLE_FILE, "wb") as handle:
                np.savez(handle, indptr=self.indptr, indices=self.indices, probs=self.probs)
            record = {"format": TABLE_FORMAT, "source_size": self.source_size, "target_size": self.target_size,
                      "source_digest": self.source_digest, "target_digest": self.target_digest,
                      **self.report.as_dict()}
            (temporary / REPORT_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")

    @classmethod
    def load_for(cls, folder: str | Path, source_tokenizer, target_tokenizer, where: str) -> "TranslationTable":
        """`load` the table in `folder` and refuse it unless it was built with these two tokenizers; `where` names
        it in the error (the option or key that gave it)."""
        table = cls.load(folder)
        table.check_tokenizers(source_tokenizer, target_tokenizer, where)
        return table

    @classmethod
    def load(cls, folder: str | Path) -> "TranslationTable":
        """A table `save` wrote; refused with what is wrong and how to fix it when incomplete or inconsistent."""
        folder = Path(folder)
        fix = "Build it again with `langswap align-parallel`."
        if folder.is_file() and folder.name in (TABLE_FILE, REPORT_FILE):
            folder = folder.parent
        table_path, report_path = folder / TABLE_FILE, folder / REPORT_FILE
        for path in (table_path, report_path):
            if not path.is_file():
                raise MissingResourceError(f"translation table '{folder}' has no {path.name}. {fix}")
        try:
            record = json.loads(report_path.read_text(encoding="utf-8"))
            meta = {key: record[key] for key in ("format", "source_size", "target_size", "source_digest",
                                                 "target_digest")}
        except (ValueError, KeyError, TypeError) as error:
            raise ResourceFormatError(f"'{report_path}' is not a translation table's report ({error}). {fix}") \
                from None
        if meta["format"] != TABLE_FORMAT:
            raise ResourceFormatError(f"'{report_path}' has format {meta['format']}; this langswap reads format "
                                      f"{TABLE_FORMAT}. {fix}")
        try:
            with np.load(table_path, allow_pickle=False) as arrays:
                indptr, indices, probs = (arrays[name] for name in ("indptr", "indices", "probs"))
        except (ValueError, KeyError, OSError, EOFError) as error:
            raise ResourceFormatError(f"'{table_path}' is not a complete translation table ({error}). {fix}") \
                from None
        problem = None
        if indptr.shape != (meta["target_size"] + 1,) or indptr[0] != 0 or (np.diff(indptr) < 0).any():
            problem = f"its row pointers do not describe {meta['target_size']:,} target rows"
        elif indices.shape != probs.shape or indptr[-1] != len(indices):
            problem = "its ids and probabilities do not match its row pointers"
        elif len(indices) and (indices.min() < 0 or indices.max() >= meta["source_size"]):
            problem = f"it names source ids outside 0..{meta['source_size'] - 1}"
        elif not np.isfinite(probs).all() or (probs <= 0).any():
            problem = "it holds probabilities that are not positive finite numbers"
        else:
            sums = np.add.reduceat(probs.astype(np.float64), indptr[:-1][np.diff(indptr) > 0]) if len(probs) \
                else np.zeros(0)
            if len(sums) and np.abs(sums - 1).max() > 1e-3:
                problem = f"a row's probabilities sum to {float(sums[np.argmax(np.abs(sums - 1))]):.4f}, not 1"
        if problem:
            raise ResourceFormatError(f"translation table '{folder}' is inconsistent: {problem}. {fix}")
        report = {key: value for key, value in record.items() if key not in meta}
        return cls(indptr.astype(np.int64), indices.astype(np.int64), probs.astype(np.float32), meta["source_size"],
                   meta["source_digest"], meta["target_digest"], report)


def _entropy(indptr: np.ndarray, probs: np.ndarray) -> float | None:
    lengths = np.diff(indptr)
    if not (lengths > 0).any():
        return None
    terms = -probs.astype(np.float64) * np.log(probs.astype(np.float64))
    per_row = np.add.reduceat(terms, indptr[:-1][lengths > 0])
    return float(per_row.mean())


def translation_table(source_lines: list[str], target_lines: list[str], source_tokenizer, target_tokenizer,
                      config: ParallelConfig | None = None, progress: bool = False) -> TranslationTable:
    """Align the pairs at the subword level and turn the symmetrised links into p(source token | target token)."""
    config = config or ParallelConfig()
    clock = time.perf_counter()
    if len(source_lines) != len(target_lines):
        raise ResourceFormatError(f"parallel text has {len(source_lines):,} source and {len(target_lines):,} "
                                  "target lines; give one target line per source line.")
    source_ids = tokenize_lines(source_tokenizer, source_lines)
    target_ids = tokenize_lines(target_tokenizer, target_lines)
    empty = long = 0
    kept = []
    for index, (left, right) in enumerate(zip(source_ids, target_ids)):
        if not left or not right:
            empty += 1
        elif len(left) > config.max_tokens or len(right) > config.max_tokens:
            long += 1
        else:
            kept.append(index)
    if empty:
        logger.warning("%s of %s parallel pairs have an empty side; skipped", f"{empty:,}", f"{len(source_ids):,}")
    if not kept:
        raise ResourceFormatError(
            f"none of the {len(source_ids):,} parallel pairs has text on both sides within {config.max_tokens} "
            "tokens: check that the file is source<TAB>target (or two line-aligned files) and not empty.")
    source_ids = [source_ids[i] for i in kept]
    target_ids = [target_ids[i] for i in kept]
    logger.info("aligning %s parallel pairs with eflomal", f"{len(kept):,}")
    forward, reverse = align_token_ids(source_ids, target_ids)
    counts: dict[tuple[int, int], int] = {}
    links = 0
    for left, right, forward_line, reverse_line in zip(source_ids, target_ids, forward, reverse):
        for i, j in symmetrize(_parse_links(forward_line), _parse_links(reverse_line), config.symmetrize):
            if i < len(left) and j < len(right):
                key = (right[j], left[i])
                counts[key] = counts.get(key, 0) + 1
                links += 1
    pairs = np.array([(t, s, c) for (t, s), c in counts.items() if c >= config.min_count], dtype=np.int64)
    if len(pairs) == 0:
        pairs = np.zeros((0, 3), dtype=np.int64)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs = pairs[order]
    target_size = len(target_tokenizer)
    indptr = np.zeros(target_size + 1, dtype=np.int64)
    np.add.at(indptr, pairs[:, 0] + 1, 1)
    indptr = np.cumsum(indptr)
    totals = np.zeros(target_size, dtype=np.float64)
    np.add.at(totals, pairs[:, 0], pairs[:, 2])
    probs = (pairs[:, 2] / totals[pairs[:, 0]]).astype(np.float32) if len(pairs) else np.zeros(0, np.float32)
    covered = np.diff(indptr) > 0
    occurrences = np.bincount(np.concatenate([np.asarray(ids, dtype=np.int64) for ids in target_ids]),
                              minlength=target_size)[:target_size]
    report = {
        "pairs_read": len(source_lines), "pairs_used": len(kept), "skipped_empty": empty, "skipped_long": long,
        "links": links, "entries": int(len(pairs)), "covered_tokens": int(covered.sum()),
        "coverage": round(float(covered.mean()), 4),
        "covered_occurrences": round(float(occurrences[covered].sum() / max(occurrences.sum(), 1)), 4),
        "mean_entropy": None if not covered.any() else round(_entropy(indptr, probs), 4),
        "options": dataclasses.asdict(config), "aligner": "eflomal", "seconds": round(time.perf_counter() - clock, 1)}
    logger.info("translation table: %s of %s target tokens have probabilities (%.1f%% of the target side's tokens)",
                f"{report['covered_tokens']:,}", f"{target_size:,}", 100 * report["covered_occurrences"])
    return TranslationTable(indptr, pairs[:, 1].copy(), probs, len(source_tokenizer),
                            tokenizer_digest(source_tokenizer), tokenizer_digest(target_tokenizer), report)


def table_from_files(source: str | Path, target: str | Path | None, source_tokenizer, target_tokenizer,
                     config: ParallelConfig) -> TranslationTable:
    """Read the parallel text (`source` a TSV, or `source` and `target` two line-aligned files) and build its table;
    the report names the files."""
    left, right = read_parallel(source, target, config.max_lines)
    table = translation_table(left, right, source_tokenizer, target_tokenizer, config)
    table.report.text = [str(path) for path in (source, target) if path is not None]
    return table


def _files_digest(paths, source_tokenizer, target_tokenizer, config: ParallelConfig) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path is not None:
            hash_file(digest, path).update(b"\0")
    digest.update(json.dumps({"format": TABLE_FORMAT, "source": tokenizer_digest(source_tokenizer),
                              "target": tokenizer_digest(target_tokenizer), "options": dataclasses.asdict(config),
                              "two_files": paths[1] is not None}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def cached_translation_table(source: str | Path, target: str | Path | None, source_tokenizer, target_tokenizer,
                             config: ParallelConfig | None = None, cache: str | Path | None = None) -> TranslationTable:
    """The table of the parallel text `source` (a TSV) or `source` and `target` (two files) under these tokenizers,
    from the cache (`cache_dir()/translation-tables`, or `cache`) when built before from the same inputs, else built
    and kept there."""
    config = config or ParallelConfig()
    paths = [source, target]
    for path in paths:
        if path is not None and not Path(path).is_file():
            raise MissingResourceError(f"parallel text '{path}' does not exist.")
    folder = (Path(cache) if cache is not None else cache_dir() / "translation-tables") / _files_digest(
        paths, source_tokenizer, target_tokenizer, config)
    if (folder / TABLE_FILE).is_file() and (folder / REPORT_FILE).is_file():
        logger.info("translation table of %s from the cache: %s", source, folder)
        return TranslationTable.load(folder)
    table = table_from_files(source, target, source_tokenizer, target_tokenizer, config)
    folder.parent.mkdir(parents=True, exist_ok=True)
    table.save(folder, overwrite=True)
    return table


