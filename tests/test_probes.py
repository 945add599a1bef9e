"""Readers of labelled sentences, word features, logistic regression and the POS probe, against known answers."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import (SHARED_DATA, WORDS, byte_level_tokenizer, english_lines, roberta_tokenizer, save_model,
                      sentencepiece_tokenizer, tagged_sentences, tiny_model, wordpiece_tokenizer, write_conllu)
from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError
from langswap.evaluation import (ProbeConfig, Sentence, pos_probe, read_conll_columns, read_conllu,
                                 train_logistic_regression, word_features)
from langswap.evaluation.probes import window_spans

# -- CoNLL-U --------------------------------------------------------------------------------------------------------

CONLLU = """# newdoc id = d1
# sent_id = s1
# text = Zum Haus gehen wir.
1-2\tZum\t_\t_\t_\t_\t_\t_\t_\t_
1\tZu\tzu\tADP\tAPPR\t_\t3\tcase\t_\t_
2\tdem\tder\tDET\tART\t_\t3\tdet\t_\t_
3\tHaus\tHaus\tNOUN\tNN\t_\t4\tobl\t_\t_
4\tgehen\tgehen\tVERB\tVVFIN\t_\t0\troot\t_\t_
4.1\tgehen\tgehen\tVERB\tVVFIN\t_\t_\t_\t3:conj\t_
5\twir\twir\tPRON\tPPER\t_\t4\tnsubj\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t$.\t_\t4\tpunct\t_\t_

# sent_id = s2
1\tJa\tja\tINTJ\tITJ\t_\t0\troot\t_\t_
"""  # the last sentence has no blank line after it


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_conllu_skips_comments_ranges_and_empty_nodes(tmp_path):
    sentences = read_conllu(write(tmp_path / "a.conllu", CONLLU))
    assert [(s.words, s.tags) for s in sentences] == [
        (["Zu", "dem", "Haus", "gehen", "wir", "."], ["ADP", "DET", "NOUN", "VERB", "PRON", "PUNCT"]),
        (["Ja"], ["INTJ"])]
    with gzip.open(tmp_path / "a.conllu.gz", "wt", encoding="utf-8") as handle:
        handle.write(CONLLU.replace("\n", "\r\n"))  # Windows line ends too
    assert read_conllu(tmp_path / "a.conllu.gz") == sentences
    (tmp_path / "bom.conllu").write_bytes(b"\xef\xbb\xbf" + CONLLU.encode("utf-8"))  # a byte-order mark first
    assert read_conllu(tmp_path / "bom.conllu") == sentences


WORD_LINE = "3\tHaus\tHaus\tNOUN\tNN\t_\t4\tobl\t_\t_"


@pytest.mark.parametrize("line, problem", [
    ("3\tHaus\tHaus\tNOUN\tNN\t_\t4\tobl\t_", "9 tab-separated columns instead of 10"),
    ("3 Haus Haus NOUN NN _ 4 obl _ _", "1 tab-separated column instead of 10"),
    ("x\tHaus\tHaus\tNOUN\tNN\t_\t4\tobl\t_\t_", "ID 'x' is not a word number"),
    ("3-a\tHaus\tHaus\tNOUN\tNN\t_\t4\tobl\t_\t_", "ID '3-a' is neither"),
    ("3\t\tHaus\tNOUN\tNN\t_\t4\tobl\t_\t_", "FORM (column 2) is empty"),
    ("3\tHaus\tHaus\t\tNN\t_\t4\tobl\t_\t_", "UPOS (column 4) is empty"),
    ("3\tHaus\tHaus\t_\tNN\t_\t4\tobl\t_\t_", "UPOS (column 4) is '_'"),
])
def test_malformed_conllu_line_names_file_line_and_problem(tmp_path, line, problem):
    text = "# sent_id = 1\n1\tDas\tder\tDET\tART\t_\t2\tdet\t_\t_\n\n" + line + "\n" + WORD_LINE + "\n"
    path = write(tmp_path / "bad.conllu", text)
    with pytest.raises(ResourceFormatError) as error:
        read_conllu(path)
    message = str(error.value)
    assert "bad.conllu' line 4:" in message
    assert problem in message
    assert "10 tab-separated columns, ID FORM LEMMA UPOS" in message  # what a line should look like


def test_empty_or_absent_conllu_is_a_clear_error(tmp_path):
    with pytest.raises(ResourceFormatError, match="has no sentences"):
        read_conllu(write(tmp_path / "empty.conllu", "# only a comment\n\n"))
    with pytest.raises(MissingResourceError, match="does not exist"):
        read_conllu(tmp_path / "absent.conllu")
    (tmp_path / "latin1.conllu").write_bytes("1\tH\xe4user\t_\tNOUN\t_\t_\t_\t_\t_\t_\n".encode("latin-1"))
    with pytest.raises(ResourceFormatError, match="not UTF-8: line 1"):
        read_conllu(tmp_path / "latin1.conllu")


# -- CoNLL-2003 columns ----------------------------------------------------------------------------------------------

CONLL2003 = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

"""


