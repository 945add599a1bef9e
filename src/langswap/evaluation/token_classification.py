"""Fine-tuning for token classification: part-of-speech tagging (.conllu) and named entities (CoNLL-2003 columns).

The whole model is fine-tuned with a token-classification head (`AutoModelForTokenClassification`: GPT-2, Llama,
BERT, RoBERTa and most other architectures) by the transformers Trainer, the engine `langswap train` runs on (so
`accelerate launch` and torchrun spread it over GPUs): AdamW, linear decay of the learning rate to zero, gradient
clipping at 1, seeded. Words are mapped to tokens as the probes do (single spaces between words,
character offsets, the tokenizer's special tokens; see langswap.evaluation.probes). One token of each word carries
the word's label in training and gives its prediction in evaluation; the other tokens are ignored (-100). Which one
is `label_token`: by default (auto) the last token for causal models, the only one that has seen the whole word, and
the first for masked models, as BERT's authors did. Long sentences are windowed as for the probes, so no word is
dropped.

Evaluation:
- POS: accuracy over test words.
- NER: entity precision, recall and F1 (micro-averaged), computed as conlleval and seqeval's default mode do (a
  chunk starts at B-, at an I- after O or after another type, and so on; IOB1, IOB2 and IOBES tags alike), plus the
  accuracy over words.
Labels that occur only in the test split cannot be predicted: such words count as wrong, and their entities as
missed. Both are reported (`unseen_labels`).

Not handled: pooling a word's tokens, CRF layers, evaluation during training or early stopping.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForTokenClassification, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from langswap import __version__
from langswap.batching import right_pad
from langswap.errors import ConfigError, ResourceFormatError
from langswap.evaluation.conll import Sentence, read_conll_columns, read_conllu
from langswap.evaluation.probes import (EncodedSentence, batches, context_length, encode_sentences, load_sentences,
                                        majority, make_pieces, pad_id_of, special_tokens)
from langswap.files import atomic_directory, refuse_existing
from langswap.models import (dtype_argument, load_config, load_model, load_tokenizer, objective_of, pick_device,
                             quiet_transformers, save_tokenizer, transformers_bars)
from langswap.progress import bar as progress_bar

logger = logging.getLogger(__name__)


# -- entity spans, as conlleval --------------------------------------------------------------------------------------------

def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') from 'B-PER'; 'O' -> ('O', '_'); a bare 'B' -> ('B', '_'), as seqeval."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _end_of_chunk(previous_tag: str, tag: str, previous_type: str, type_: str) -> bool:
    if previous_tag in ("E", "S"):
        return True
    if previous_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return previous_tag != "O" and previous_tag != "." and previous_type != type_


def _start_of_chunk(previous_tag: str, tag: str, previous_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if previous_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and tag != "." and previous_type != type_


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """Entity chunks (type, first word, last word) of one sentence's tags, as conlleval finds them.

    >>> entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 1), ('LOC', 3, 3), ('LOC', 4, 4), ('ORG', 5, 5)]"""
    chunks = []
    previous_tag, previous_type, begin = "O", "", 0
    for index, tag in enumerate(list(tags) + ["O"]):
        tag, type_ = _split_tag(tag)
        if _end_of_chunk(previous_tag, tag, previous_type, type_):
            chunks.append((previous_type, begin, index - 1))
        if _start_of_chunk(previous_tag, tag, previous_type, type_):
            begin = index
        previous_tag, previous_type = tag, type_
    return chunks


def check_entity_tags(tags, what: str) -> None:
    bad = sorted({tag for tag in tags if tag != "O" and not (tag[0] in "BIES" and (len(tag) == 1 or tag[1] == "-"))})
    if bad:
        shown = ", ".join(repr(tag) for tag in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ResourceFormatError(f"the {what} has tags that are not entity tags: {shown}. NER needs BIO tags (O, "
                                  "B-TYPE, I-TYPE; IOB1 and IOBES work too). Is tag_column right, or is this a POS "
                                  "task (task='pos')?")


def ner_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Entity precision/recall/F1 (micro, exact type and boundaries), word accuracy and per-type scores.

    gold, predicted: per sentence, one tag per word. Matches seqeval's default mode and conlleval."""
    assert len(gold) == len(predicted), f"{len(gold)} gold sentences but {len(predicted)} predicted"
    gold_chunks, predicted_chunks = set(), set()
    correct_words = total_words = 0
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
        assert len(gold_tags) == len(predicted_tags), f"sentence {index}: {len(gold_tags)} vs {len(predicted_tags)}"
        gold_chunks.update((index, *chunk) for chunk in entities(gold_tags))
        predicted_chunks.update((index, *chunk) for chunk in entities(predicted_tags))
        correct_words += sum(g == p for g, p in zip(gold_tags, predicted_tags))
        total_words += len(gold_tags)

    def prf(gold_set, predicted_set) -> dict:
        hits = len(gold_set & predicted_set)
        precision = hits / len(predicted_set) if predicted_set else 0.0
        recall = hits / len(gold_set) if gold_set else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "gold": len(gold_set),
                "predicted": len(predicted_set), "correct": hits}

    by_type_gold, by_type_predicted = defaultdict(set), defaultdict(set)
    for chunk in gold_chunks:
        by_type_gold[chunk[1]].add(chunk)
    for chunk in predicted_chunks:
        by_type_predicted[chunk[1]].add(chunk)
    scores = prf(gold_chunks, predicted_chunks)
    scores["accuracy"] = correct_words / total_words if total_words else 0.0
    scores["per_type"] = {type_: prf(by_type_gold[type_], by_type_predicted[type_])
                          for type_ in sorted(set(by_type_gold) | set(by_type_predicted))}
    return scores


