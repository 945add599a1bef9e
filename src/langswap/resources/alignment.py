"""Aligning two word-vector spaces: orthogonal Procrustes on dictionary pairs, judged by translation retrieval.

The source space is rotated onto the target space (as in WECHSEL); since the map is orthogonal, cosine similarities
between source and target vectors do not depend on which side moves. Vectors of different dimension are first
brought to the smaller dimension by PCA of the larger side. Precision@1 is measured on held-out source words (their
pairs, with every case variant of the word, are not used for the rotation that is tested), with plain nearest neighbour and with CSLS (Conneau et al.,
2018), by the retrieval of `langswap.resources.retrieval`; the returned rotation is then fitted on all pairs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from langswap.errors import ResourceFormatError, VocabularyError
from langswap.reports import AlignmentReport
from langswap.resources.dictionary import Dictionary, require_coverage
from langswap.resources.retrieval import RetrievalConfig, dictionary_precision
from langswap.resources.vectors import WordVectors, normalize_rows

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AlignConfig(RetrievalConfig):
    """How vectors are aligned and how the alignment is judged (the retrieval options are lexicon induction's)."""

    heldout_words: int = field(default=1500, metadata={"help": "Source words held out to measure precision@1 "
                                                                "(at most a fifth of the covered source words)."})
    normalize: bool = field(default=True, metadata={"help": "Fit the rotation on unit-length vectors."})
    seed: int = field(default=0, metadata={"help": "Seed of the held-out split."})


@dataclass
class Alignment:
    source: WordVectors  # rotated into the target space
    target: WordVectors
    rotation: np.ndarray  # (D, D), applied after any PCA
    report: AlignmentReport


def procrustes(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The orthogonal W minimising ||source @ W - target||, for (n, D) row-paired matrices."""
    u, _, vt = np.linalg.svd(source.astype(np.float64).T @ target.astype(np.float64))
    return (u @ vt).astype(np.float32)


def _fit(source_vectors: WordVectors, target_vectors: WordVectors, pairs: list[tuple[str, str]],
         normalize: bool) -> np.ndarray:
    source = source_vectors.vectors([s for s, _ in pairs])
    target = target_vectors.vectors([t for _, t in pairs])
    if normalize:
        source, target = normalize_rows(source), normalize_rows(target)
    return procrustes(source, target)


def _pca_to_common_dim(source: WordVectors, target: WordVectors) -> tuple[WordVectors, WordVectors, str | None]:
    if source.dim == target.dim:
        return source, target, None
    if source.dim > target.dim:
        note = f"source vectors reduced from {source.dim} to {target.dim} dimensions by PCA"
        source = source.with_transform(source.principal_components(target.dim))
    else:
        note = f"target vectors reduced from {target.dim} to {source.dim} dimensions by PCA"
        target = target.with_transform(target.principal_components(source.dim))
    logger.warning("%s", note)
    return source, target, note


def align(source_vectors: WordVectors, target_vectors: WordVectors, dictionary: Dictionary,
          config: AlignConfig | None = None) -> Alignment:
    """Rotate `source_vectors` onto `target_vectors` with the dictionary's covered pairs; report the quality."""
    config = config or AlignConfig()
    source_vectors, target_vectors, pca_note = _pca_to_common_dim(source_vectors, target_vectors)
    dim = source_vectors.dim
    covered = require_coverage(dictionary, source_vectors, target_vectors, variants=config.case_variants)
    report: dict = {"source_vectors": source_vectors.name, "target_vectors": target_vectors.name,
                    "dimension": dim, "pca": pca_note, **covered.report()}
    if len(covered.pairs) < dim:
        raise VocabularyError(
            f"only {len(covered.pairs):,} of {len(dictionary):,} dictionary pairs have both words in the word "
            f"vectors; Procrustes needs at least {dim} (the vector dimension), better {2 * dim}. Use a larger "
            "dictionary, vectors trained on more text, or vectors of lower dimension (`langswap fasttext --dim`). "
            "Check that the dictionary is source<TAB>target and that the vectors are for these languages.")
    if len(covered.pairs) < 2 * dim:
        logger.warning("only %d dictionary pairs for dimension %d; the rotation may be poor", len(covered.pairs), dim)

    report.update(_heldout_precision(source_vectors, target_vectors, covered.pairs, config))
    rotation = _fit(source_vectors, target_vectors, covered.pairs, config.normalize)
    report["pairs_used"] = len(covered.pairs)
    return Alignment(source_vectors.with_transform(rotation), target_vectors, rotation,
                     AlignmentReport.from_dict(report))


def _heldout_precision(source_vectors: WordVectors, target_vectors: WordVectors, pairs: list[tuple[str, str]],
                       config: AlignConfig) -> dict:
    # Held out by lower-cased source word: the case variants that coverage adds ("house", "House") are one word,
    # so a held-out word's variant cannot teach the rotation its translation.
    source_words = sorted({s.casefold() for s, _ in pairs})
    heldout_count = min(config.heldout_words, len(source_words) // 5)
    if heldout_count < 1:
        return {"precision_at_1": None, "precision_at_1_csls": None, "queries": 0}
    order = np.random.default_rng(config.seed).permutation(len(source_words))
    held = {source_words[i] for i in order[:heldout_count]}
    heldout = {s for s, _ in pairs if s.casefold() in held}
    train = [pair for pair in pairs if pair[0] not in heldout]
    if len(train) < source_vectors.dim:
        return {"precision_at_1": None, "precision_at_1_csls": None, "queries": 0,
                "note": "too few pairs left for a held-out evaluation"}
    rotation = _fit(source_vectors, target_vectors, train, config.normalize)
    result = dictionary_precision(source_vectors.with_transform(rotation), target_vectors, pairs, sorted(heldout),
                                  ks=(1,), csls_neighbors=config.csls_neighbors,
                                  retrieval_words=config.retrieval_words)
    result["pairs_train"] = len(train)
    result["heldout_words"] = heldout_count  # case-insensitive; each held-out form present is a query
    return result


def write_alignment(folder: Path, source: WordVectors, target: WordVectors, report: AlignmentReport) -> None:
    """The files `langswap align` writes and `load_alignment` reads:
    alignment.npy (raw source space -> shared space), target_transform.npy where the target side was reduced by PCA,
    and report.json."""
    np.save(folder / "alignment.npy", source.transform)
    if target.transform is not None:
        np.save(folder / "target_transform.npy", target.transform)
    (folder / "report.json").write_text(json.dumps(report.as_dict(), indent=2), encoding="utf-8")


def load_alignment(path: str | Path, source: WordVectors, target: WordVectors) -> tuple[WordVectors, WordVectors]:
    """`source` and `target` mapped into the shared space of the alignment that `write_alignment` wrote to `path`.

    Reads `path` (alignment.npy: (source.dim, D)) and, where it exists beside it, target_transform.npy
    ((target.dim, D), the PCA of a larger target side). Each is refused with `ResourceFormatError` naming the file:
    not a complete .npy file (a truncated copy: how many bytes of how many), not a 2-D float matrix, values that are
    not finite, or a shape that does not fit the vectors it is applied to (both numbers and the vectors file are
    named). The rotation itself is not checked for orthogonality: a PCA projection composed with it is not square."""
    path = Path(path)
    rotation = _read_matrix(path)
    transform_path = path.with_name("target_transform.npy")
    if transform_path.exists():
        transform = _read_matrix(transform_path)
        if transform.shape[0] != target.dim:
            raise ResourceFormatError(
                f"'{transform_path}' is {transform.shape[0]} x {transform.shape[1]}, but it maps the target vectors "
                f"'{target.name}', of dimension {target.dim}: its rows must be {target.dim}. It was written for "
                "other vectors; rerun `langswap align` on these vectors.")
        target = target.with_transform(transform)
    if rotation.shape != (source.dim, target.dim):
        side = (f"its rows must equal the dimension of the source vectors '{source.name}', {source.dim}"
                if rotation.shape[0] != source.dim else
                f"its columns must equal the dimension of the target vectors '{target.name}'"
                f"{' after target_transform.npy' if transform_path.exists() else ''}, {target.dim}")
        raise ResourceFormatError(
            f"alignment '{path}' is {rotation.shape[0]} x {rotation.shape[1]}, but {side}. It was written for other "
            "vectors; rerun `langswap align` on these vectors.")
    return source.with_transform(rotation), target


def _read_matrix(path: Path) -> np.ndarray:
    """A 2-D finite float matrix from a .npy file, checked against its own header before it is read."""
    fix = "Copy it again from the folder `langswap align` wrote, or rerun `langswap align`."
    size = path.stat().st_size
    with open(path, "rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                           np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(handle)
        except (ValueError, EOFError) as error:  # no magic string, or a header cut short
            raise ResourceFormatError(f"alignment file '{path}' is not a complete .npy file ({error}). "
                                      f"{fix}") from None
        data_start = handle.tell()
    if dtype.hasobject or dtype.kind not in "fiu":
        raise ResourceFormatError(f"alignment file '{path}' holds {dtype} values, not numbers. {fix}")
    expected = data_start + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size != expected:
        raise ResourceFormatError(
            f"alignment file '{path}' has {size:,} bytes, but its header ({'x'.join(map(str, shape))} {dtype}) "
            f"needs {expected:,}: {'it is truncated' if size < expected else 'it has bytes after its data'}. "
            f"{fix}")
    matrix = np.load(path, allow_pickle=False)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ResourceFormatError(f"alignment file '{path}' holds an array of shape {matrix.shape}, not a matrix. "
                                  f"{fix}")
    if not np.isfinite(matrix).all():
        raise ResourceFormatError(
            f"alignment file '{path}' has {int((~np.isfinite(matrix)).sum()):,} values that are not finite (nan or "
            "inf). Rerun `langswap align`; if it writes such values again, the word vectors have them.")
    return matrix.astype(np.float32)