def test_read_conll_columns(tmp_path):
    path = write(tmp_path / "ner.txt", CONLL2003)
    assert [(s.words, s.tags) for s in read_conll_columns(path)] == [
        (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]), (["Peter", "Blackburn"], ["B-PER", "I-PER"])]
    chunks = read_conll_columns(path, token_column=0, tag_column=2)
    assert chunks[1].tags == ["B-NP", "I-NP"]


@pytest.mark.parametrize("line, problem", [
    ("Peter NNP B-NP", "3 columns where the first word line had 4"),
    ("Peter", "1 column but"),
])
def test_malformed_column_line_names_line(tmp_path, line, problem):
    path = write(tmp_path / "bad.txt", "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n" + line + "\n")
    with pytest.raises(ResourceFormatError) as error:
        read_conll_columns(path)
    assert "bad.txt' line 4:" in str(error.value) and problem in str(error.value)
    with pytest.raises(ResourceFormatError, match="has no sentences"):
        read_conll_columns(write(tmp_path / "docstart-only.txt", "-DOCSTART- -X- -X- O\n\n"))


# -- logistic regression -----------------------------------------------------------------------------------------------

def test_logistic_regression_separates_separable_data():
    generator = torch.Generator().manual_seed(0)
    true_weight = torch.randn(6, 4, generator=generator)
    points = torch.randn(1200, 6, generator=generator) * 3 + 5  # not centred, not unit scale
    scores = (points - 5) @ true_weight
    top2 = scores.topk(2, dim=1).values
    points, labels = points[top2[:, 0] - top2[:, 1] > 0.5], scores.argmax(dim=1)[top2[:, 0] - top2[:, 1] > 0.5]
    half = len(points) // 2
    classifier = train_logistic_regression(points[:half], labels[:half])  # the defaults
    assert (classifier.predict(points[:half]) == labels[:half]).float().mean() == 1.0
    assert (classifier.predict(points[half:]) == labels[half:]).float().mean() == 1.0
    again = train_logistic_regression(points[:half], labels[:half])
    assert torch.equal(classifier.weight, again.weight)  # deterministic


def test_logistic_regression_without_signal_predicts_the_majority():
    labels = torch.tensor([2] * 50 + [0] * 30 + [1] * 20)
    constant = torch.ones(100, 5) * 3.0
    classifier = train_logistic_regression(constant, labels, num_classes=4)
    assert classifier.predict(constant).tolist() == [2] * 100  # accuracy = majority rate 0.5
    probabilities = torch.softmax(classifier.logits(constant[:1]), dim=1)[0]
    assert torch.allclose(probabilities, torch.tensor([0.3, 0.2, 0.5, 0.0]), atol=2e-3)  # the class frequencies
    noise = torch.randn(100, 5, generator=torch.Generator().manual_seed(1))  # labels independent of the features
    heavily_penalised = train_logistic_regression(noise, labels, l2=100.0)
    assert heavily_penalised.predict(torch.randn(50, 5)).tolist() == [2] * 50


