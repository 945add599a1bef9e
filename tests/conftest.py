"""Tiny, local fixtures: synthetic text, a ciphered language, tokenizers of every family, tiny models, vectors.

Nothing is downloaded. The "ciphered language" replaces every letter of the English-like text by a fixed other
letter, so its dictionary is known exactly and its words are no English words.
"""

from __future__ import annotations

import json
import os
import random
import string
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (`-n auto`, the README's test command) every worker runs tests of its own, one per core: a
    # worker's torch, and the processes its tests start, take one intra-op thread, not all of the machine's cores each.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core this process may run on, at most 4 (each worker imports torch and transformers
    and builds the session's fixtures again; beyond 4 the suite gains little and memory grows)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 4))


def unwrapped(text: str) -> str:
    """`text` with its whitespace collapsed: the CLI wraps an error at 110 columns, and where a line breaks depends on
    the length of the paths in it, so a test looks for an error's words in this."""
    return " ".join(text.split())


WORDS = ("the of and to in is was for on that with as by at from his her they this have are not but had which one "
         "all were when there been their would more will if what about into some time could them than other then "
         "people house water river stone garden window mother father child letter music winter summer morning "
         "evening mountain forest village market bread apple horse bird flower silver golden bright quiet strong "
         "small large early late ancient modern happy gentle careful sudden walking running singing reading writing "
         "thinking building teacher student doctor farmer sailor painter kitchen bridge castle island harbour "
         "tower valley meadow candle mirror pocket basket hammer ladder blanket pillow carpet curtain").split()


def english_lines(count: int = 1500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(WORDS))]
    lines = []
    for _ in range(count):
        length = rng.randint(6, 16)
        words = rng.choices(WORDS, weights=weights, k=length)
        lines.append(" ".join(words).capitalize() + ".")
    return lines


CIPHER = dict(zip(string.ascii_lowercase, "qwertyuiopasdfghjklzxcvbnm"))


def cipher_word(text: str) -> str:
    """Replace each ASCII letter by its cipher letter, keeping case; other characters stay."""
    out = []
    for char in text:
        mapped = CIPHER.get(char.lower())
        out.append(char if mapped is None else (mapped.upper() if char.isupper() else mapped))
    return "".join(out)


cipher_line = cipher_word


@pytest.fixture(scope="session", autouse=True)
def _cache_of_the_session(tmp_path_factory):
    """What the tests build into the langswap cache (token stores of every training run) goes to a folder of the
    session, not the user's cache; a cache the user named with $LANGSWAP_CACHE is kept."""
    if os.environ.get("LANGSWAP_CACHE"):
        yield
        return
    os.environ["LANGSWAP_CACHE"] = str(tmp_path_factory.mktemp("langswap-cache"))
    yield
    os.environ.pop("LANGSWAP_CACHE", None)


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    english = english_lines()
    (folder / "en.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    (folder / "xx.txt").write_text("\n".join(cipher_line(line) for line in english_lines(seed=1)) + "\n",
                                   encoding="utf-8")
    (folder / "xx.test.txt").write_text("\n".join(cipher_line(line) for line in english_lines(60, seed=2)) + "\n",
                                        encoding="utf-8")
    (folder / "en-xx.tsv").write_text("".join(f"{w}\t{cipher_word(w)}\n" for w in WORDS), encoding="utf-8")
    return folder


# -- tokenizers of every family ---------------------------------------------------------------------------------------