# -- fine-tuning -----------------------------------------------------------------------------------------------------------

LABEL_TOKENS = ("auto", "first", "last")


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig:
    """Fine-tuning a model with a token-classification head."""

    epochs: int = field(default=3, metadata={"help": "Passes over the training sentences."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak AdamW learning rate; it decays linearly to 0."})
    batch_size: int = field(default=16, metadata={"help": "Sentences (windows) per optimizer step."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    seed: int = field(default=0, metadata={"help": "Seed of the head's initialisation, dropout and the order of "
                                                   "sentences; runs on one device are reproducible."})
    max_length: int | None = field(default=None, metadata={"help": "Tokens per window, special tokens included; "
                                                                   "default the model's context, at most 1024. "
                                                                   "Longer sentences are windowed."})
    max_sentences: int | None = field(default=None, metadata={"help": "Use only the first this many sentences of "
                                                                      "each split; default all."})
    device: str | None = field(default=None, metadata={"help": "cpu, cuda, cuda:1, ...; default cuda when there "
                                                               "is one."})
    label_token: str = field(default="auto", metadata={
        "help": "Which token of a word carries its label in training and gives its prediction: first, last, or auto "
                "(last for causal models, which see the whole word only at its last token; first for masked ones).",
        "choices": LABEL_TOKENS})

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"fine-tuning {name} must be at least 1, not {getattr(self, name)}.")
        if not self.learning_rate > 0:
            raise ConfigError(f"fine-tuning learning_rate must be positive, not {self.learning_rate}.")
        if self.weight_decay < 0:
            raise ConfigError(f"fine-tuning weight_decay must be zero or positive, not {self.weight_decay}.")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ConfigError(f"fine-tuning max_sentences must be at least 1 (or unset for all), not "
                              f"{self.max_sentences}.")
        if self.label_token not in LABEL_TOKENS:
            raise ConfigError(f"fine-tuning label_token is {self.label_token!r}; choose one of: "
                              f"{', '.join(LABEL_TOKENS)} (auto = last for causal models, first for masked ones).")

    def resolved_label_token(self, causal: bool) -> str:
        """'first' or 'last': `label_token` with auto decided by the model's kind."""
        if self.label_token != "auto":
            return self.label_token
        return "last" if causal else "first"


@dataclass
class FinetuneResult:
    task: str
    accuracy: float  # over test words; words with labels unseen in training count as wrong
    majority_baseline: float  # test accuracy of always predicting the most frequent training label
    precision: float | None  # NER only: entity precision, recall, F1 (conlleval)
    recall: float | None
    f1: float | None
    train_sentences: int
    train_words: int
    test_sentences: int
    test_words: int
    labels: list[str]  # the label set, from the training split
    unseen_labels: dict[str, int]  # test labels absent from training -> number of test words with them
    final_loss: float  # mean training loss of the last epoch
    label_token: str  # 'first' or 'last': the token of each word that was labelled and read (auto resolved)
    per_type: dict | None = None  # NER only: per entity type precision, recall, F1 and counts
    zero_shot: str | None = None  # the model whose embeddings and tokenizer read the test split, where one was given

    def as_dict(self) -> dict:
        def rounded(value):
            if isinstance(value, float):
                return round(value, 5)
            if isinstance(value, dict):
                return {key: rounded(item) for key, item in value.items()}
            return value

        return {key: rounded(value) for key, value in asdict(self).items()}


def _label_tokens(sentence: EncodedSentence, label_token: str) -> list[int]:
    """Per word, the token that carries its label: its first or its last (-1 for a word without any)."""
    if label_token == "first":
        return sentence.first_tokens()
    assert label_token == "last", label_token
    last = [-1] * sentence.n_words
    for token, words in enumerate(sentence.token_words):
        for word in words:
            last[word] = token
    return last


def _labelled_pieces(encoded: list[EncodedSentence], label_ids: list[list[int]], prefix, suffix, context, causal,
                     label_token: str):
    """Pieces plus, per piece, the label of each position (-100 = ignored) and the words predicted at which
    positions. label_token 'first' or 'last': a word's first or last token carries it; a token chosen for two words
    (one token across their boundary) carries the earlier word's label and gives both their prediction."""
    pieces = make_pieces(encoded, prefix, suffix, context, causal)
    labels, predicted_at = [], []
    words_at: dict[int, dict[int, list[int]]] = {}  # sentence -> token -> the words it carries
    for piece in pieces:
        if piece.sentence not in words_at:
            words_at[piece.sentence] = {}
            for word, token in enumerate(_label_tokens(encoded[piece.sentence], label_token)):
                if token >= 0:
                    words_at[piece.sentence].setdefault(token, []).append(word)
        words_of_token = words_at[piece.sentence]
        row = [-100] * len(piece.input_ids)
        where = []
        for position, token in zip(piece.positions, piece.tokens):
            for rank, word in enumerate(words_of_token.get(token, [])):
                if rank == 0:
                    row[position] = label_ids[piece.sentence][word]
                where.append((position, word))
        labels.append(row)
        predicted_at.append(where)
    return pieces, labels, predicted_at


def finetune_token_classification(model_folder: str | Path, train_path: str | Path | list[Sentence],
                                  test_path: str | Path | list[Sentence], task: Literal["pos", "ner"] = "pos",
                                  config: FinetuneConfig | None = None, progress: bool = False,
                                  output: str | Path | None = None, overwrite: bool = False,
                                  tokenizer: str | Path | None = None, token_column: int = 0,
                                  tag_column: int = -1, zero_shot: str | Path | None = None) -> FinetuneResult:
    """Fine-tune the model in `model_folder` to tag words, and score it on the test split.

    task 'pos' reads .conllu files (UPOS); 'ner' reads CoNLL-2003-style columns (`token_column`, `tag_column`).
    Splits may also be lists of Sentence. Nothing is written unless `output` is given: then the fine-tuned model,
    its tokenizer and finetune.json (config, labels, result, version) are saved there atomically.

    Zero-shot transfer (RAMEN): with `zero_shot`, a model of the same body in another language (the target model of
    a transfer, or a bilingual run's `model/`), the model is fine-tuned on the training split (source language)
    with its input embeddings frozen, then reads the test split (target language) through `zero_shot`'s input
    embeddings and tokenizer: the head and the body never see a target-language label."""
    config = config or FinetuneConfig()
    if task not in ("pos", "ner"):
        raise ConfigError(f"task is {task!r}; choose 'pos' (UPOS from .conllu) or 'ner' (BIO tags in CoNLL columns).")
    if output is not None:
        refuse_existing(output, overwrite)
    if task == "pos":
        def reader(path, what):
            return read_conllu(path, what=what)
    else:
        def reader(path, what):
            return read_conll_columns(path, token_column=token_column, tag_column=tag_column, what=what)
    kind = "CoNLL-U file" if task == "pos" else "CoNLL column file"
    train = load_sentences(train_path, f"training {kind}", config.max_sentences, reader)
    test = load_sentences(test_path, f"test {kind}", config.max_sentences, reader)
    if task == "ner":
        check_entity_tags((tag for sentence in train for tag in sentence.tags), f"training {kind}")
        check_entity_tags((tag for sentence in test for tag in sentence.tags), f"test {kind}")
    train_tags = [tag for sentence in train for tag in sentence.tags]
    test_tags = [tag for sentence in test for tag in sentence.tags]
    labels = sorted(set(train_tags))
    label_ids = {label: index for index, label in enumerate(labels)}

    quiet_transformers()

    tokenizer = load_tokenizer(tokenizer if tokenizer is not None else model_folder)
    model_config = load_config(model_folder)  # refuses a model that needs code of its own
    causal = objective_of(model_config) != "masked"
    label_token = config.resolved_label_token(causal)

    device = pick_device(config.device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # seeded head and dropout, without disturbing the caller's state
        torch.manual_seed(config.seed)
        try:
            with transformers_bars(progress):
                model = AutoModelForTokenClassification.from_pretrained(
                    str(model_folder), num_labels=len(labels), id2label=dict(enumerate(labels)),
                    label2id=label_ids, trust_remote_code=False, **dtype_argument(torch.float32))
        except ValueError as error:
            raise ConfigError(f"the model in '{model_folder}' ({model_config.model_type}) has no token-classification "
                              f"head in transformers: {str(error).splitlines()[0]}") from error
        prefix, suffix = special_tokens(tokenizer, "causal" if causal else "masked")
        context = context_length(model, tokenizer, config.max_length)
        pad_id = pad_id_of(model, tokenizer)

        train_encoded = encode_sentences(tokenizer, train)
        train_label_ids = [[label_ids[tag] for tag in sentence.tags] for sentence in train]
        pieces, piece_labels, _ = _labelled_pieces(train_encoded, train_label_ids, prefix, suffix, context, causal,
                                                   label_token)
        if zero_shot is not None:  # the body learns to read these embeddings, which the target ones stand in for
            model.get_input_embeddings().weight.requires_grad_(False)
        final_loss = _train(model, pieces, piece_labels, config, pad_id, device, progress)
        if zero_shot is not None:
            tokenizer = swap_in_embeddings(model, zero_shot)
            prefix, suffix = special_tokens(tokenizer, "causal" if causal else "masked")
            pad_id = pad_id_of(model, tokenizer)
        model.to(device)

        test_encoded = encode_sentences(tokenizer, test)
        test_label_ids = [[label_ids.get(tag, -100) for tag in sentence.tags] for sentence in test]
        predicted = _predict(model, test_encoded, test_label_ids, prefix, suffix, context, causal, label_token,
                             config.batch_size, pad_id, device, progress)
    predicted_tags = [[labels[index] if index >= 0 else "<none>" for index in row] for row in predicted]
    missing = sum(index < 0 for row in predicted for index in row)
    if missing:
        logger.warning("%d test words got no token of their own and count as wrong", missing)

    gold_tags = [sentence.tags for sentence in test]
    correct = sum(g == p for gold, guess in zip(gold_tags, predicted_tags) for g, p in zip(gold, guess))
    top = majority(train_tags)
    unseen = Counter(tag for tag in test_tags if tag not in label_ids)
    precision = recall = f1 = per_type = None
    if task == "ner":
        # a word without a prediction is scored as O, so it can only miss an entity, never invent one
        scores = ner_scores(gold_tags, [[tag if tag != "<none>" else "O" for tag in row] for row in predicted_tags])
        precision, recall, f1, per_type = scores["precision"], scores["recall"], scores["f1"], scores["per_type"]
    result = FinetuneResult(
        task=task, accuracy=correct / len(test_tags), majority_baseline=sum(t == top for t in test_tags) / len(test_tags),
        precision=precision, recall=recall, f1=f1,
        train_sentences=len(train), train_words=len(train_tags), test_sentences=len(test), test_words=len(test_tags),
        labels=labels, unseen_labels=dict(sorted(unseen.items())), final_loss=final_loss, label_token=label_token,
        per_type=per_type, zero_shot=None if zero_shot is None else str(zero_shot))
    summary = f"accuracy {result.accuracy:.4f} (majority baseline {result.majority_baseline:.4f})"
    if task == "ner":
        summary = f"entity F1 {f1:.4f} (precision {precision:.4f}, recall {recall:.4f}) | " + summary
    logger.info("fine-tuned %s for %s: %s | train %s sentences, %s words | test %s sentences, %s words | %d labels "
                "| labels on each word's %s token", model_folder, task.upper(), summary, f"{len(train):,}",
                f"{len(train_tags):,}", f"{len(test):,}", f"{len(test_tags):,}", len(labels), label_token)
    if output is not None:
        _save(model, tokenizer, Path(output), overwrite, {
            "task": task, "model": str(model_folder),
            "train": str(train_path) if isinstance(train_path, (str, Path)) else "<sentences>",
            "test": str(test_path) if isinstance(test_path, (str, Path)) else "<sentences>",
            "config": asdict(config), "result": result.as_dict()})
    return result


def swap_in_embeddings(model, other_folder: str | Path):
    """Give `model` the input embeddings of the model in `other_folder` (same hidden size); returns that model's
    tokenizer, which now reads text for `model`."""
    tokenizer = load_tokenizer(other_folder, f"tokenizer of the zero-shot model '{other_folder}'")
    other = load_model(other_folder).get_input_embeddings().weight.detach()
    hidden = model.get_input_embeddings().weight.shape[1]
    if other.shape[1] != hidden:
        raise ConfigError(f"the zero-shot model '{other_folder}' has embeddings of {other.shape[1]} dimensions, the "
                          f"fine-tuned model {hidden}: give a model of the same body (a transfer's output, or a "
                          "bilingual run's model/).")
    model.resize_token_embeddings(other.shape[0], mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(other.to(model.get_input_embeddings().weight.dtype))
    return tokenizer


class _LabelledCollator:
    """Right-padded input_ids, attention_mask and labels (-100 where a position is padding or carries no label)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, examples: list[dict]) -> dict:
        input_ids, attention = right_pad([example["input_ids"] for example in examples], self.pad_id)
        labels, _ = right_pad([example["labels"] for example in examples], -100)
        return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def _train(model, pieces, piece_labels, config: FinetuneConfig, pad_id: int, device, progress: bool) -> float:
    """Fine-tune `model` on the labelled pieces with the transformers Trainer; the mean loss of the last epoch."""
    # a piece none of whose positions carries a label teaches nothing (and alone would make a NaN loss)
    examples = [{"input_ids": piece.input_ids, "labels": labels}
                for piece, labels in zip(pieces, piece_labels) if any(label >= 0 for label in labels)]
    if not examples:
        raise ConfigError("no training word got a token to carry its label; check the training split and "
                          "the tokenizer.")
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory(prefix="langswap-finetune-") as scratch:
        args = TrainingArguments(
            output_dir=scratch, num_train_epochs=config.epochs, per_device_train_batch_size=config.batch_size,
            learning_rate=config.learning_rate, weight_decay=config.weight_decay, lr_scheduler_type="linear",
            warmup_steps=0, max_grad_norm=1.0, optim="adamw_torch", seed=config.seed,
            logging_strategy="epoch", save_strategy="no", eval_strategy="no", report_to="none",
            disable_tqdm=not progress, remove_unused_columns=False, use_cpu=device.type == "cpu",
            dataloader_pin_memory=device.type != "cpu")
        trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=_LabelledCollator(pad_id))
        if not progress:
            trainer.remove_callback(PrinterCallback)  # it prints every log line when there is no progress bar
        trainer.train()
    model.eval()
    # logged once per epoch: the last entry is the mean loss of the last epoch
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return float(losses[-1])


@torch.no_grad()
def _predict(model, encoded, label_ids, prefix, suffix, context, causal, label_token, batch_size, pad_id, device,
             progress: bool) -> list[list[int]]:
    """Per test sentence, the predicted label id of each word (-1 for a word without a token), read at the same
    token of each word as training labelled (`label_token`)."""
    pieces, _, predicted_at = _labelled_pieces(encoded, label_ids, prefix, suffix, context, causal, label_token)
    order = sorted(range(len(pieces)), key=lambda index: len(pieces[index].input_ids))
    pieces = [pieces[index] for index in order]
    predicted_at = [predicted_at[index] for index in order]
    predicted = [[-1] * sentence.n_words for sentence in encoded]
    bar = progress_bar(progress, len(pieces), "tagging")
    for start, (batch, input_ids, attention) in zip(range(0, len(pieces), batch_size),
                                                    batches(pieces, batch_size, pad_id)):
        best = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits.argmax(dim=-1).cpu()
        for row, piece in enumerate(batch):
            for position, word in predicted_at[start + row]:
                predicted[piece.sentence][word] = int(best[row, position])
        if bar is not None:
            bar.update(len(batch))
    if bar is not None:
        bar.close()
    return predicted


def _save(model, tokenizer, output: Path, overwrite: bool, record: dict) -> None:
    with atomic_directory(output, overwrite) as folder, transformers_bars(False):
        model.save_pretrained(folder)
        save_tokenizer(tokenizer, folder)
        record = {"langswap_version": __version__, **record}
        (folder / "finetune.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