# -- word features ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lines():
    return english_lines(300)


def hand_grouping(tokenizer, words: list[str], ids: list[int]) -> list[list[int]]:
    """Per word, the indices of its content tokens, found by decoding tokens one by one (not from offsets)."""
    groups: list[list[int]] = [[] for _ in words]
    word, used = 0, 0
    for index, token in enumerate(ids):
        piece = tokenizer.decode([token]).strip().removeprefix("##").lower()
        if not piece:
            continue  # a token for the space alone
        assert words[word][used:used + len(piece)].lower() == piece, (words[word], piece)
        groups[word].append(index)
        used += len(piece)
        if used == len(words[word]):
            word, used = word + 1, 0
    assert word == len(words)
    return groups


@pytest.mark.parametrize("kind, builder, layer", [
    ("gpt2", byte_level_tokenizer, -1), ("gpt2", byte_level_tokenizer, 1),
    ("bert", wordpiece_tokenizer, -1), ("bert", wordpiece_tokenizer, 0),
    ("llama", sentencepiece_tokenizer, -1), ("roberta", roberta_tokenizer, 2)])
def test_word_features_are_means_of_their_tokens_states(lines, kind, builder, layer):
    tokenizer = builder(lines)
    model = tiny_model(kind, len(tokenizer))
    words = "The gentle teacher was reading letters by candlelight".split()
    content = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
    if kind == "gpt2":  # the tokenizer adds nothing; a causal LM gets bos first, as in perplexity
        ids, first = [tokenizer.bos_token_id] + content, 1
    elif kind == "llama":  # the fixture's SentencePiece tokenizer adds no <s> either
        ids, first = [tokenizer.bos_token_id] + content, 1
    else:  # [CLS] ... [SEP], <s> ... </s> from the tokenizer's post-processor
        ids, first = [tokenizer.cls_token_id] + content + [tokenizer.sep_token_id], 1
        assert tokenizer(" ".join(words))["input_ids"] == ids
    groups = hand_grouping(tokenizer, words, content)
    assert any(len(group) > 1 for group in groups)  # some word has several tokens
    with torch.no_grad():
        states = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[layer][0]
    expected = torch.stack([states[[first + index for index in group]].mean(dim=0) for group in groups])
    features = word_features(model, tokenizer, [Sentence(words, ["X"] * len(words))], layer=layer, batch_size=1)
    assert features.shape == (len(words), model.config.hidden_size) and features.dtype == torch.float32
    assert torch.allclose(features, expected, atol=1e-6, rtol=0)


def test_word_features_do_not_depend_on_batching_and_keep_float32(lines):
    tokenizer = wordpiece_tokenizer(lines)
    model = tiny_model("bert", len(tokenizer))
    sentences = [Sentence(line.split(), ["X"] * len(line.split())) for line in lines[:20]]
    one_by_one = torch.cat([word_features(model, tokenizer, [sentence]) for sentence in sentences])
    batched = word_features(model, tokenizer, sentences, batch_size=7)
    assert batched.shape == (sum(len(s) for s in sentences), 32)
    assert torch.allclose(batched, one_by_one, atol=1e-5, rtol=0)
    half = word_features(model.to(torch.bfloat16), tokenizer, sentences[:3])
    assert half.dtype == torch.float32 and torch.allclose(half, one_by_one[:len(half)], atol=0.1)


def test_a_word_without_tokens_gets_its_sentences_mean(lines):
    tokenizer = wordpiece_tokenizer(lines)  # BERT's normaliser deletes control characters: "\x01" gets no token
    model = tiny_model("bert", len(tokenizer))
    words = ["the", "\x01", "river"]
    ids = tokenizer(" ".join(words))["input_ids"]
    assert len(ids) == 4  # [CLS] the river [SEP]
    with torch.no_grad():
        states = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
    features = word_features(model, tokenizer, [Sentence(words, ["X"] * 3)])
    assert torch.allclose(features[0], states[1], atol=1e-6) and torch.allclose(features[2], states[2], atol=1e-6)
    assert torch.allclose(features[1], states[1:3].mean(dim=0), atol=1e-6)  # specials excluded


