"""Word segmentation: languages written without spaces get a kept segmenter, so dictionary words are words."""

from __future__ import annotations

import pytest

from langswap.errors import ConfigError
from langswap.resources.segment import segmenter, segmenter_name

CHINESE = ["我是一个学生，我的父亲在银行工作。", "今天的天气很好，我们去公园散步吧。", "学生们在图书馆里看书。",
           "我的母亲是医生，她每天都很忙。", "这本书很有意思，我已经看了两遍。"]
# English-Chinese pairs whose Chinese words occur in the lines above
PAIRS = [("student", "学生"), ("bank", "银行"), ("weather", "天气"), ("park", "公园"), ("library", "图书馆"),
         ("doctor", "医生"), ("father", "父亲"), ("mother", "母亲"), ("book", "书"), ("today", "今天")]


def test_each_language_gets_its_segmenter_by_default():
    assert segmenter_name("auto", "zh") == "jieba" and segmenter_name("auto", "zh-Hans") == "jieba"
    assert segmenter_name("auto", "ja") == "fugashi" and segmenter_name("auto", "th") == "pythainlp"
    assert segmenter_name("auto", "de") == "words" and segmenter_name("auto", None) == "words"
    assert segmenter_name("words", "zh") == "words"  # a named segmenter wins over the language
    with pytest.raises(ConfigError, match="unknown word segmenter 'mecab'"):
        segmenter_name("mecab")


def test_dictionary_words_of_chinese_text_are_words():
    pytest.importorskip("jieba")
    split = segmenter("auto", "zh")
    words = {word for line in CHINESE for word in split(line)}
    found = [target for _, target in PAIRS if target in words]
    assert len(found) >= 8, f"only {found} of the dictionary's words are words of the text"
    assert "，" in words and "。" in words  # punctuation is a word of its own
    # without a segmenter a whole clause is one word, and no dictionary word is found
    plain = {word for line in CHINESE for word in segmenter("words")(line)}
    assert not [target for _, target in PAIRS if target in plain]


def test_a_missing_package_names_the_install(monkeypatch):
    import langswap.resources.segment as module

    def missing():
        raise ImportError("No module named 'fugashi'")

    monkeypatch.setitem(module._FACTORIES, "fugashi", missing)
    with pytest.raises(ConfigError, match="pip install fugashi unidic-lite"):
        segmenter("auto", "ja")


def test_fasttext_corpus_and_code_switching_use_the_segmenter(tmp_path):
    pytest.importorskip("jieba")
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.fasttext_train import prepare_corpus
    from langswap.resources.joint import JointConfig, write_code_switched_corpus

    (tmp_path / "zh.txt").write_text("\n".join(CHINESE * 4) + "\n", encoding="utf-8")
    (tmp_path / "en.txt").write_text("The student reads a book in the library.\nMy father works at the bank.\n"
                                     "My mother is a doctor.\nToday the weather is fine in the park.\n",
                                     encoding="utf-8")
    prepare_corpus(tmp_path / "zh.txt", tmp_path / "corpus.txt", segment=segmenter("auto", "zh"))
    assert "学生" in (tmp_path / "corpus.txt").read_text(encoding="utf-8").split()
    dictionary = Dictionary(PAIRS)
    made = write_code_switched_corpus(tmp_path / "en.txt", tmp_path / "zh.txt", dictionary, tmp_path / "joint.txt",
                                      JointConfig(heldout_words=0, target_segmenter="auto", target_language="zh"))
    assert made["covered_source_words"] >= 8 and made["switched"]["target"] > 0
    from langswap.errors import VocabularyError

    with pytest.raises(VocabularyError, match="no pair of dictionary"):  # unsegmented: no word in common
        write_code_switched_corpus(tmp_path / "en.txt", tmp_path / "zh.txt", dictionary, tmp_path / "joint2.txt",
                                   JointConfig(heldout_words=0))
