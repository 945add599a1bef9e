"""Static word vectors: fastText `.bin` (words and character n-grams) and `.vec` (words only).

A `WordVectors` answers two questions: the vector of any string (known word, or for `.bin` the mean of its
character n-gram vectors, as fastText does for unknown words; zero when nothing is known), and the known words with
their frequencies. A linear `transform` (an alignment rotation, a PCA projection) is applied to every vector handed
out, so aligned vectors are never materialised for the whole vocabulary.

Not handled: word2vec binary format and gensim models (convert them to `.vec`), quantised `.ftz` models.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from langswap.errors import MissingResourceError, ResourceFormatError

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
        """Load a fastText `.bin` (with n-grams and counts) or a `.vec` text file (words only)."""
        path = Path(path)
        if not path.is_file():
            raise MissingResourceError(f"word vector file '{path}' does not exist. Train vectors on a text file "
                                       "with `langswap fasttext TEXT --output FILE.bin`, or give a .bin/.vec path.")
        if path.suffix == ".bin":
            return cls._load_bin(path)
        return cls._load_vec(path, max_words)

    @classmethod
    def _load_bin(cls, path: Path) -> "WordVectors":
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
                    raise ResourceFormatError(
                        f"'{path}' line {line_number} has {len(parts) - 1} numbers but the header says dimension "
                        f"{dim}. Fix the header or the line.")
                words.append(parts[0])
                rows.append(np.asarray(parts[1:], dtype=np.float32))
        if not words:
            raise ResourceFormatError(f"'{path}' has a header but no vectors.")
        if len(words) < limit:
            logger.warning("%s: header promises %d words, file has %d", path.name, count, len(words))
        vectors = np.stack(rows)
        # .vec files carry no counts; fastText writes them most frequent first, so a Zipf estimate keeps the order.
        freqs = zipf_frequencies(len(words))
        return cls(words, vectors=vectors, freqs=freqs, name=path.name)

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
        """Write transformed vectors as a `.vec` text file (temporary name, then rename); returns the word count."""
        words = self.words if max_words is None else self.words[:max_words]
        matrix = self.word_matrix(len(words))
        path = Path(path)
        temporary = path.with_name(path.name + ".partial")
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(f"{len(words)} {matrix.shape[1]}\n")
            for word, row in zip(words, matrix):
                if not word or any(char.isspace() for char in word):
                    continue
                handle.write(word + " " + " ".join(f"{value:.5g}" for value in row) + "\n")
        temporary.replace(path)
        return len(words)


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Unit-length rows; zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def zipf_frequencies(count: int) -> np.ndarray:
    return 1.0 / np.arange(1, count + 1, dtype=np.float64)