def test_window_spans_keep_every_token_once():
    assert window_spans(3, 4, causal=True) == [(0, 3, 0, 3)]
    assert window_spans(10, 4, causal=True) == [(0, 4, 0, 4), (2, 6, 4, 6), (4, 8, 6, 8), (6, 10, 8, 10)]
    assert window_spans(10, 4, causal=False) == [(0, 4, 0, 3), (2, 6, 3, 5), (4, 8, 5, 7), (6, 10, 7, 10)]
    assert window_spans(10, 4, causal=False, stride=1)[:3] == [(0, 4, 0, 2), (1, 5, 2, 3), (2, 6, 3, 4)]
    for length in range(1, 40):
        for room in range(1, 12):
            for causal in (True, False):
                for stride in [None, *range(1, room + 1)]:
                    kept = []
                    for start, stop, keep_from, keep_to in window_spans(length, room, causal, stride):
                        assert start <= keep_from <= keep_to <= stop and stop - start <= room
                        kept.extend(range(keep_from, keep_to))
                    assert kept == list(range(length))
    # a bidirectional window keeps its middle: context on both sides of every token away from the text's ends
    for start, stop, keep_from, keep_to in window_spans(100, 20, causal=False, stride=10)[1:-1]:
        assert keep_from - start >= 5 and stop - keep_to >= 5


