"""Static word vectors: fastText `.bin` (words and character n-grams) and `.vec` (words only).

A `WordVectors` answers two questions: the vector of any string (known word, or for `.bin` the mean of its
character n-gram vectors, as fastText does for unknown words; zero when nothing is known), and the known words with
their frequencies. A linear `transform` (an alignment rotation, a PCA projection) is applied to every vector handed
out, so aligned vectors are never materialised for the whole vocabulary.

Damaged files are refused, never used in part (`ResourceFormatError` naming the file and the fault): a `.bin` is
checked by `check_fasttext_bin` before fastText sees it, a `.vec` row by row as it is read (see `WordVectors.load`).

Not handled: word2vec binary format and gensim models (convert them to `.vec`), quantised `.ftz` models.
"""

from __future__ import annotations

import logging
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.files import atomic_file

logger = logging.getLogger(__name__)


def import_fasttext():
    try:
        import fasttext
    except ImportError as error:
        raise MissingResourceError("reading fastText .bin files needs the fasttext package: pip install fasttext") \
            from error
    fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence the deprecation notice on every load
    return fasttext


class WordVectors:
    """Word vectors of dimension `dim` (after `transform`), with frequencies where the file has them."""

    def __init__(self, words: list[str], vectors: np.ndarray | None = None, freqs: np.ndarray | None = None,
                 model=None, transform: np.ndarray | None = None, name: str = "vectors"):
        self.words = list(words)
        self.freqs = None if freqs is None else np.asarray(freqs, dtype=np.float64)
        self._vectors = None if vectors is None else np.asarray(vectors, dtype=np.float32)
        self._model = model
        self.transform = None if transform is None else np.asarray(transform, dtype=np.float32)
        self.name = name
        self._index = {word: i for i, word in reversed(list(enumerate(self.words)))}
        if self._vectors is None and self._model is None:
            raise ValueError("WordVectors needs either a vector matrix or a fastText model")

    # -- construction --------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, max_words: int | None = None) -> "WordVectors":
        """Load a fastText `.bin` (with n-grams and counts) or a `.vec` text file (words only).

        Refused with `ResourceFormatError`: a `.bin` that `check_fasttext_bin` finds incomplete or inconsistent; a
        `.vec` without its '<words> <dim>' header, with a row of another number of values than the header's dim
        (the line is named), with a value that is no number or not finite (the line is named), or with fewer rows
        than the header promises (a truncated file; a `max_words` limit only asks for fewer rows, so rows beyond
        it are neither read nor missed)."""
        path = Path(path)
        if not path.is_file():
            raise MissingResourceError(f"word vector file '{path}' does not exist. Train vectors on a text file "
                                       "with `langswap fasttext TEXT --output FILE.bin`, or give a .bin/.vec path.")
        if path.suffix == ".bin":
            return cls._load_bin(path)
        return cls._load_vec(path, max_words)

    @classmethod
    def _load_bin(cls, path: Path) -> "WordVectors":
        # Checked first: fastText reads a truncated file without complaint (short reads leave rows of zeros or
        # garbage), and one cut inside its dictionary makes it grow a string until memory runs out.
        check_fasttext_bin(path)
        fasttext = import_fasttext()
        try:
            model = fasttext.load_model(str(path))
        except ValueError as error:
            raise ResourceFormatError(f"'{path}' is not a fastText .bin model ({error}). Give a model saved by "
                                      "fastText, or a .vec text file.") from error
        words, counts = model.get_words(include_freq=True, on_unicode_error="replace")
        return cls(list(words), freqs=np.asarray(counts), model=model, name=path.name)

    @classmethod
    def _load_vec(cls, path: Path, max_words: int | None) -> "WordVectors":
        words: list[str] = []
        rows: list[np.ndarray] = []
        with open(path, encoding="utf-8", errors="replace") as handle:
            header = handle.readline().split()
            if len(header) != 2 or not all(part.isdigit() for part in header):
                raise ResourceFormatError(
                    f"'{path}' does not start with a '<word count> <dimension>' header line (found "
                    f"{' '.join(header[:4])!r}). A .vec file's first line is e.g. '200000 300'; add it, or give a "
                    "fastText .bin file.")
            count, dim = int(header[0]), int(header[1])
            limit = count if max_words is None else min(count, max_words)
            for line_number, line in enumerate(handle, start=2):
                if len(words) >= limit:
                    break
                parts = line.rstrip("\n").rstrip(" ").split(" ")
                if len(parts) != dim + 1:
                    if not line.endswith("\n"):  # only the last line can lack its newline: the file was cut here
                        raise ResourceFormatError(
                            f"'{path}' is truncated: it ends in the middle of line {line_number} ({len(parts) - 1} of "
                            f"{dim} numbers), after {len(words):,} of the {count:,} words its header promises. An "
                            "interrupted download or copy leaves such a file; download or copy it again.")
                    raise ResourceFormatError(
                        f"'{path}' line {line_number} has {len(parts) - 1} numbers but the header says dimension "
                        f"{dim}. Fix the header or the line.")
                try:
                    rows.append(np.asarray(parts[1:], dtype=np.float32))
                except ValueError as error:
                    raise ResourceFormatError(
                        f"'{path}' line {line_number} (word {parts[0]!r}) has a value that is no number ({error}). "
                        "A .vec row is a word and then numbers, separated by single spaces; fix the line.") from None
                words.append(parts[0])
        if not words:
            raise ResourceFormatError(f"'{path}' has a header but no vectors.")
        if len(words) < limit:
            raise ResourceFormatError(
                f"'{path}' is truncated: its header promises {count:,} words but the file ends after {len(words):,} "
                f"(line {len(words) + 1:,}). An interrupted download or copy leaves such a file; download or copy it "
                "again, or, if the file was shortened on purpose, write its word count into the header.")
        vectors = np.stack(rows)
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            first, more = int(np.flatnonzero(~finite)[0]), int((~finite).sum()) - 1
            raise ResourceFormatError(
                f"'{path}' line {first + 2} (word {words[first]!r}) has a value that is not finite (nan or inf)"
                f"{f', and {more:,} more rows do' if more else ''}. Such vectors poison every similarity; retrain "
                "them, or drop those rows and lower the header's word count.")
        # .vec files carry no counts; fastText writes them most frequent first, so a Zipf estimate keeps the order.
        freqs = zipf_frequencies(len(words))
        return cls(words, vectors=vectors, freqs=freqs, name=path.name)

    def view(self, words: list[str], freqs, name: str) -> "WordVectors":
        """The same vectors (model, matrix and transform shared, not copied) listing other words and counts: one
        language's words of a model trained on two."""
        if self._model is None:
            rows = [self._index[word] for word in words]
            return WordVectors(words, vectors=self._vectors[rows], freqs=freqs, transform=self.transform, name=name)
        return WordVectors(words, freqs=freqs, model=self._model, transform=self.transform, name=name)

    def with_transform(self, transform: np.ndarray) -> "WordVectors":
        """The same vectors mapped through `transform` (raw dim, new dim), composed with any earlier one."""
        transform = np.asarray(transform, dtype=np.float32)
        combined = transform if self.transform is None else self.transform @ transform
        copy = WordVectors.__new__(WordVectors)
        copy.__dict__.update(self.__dict__)
        copy.transform = combined
        return copy

    # -- queries -------------------------------------------------------------------------------------------
    @property
    def raw_dim(self) -> int:
        return self._model.get_dimension() if self._model is not None else self._vectors.shape[1]

    @property
    def dim(self) -> int:
        return self.raw_dim if self.transform is None else self.transform.shape[1]

    @property
    def has_subwords(self) -> bool:
        return self._model is not None

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def word_id(self, word: str) -> int:
        return self._index.get(word, -1)

    def raw_vectors(self, words: list[str]) -> np.ndarray:
        """(len(words), raw_dim) float32 without the transform; unknown words get n-gram vectors or zeros."""
        out = np.zeros((len(words), self.raw_dim), dtype=np.float32)
        if self._model is not None:
            for row, word in enumerate(words):
                if word:
                    out[row] = self._model.get_word_vector(word)
            return out
        for row, word in enumerate(words):
            index = self._index.get(word)
            if index is not None:
                out[row] = self._vectors[index]
        return out

    def vectors(self, words: list[str]) -> np.ndarray:
        """(len(words), dim) float32 vectors with the transform applied."""
        raw = self.raw_vectors(words)
        return raw if self.transform is None else raw @ self.transform

    def word_matrix(self, max_words: int | None = None) -> np.ndarray:
        """Vectors of the first `max_words` known words (most frequent first in fastText files), transformed."""
        words = self.words if max_words is None else self.words[:max_words]
        if self._vectors is not None:
            raw = self._vectors[: len(words)]
            return raw if self.transform is None else raw @ self.transform
        return self.vectors(words)

    def principal_components(self, dim: int, max_words: int = 100_000) -> np.ndarray:
        """(raw_dim, dim) projection onto the top principal components of the (centred) word vectors."""
        sample = self.raw_vectors(self.words[:max_words]).astype(np.float64)
        sample -= sample.mean(axis=0, keepdims=True)
        _, _, vt = np.linalg.svd(sample, full_matrices=False)
        return vt[:dim].T.astype(np.float32)

    def save_vec(self, path: str | Path, max_words: int | None = None) -> int:
        """Write transformed vectors as a `.vec` text file (temporary name, then rename); returns the word count.

        Words that a .vec line cannot hold (empty, or with whitespace, such as a no-break space, which fastText keeps
        inside words) are left out, and the header counts the rows written, as `load` checks."""
        words = self.words if max_words is None else self.words[:max_words]
        matrix = self.word_matrix(len(words))
        kept = [i for i, word in enumerate(words) if word and not any(char.isspace() for char in word)]

        with atomic_file(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
            handle.write(f"{len(kept)} {matrix.shape[1]}\n")
            for i in kept:
                handle.write(words[i] + " " + " ".join(f"{value:.5g}" for value in matrix[i]) + "\n")
        return len(kept)


FASTTEXT_MAGIC = 793712314  # FASTTEXT_FILEFORMAT_MAGIC_INT32 in fastText's src/fasttext.cc
FASTTEXT_VERSION = 12  # the newest format fastText writes; 11 has the same layout
_ARGS = struct.Struct("<12id")  # Args::save: dim ws epoch minCount neg wordNgrams loss model bucket minn maxn
#                                 lrUpdateRate (int32 each), t (double)
_DICTIONARY = struct.Struct("<iiiqq")  # Dictionary::save: size nwords nlabels (int32), ntokens pruneidx_size (int64)
_MATRIX = struct.Struct("<?qq")  # the quantised flag, then DenseMatrix::save: rows, cols (int64); rows*cols float32


@dataclass(frozen=True)
class FastTextLayout:
    """What a fastText `.bin` holds, read from its header without loading it."""

    dim: int
    words: int
    labels: int
    input_shape: tuple[int, int]  # (words + buckets, dim): word and n-gram vectors
    output_shape: tuple[int, int]  # (words, dim), or (labels, dim) for a supervised model
    size: int  # bytes of the complete file


def check_fasttext_bin(path: str | Path) -> FastTextLayout:
    """Check that `path` is a complete, consistent fastText `.bin` model before fastText reads it; its layout.

    The file is read as fastText's `FastText::saveModel` writes it (little-endian, as on every platform fastText
    builds for): magic and version (int32 each), the arguments (`Args::save`), the dictionary (`Dictionary::save`:
    counts, then per entry a NUL-terminated word, an int64 count and an int8 type, then the pruning index), and the
    input and output matrices (a quantised flag byte, int64 rows, int64 cols, rows*cols float32). Only the header
    and the dictionary are read, through a memory map (for an 800 MB model a few MB are touched); the matrices are
    not, their sizes come from their shapes. Refused with `ResourceFormatError` naming the file: no fastText magic
    number, a newer format version, a quantised model (`.ftz`, not supported), a file that ends before the matrices
    its header describes end (truncated: how many bytes of how many), matrix columns other than the header's
    dimension, matrix rows other than the dictionary's words (+ n-gram buckets) need, and bytes after the output
    matrix. The dictionary is walked entry by entry (about 0.2 s per million words). Not detected: damaged values
    inside a file of the right size (fastText files carry no checksum)."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8 + _ARGS.size + _DICTIONARY.size:
        raise _damaged_bin(path, f"has only {size:,} bytes, less than a fastText header")
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        magic, version = struct.unpack_from("<ii", data, 0)
        if magic != FASTTEXT_MAGIC:
            raise ResourceFormatError(
                f"'{path}' is not a fastText .bin model (it does not start with fastText's magic number). Give a "
                "model saved by fastText (`langswap fasttext` or fastText's save_model), or a .vec text file.")
        if version > FASTTEXT_VERSION:
            raise ResourceFormatError(
                f"'{path}' is a fastText model of format version {version}; the fasttext package reads versions up "
                f"to {FASTTEXT_VERSION}. Save the vectors as a .vec text file and give that.")
        args = _ARGS.unpack_from(data, 8)
        dim, bucket, model = args[0], args[8], args[7]
        offset = 8 + _ARGS.size
        entries, words, labels, _, pruned = _DICTIONARY.unpack_from(data, offset)
        offset += _DICTIONARY.size
        if dim <= 0 or min(entries, words, labels, bucket) < 0 or entries != words + labels:
            raise _damaged_bin(path, f"has a garbled header (dimension {dim}, {words:,} words, {labels:,} labels, "
                                     f"{entries:,} dictionary entries)", truncated=False)
        if offset + 10 * entries > size:  # each entry takes at least 10 bytes (NUL, count, type)
            raise _damaged_bin(path, f"ends inside its dictionary of {entries:,} entries")
        for entry in range(entries):
            end = data.find(b"\0", offset)
            if end < 0 or end + 10 > size:
                raise _damaged_bin(path, f"ends inside its dictionary (entry {entry + 1:,} of {entries:,})")
            offset = end + 10
        offset += 8 * max(pruned, 0)  # (int32, int32) pairs of kept n-gram buckets, in quantised models only
        # The header fixes both matrix shapes, hence the size of the complete file.
        shapes = {"input": (words + (bucket if pruned < 0 else pruned), dim),
                  "output": (labels if model == 3 else words, dim)}  # model 3 is `supervised`
        starts = {"input": offset}
        starts["output"] = offset + _MATRIX.size + 4 * shapes["input"][0] * dim
        complete = starts["output"] + _MATRIX.size + 4 * shapes["output"][0] * dim
        for name, start in starts.items():
            if start + _MATRIX.size > size:
                break
            quantised, rows, cols = _MATRIX.unpack_from(data, start)
            if quantised:
                raise ResourceFormatError(
                    f"'{path}' is a quantised fastText model (.ftz), which langswap does not read: its vectors are "
                    "compressed. Give the full .bin model, or a .vec text file.")
            if (rows, cols) != shapes[name]:
                raise _damaged_bin(path, f"has a {rows:,} x {cols:,} {name} matrix where its header (dimension {dim}, "
                                         f"{words:,} words, {bucket:,} n-gram buckets) says {shapes[name][0]:,} x "
                                         f"{dim:,}", truncated=False)
    if size < complete:
        where = "input matrix" if size < starts["output"] else "output matrix"
        raise _damaged_bin(path, f"ends inside its {where}: it has {size:,} of {complete:,} bytes "
                                 f"({100 * size / complete:.1f}%)")
    if size > complete:
        raise _damaged_bin(path, f"has {size - complete:,} byte(s) after the end of its output matrix, where a "
                                 f"fastText model ends ({complete:,} bytes)", truncated=False)
    return FastTextLayout(dim, words, labels, shapes["input"], shapes["output"], size)


def _damaged_bin(path: Path, problem: str, truncated: bool = True) -> ResourceFormatError:
    if truncated:
        return ResourceFormatError(
            f"'{path}' is not a complete fastText .bin model: it {problem}. An interrupted download or copy leaves "
            "such a file; download or copy it again (or retrain it with `langswap fasttext`).")
    return ResourceFormatError(f"'{path}' is a damaged fastText .bin model: it {problem}. Download or copy it again "
                               "(or retrain it with `langswap fasttext`).")


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Unit-length rows; zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def zipf_frequencies(count: int) -> np.ndarray:
    return 1.0 / np.arange(1, count + 1, dtype=np.float64)