def byte_level_tokenizer(lines: list[str], vocab_size: int = 400):
    """GPT-2 style byte-level BPE with <|endoftext|> as bos/eos/unk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def sentencepiece_tokenizer(lines: list[str], vocab_size: int = 400):
    """Llama-2 style: BPE with ▁ word starts and <0xNN> byte fallback, <s> </s> <unk>."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + 256, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    # in Llama-2's tokenizer the <0xNN> pieces are ordinary vocabulary entries, not added special tokens
    spec = json.loads(tokenizer.to_str())
    spec["added_tokens"] = [entry for entry in spec["added_tokens"] if entry["content"] not in byte_tokens]
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def wordpiece_tokenizer(lines: list[str], vocab_size: int = 400, unused: int = 0):
    """BERT style WordPiece with [CLS] [SEP] [MASK] [PAD] [UNK], and `unused` placeholders [unusedN] after them (named
    as additional special tokens, as some BERT configs list them)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    placeholders = [f"[unused{i}]" for i in range(unused)]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + placeholders
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                                   show_progress=False))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   **({"additional_special_tokens": placeholders} if placeholders else {}))


def roberta_tokenizer(lines: list[str], vocab_size: int = 400):
    """RoBERTa style byte-level BPE: <s> <pad> </s> <unk> <mask> at ids 0-4, as RoBERTa (its pad id 1 is also the
    position embeddings' padding index, so it must stay small)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")


TOKENIZER_BUILDERS = {"byte_level": byte_level_tokenizer, "sentencepiece": sentencepiece_tokenizer,
                      "wordpiece": wordpiece_tokenizer, "roberta": roberta_tokenizer}


# -- tiny models --------------------------------------------------------------------------------------------------------

def tiny_model(kind: str, vocab_size: int, seed: int = 0):
    """'gpt2' (tied), 'llama' (untied head), 'bert' (MLM head with bias), 'roberta'."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                          bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    elif kind == "llama":
        config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                          max_position_embeddings=128, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(config)
    elif kind == "bert":
        config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=128)
        model = transformers.BertForMaskedLM(config)
    elif kind == "roberta":
        config = transformers.RobertaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=130,
                                            pad_token_id=1)
        model = transformers.RobertaForMaskedLM(config)
    else:
        raise ValueError(kind)
    with torch.no_grad():  # a non-zero output bias, so that mixing it is visible
        bias = getattr(model.get_output_embeddings(), "bias", None)
        if bias is not None:
            bias.normal_(0, 0.5)
    model.eval()
    return model


def uniform_lm(vocab_size: int, max_position_embeddings: int = 64):
    """A model whose logits are all equal: every token has probability 1 / vocab_size, so any perplexity of it is
    vocab_size. Takes input_ids and attention_mask, as causal and masked LMs do."""
    import torch

    class UniformLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vocab_size = vocab_size
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.config = type("Config", (), {"max_position_embeddings": max_position_embeddings})()

        def forward(self, input_ids, attention_mask=None):
            logits = torch.zeros(*input_ids.shape, self.vocab_size) + self.weight
            return type("Output", (), {"logits": logits})()

    return UniformLM()


def save_model(model, tokenizer, folder: Path) -> Path:
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def english(corpus_dir) -> list[str]:
    return (corpus_dir / "en.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def ciphered(corpus_dir) -> list[str]:
    return (corpus_dir / "xx.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory, english) -> Path:
    tokenizer = byte_level_tokenizer(english)
    return save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def target_tokenizer_folder(tmp_path_factory, ciphered) -> Path:
    folder = tmp_path_factory.mktemp("xx-tokenizer")
    byte_level_tokenizer(ciphered, vocab_size=380).save_pretrained(folder)
    return folder


# -- word vectors -------------------------------------------------------------------------------------------------------

def write_vec(path: Path, words: list[str], vectors: np.ndarray) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{len(words)} {vectors.shape[1]}\n")
        for word, row in zip(words, vectors):
            handle.write(word + " " + " ".join(f"{v:.6f}" for v in row) + "\n")
    return path


def random_rotation(dim: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))


@pytest.fixture(scope="session")
def cipher_vectors(tmp_path_factory) -> dict:
    """English .vec and ciphered .vec = English vectors rotated by a known orthogonal matrix."""
    folder = tmp_path_factory.mktemp("vectors")
    dim = 16
    words = list(dict.fromkeys(WORDS + [w.capitalize() for w in WORDS]))
    vectors = np.random.default_rng(0).standard_normal((len(words), dim)).astype(np.float32)
    rotation = random_rotation(dim, 1)
    source = write_vec(folder / "en.vec", words, vectors)
    target = write_vec(folder / "xx.vec", [cipher_word(w) for w in words], vectors @ rotation)
    return {"source": source, "target": target, "rotation": rotation, "dim": dim}


def slow_tests_enabled() -> bool:
    return os.environ.get("LANGSWAP_SLOW_TESTS") == "1"


# -- tagged sentences and UD files -----------------------------------------------------------------------------------------------------------

def write_conllu(path: Path, sentences) -> Path:
    """A .conllu file of `Sentence`s (FORM and UPOS filled, a comment line per sentence)."""
    blocks = []
    for number, sentence in enumerate(sentences, start=1):
        rows = [f"# sent_id = {number}", f"# text = {' '.join(sentence.words)}"]
        rows += [f"{i}\t{word}\t{word}\t{tag}\t_\t_\t0\tdep\t_\t_"
                 for i, (word, tag) in enumerate(zip(sentence.words, sentence.tags), start=1)]
        blocks.append("\n".join(rows) + "\n")
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path


def tagged_sentences(count: int, seed: int, tag_of: dict[str, str], lengths: tuple[int, int] = (3, 9)):
    """`count` random `Sentence`s over the words of `tag_of`, each word tagged by it (a tag is a function of the
    word, so a probe or a tagger can be perfect on seen words)."""
    from langswap.evaluation.conll import Sentence

    rng = random.Random(seed)
    vocabulary = list(tag_of)
    out = []
    for _ in range(count):
        words = rng.choices(vocabulary, k=rng.randint(*lengths))
        out.append(Sentence(words, [tag_of[word] for word in words]))
    return out


@pytest.fixture
def one_thread():
    """One intra-op thread for the test: its models are tiny, and on a busy machine threads only wait for each
    other."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