def test_long_sentences_are_windowed_not_cut(lines):
    tokenizer = byte_level_tokenizer(lines)
    model = tiny_model("gpt2", len(tokenizer))
    words = " ".join(lines[:6]).split()
    sentence = Sentence(words, ["X"] * len(words))
    full = word_features(model, tokenizer, [sentence])
    windowed = word_features(model, tokenizer, [sentence], max_length=24)
    assert windowed.shape == full.shape and torch.isfinite(windowed).all()
    # a causal model sees the same left context in the first window as in the whole sentence: words whose tokens
    # all lie among the first 23 content tokens (24 minus bos) keep their features exactly
    offsets = tokenizer(" ".join(words), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    end_of_window, position, words_in_first_window = offsets[22][1], 0, 0
    for word in words:
        position += len(word)
        if position > end_of_window:
            break
        words_in_first_window += 1
        position += 1
    assert words_in_first_window >= 3
    assert torch.allclose(windowed[:words_in_first_window], full[:words_in_first_window], atol=1e-5, rtol=0)
    assert not torch.allclose(windowed[-3:], full[-3:], atol=1e-3)  # later words lost some left context


def test_bad_layer_is_a_config_error(lines):
    tokenizer = byte_level_tokenizer(lines)
    model = tiny_model("gpt2", len(tokenizer))
    with pytest.raises(ConfigError, match="layer 5 does not exist: the model has 2 layers"):
        word_features(model, tokenizer, [Sentence(["a"], ["X"])], layer=5)


# -- the POS probe ------------------------------------------------------------------------------------------------------

VOCABULARY = WORDS[:24]
TAGS = ("DET", "NOUN", "VERB", "ADJ")
TAG_OF = {word: TAGS[index % len(TAGS)] if index % 5 else "NOUN" for index, word in enumerate(VOCABULARY)}


def synthetic_sentences(count: int, seed: int) -> list[Sentence]:
    return tagged_sentences(count, seed, TAG_OF, (3, 9))


def test_probe_recovers_a_tag_that_is_a_function_of_the_word(tmp_path):
    train, test = synthetic_sentences(120, seed=0), synthetic_sentences(40, seed=1)
    test.append(Sentence(["zebra", "the", "zebra"], ["X", TAG_OF["the"], "X"]))  # a tag never seen in training
    tokenizer = sentencepiece_tokenizer([" ".join(s.words) for s in train] + ["zebra"] * 5, vocab_size=300)
    # layer 0 of Llama is the token embedding alone (no position term): random 32-dimensional rows, one per word,
    # so any function of the word is linearly separable
    folder = save_model(tiny_model("llama", len(tokenizer)), tokenizer, tmp_path / "model")
    result = pos_probe(folder, write_conllu(tmp_path / "train.conllu", train), write_conllu(tmp_path / "test.conllu",
                                                                                             test),
                       ProbeConfig(layer=0))
    test_tags = [tag for sentence in test for tag in sentence.tags]
    train_tags = [tag for sentence in train for tag in sentence.tags]
    top = Counter(train_tags).most_common(1)[0][0]
    assert result.majority_tag == top == "NOUN"
    assert result.majority_baseline == pytest.approx(test_tags.count(top) / len(test_tags))
    assert result.accuracy == pytest.approx(1 - 2 / len(test_tags))  # only the two "zebra" words are wrong
    assert result.accuracy_seen_words == 1.0 and result.seen_words == len(test_tags) - 2
    assert result.unseen_tags == {"X": 2}
    assert (result.train_sentences, result.train_words, result.test_sentences, result.test_words, result.tags) == (
        len(train), len(train_tags), len(test), len(test_tags), 4)
    assert result.as_dict()["unseen_tags"] == {"X": 2}
    assert result.majority_baseline < 0.5 < result.accuracy


def test_probe_takes_a_loaded_model_and_sentences(lines):
    tokenizer = byte_level_tokenizer(lines)
    model = tiny_model("gpt2", len(tokenizer))
    train, test = synthetic_sentences(60, seed=2), synthetic_sentences(20, seed=3)
    result = pos_probe(model, train, test, ProbeConfig(max_sentences=30), tokenizer=tokenizer)
    assert result.train_sentences == 30 and result.test_sentences == 20
    assert result.accuracy > result.majority_baseline
    with pytest.raises(ConfigError, match="no tokenizer"):
        pos_probe(model, train, test)
    with pytest.raises(ConfigError, match="max_iter must be at least 1"):
        ProbeConfig(max_iter=0)


@pytest.mark.shared_data
@pytest.mark.skipif(not (SHARED_DATA / "ud" / "de_gsd-ud-dev.conllu").is_file(), reason="../shared/data is absent")
def test_probe_on_german_gsd_beats_the_majority_baseline():
    train = read_conllu(SHARED_DATA / "ud" / "de_gsd-ud-dev.conllu")[:100]
    test = read_conllu(SHARED_DATA / "ud" / "de_gsd-ud-test.conllu")[:100]
    tokenizer = byte_level_tokenizer([" ".join(s.words) for s in train], vocab_size=1000)
    model = tiny_model("gpt2", len(tokenizer))  # random weights: the states still identify the tokens
    result = pos_probe(model, train, test, tokenizer=tokenizer)
    assert result.tags >= 14 and result.test_words > 1000
    # measured: 0.44 against a majority baseline of 0.17 (NOUN)
    assert result.accuracy > result.majority_baseline + 0.15


@pytest.mark.parametrize("scheme", ["always", "first"])
def test_a_stand_alone_space_marker_belongs_to_no_word(scheme):
    """Metaspace tokenizers give a leading "\u2581" that does not merge with the next character the offsets of that
    character; it must not be pooled into (or label) the first word."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from langswap.evaluation.probes import encode_sentences

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    backend.train_from_iterator(["the dogs run fast", "dogs and cats", "a dog"] * 50, trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<unk>"], show_progress=False, initial_alphabet=list("\u25810123456789")))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    [encoded] = encode_sentences(tokenizer, [Sentence(["3", "dogs", "4"], ["NUM", "NOUN", "NUM"])])
    pieces = tokenizer.convert_ids_to_tokens(encoded.ids)
    assert pieces[:2] == ["\u2581", "3"]  # the marker did not merge with the digit
    words_of = dict(zip(range(len(pieces)), encoded.token_words))
    assert words_of[0] == () and words_of[1] == (0,)
    assert encoded.first_tokens()[0] == 1
    assert all(words == () for piece, words in zip(pieces, encoded.token_words) if piece == "\u2581")
