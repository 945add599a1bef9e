"""Tokenizers of every model family, built in code with the pipeline settings their Hub files have (normaliser,
pre-tokeniser, decoder, post-processor, added tokens, chat template) on a small vocabulary trained here.

- gemma3: Gemma-3's tokenizer.json. BPE with byte fallback; Replace(" ", "▁"), then Split(" "), which never fires;
  no ▁ before the first word; 5 role tokens, `[multimodal]`, `<unusedN>`, turn tokens, `\\n` runs, image tokens.
- llama2: Llama-2's. BPE with byte fallback; Prepend("▁") + Replace(" ", "▁"), no pre-tokeniser; `<s>` prepended.
- mistral: Mistral-7B's. BPE with byte fallback; Metaspace (prepend always, split false).
- llama3: Llama-3's. Byte-level BPE with ignore_merges and Llama-3's split regex (three-digit numbers); its added
  tokens (`<|begin_of_text|>` prepended, reserved tokens) after the pieces.
- qwen2: Qwen2.5's and Qwen3's. Byte-level BPE; NFC, Qwen's split regex (single digits); `<|im_start|>` chat
  template; added tokens after the pieces.
- gpt2: GPT-2's. Byte-level BPE with GPT-2's regex.
- bert: BERT's. WordPiece; BertNormalizer (lower-casing), BertPreTokenizer, `[CLS] $A [SEP]`, `[unusedN]`.
- xlmr: XLM-R's. Unigram; Metaspace (split), `<s> $A </s>`.

The source vocabularies follow their family's conventions as the real ones do (a SentencePiece vocabulary is trained
with splits before ▁, at digits and at punctuation, as the SentencePiece trainer's options made the real ones).
"""

from __future__ import annotations

import json
import random

from conftest import WORDS, byte_level_tokenizer, wordpiece_tokenizer

ORDER = ("gemma3", "llama2", "mistral", "llama3", "qwen2", "gpt2", "bert", "xlmr")
SENTENCEPIECE_FAMILIES = ("gemma3", "llama2", "mistral", "xlmr")

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")
GEMMA_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<start_of_turn>{{ 'model' if message['role'] == "
                  "'assistant' else message['role'] }}\n{{ message['content'] }}<end_of_turn>\n{% endfor %}"
                  "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
                   "<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>{% endfor %}")
QWEN_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GREEK = "καλημέρα θάλασσα ουρανός".split()
CYRILLIC = "привет город книга".split()

# Text in several scripts, with numbers and punctuation, for round trips.
ROUND_TRIP = ["The mother read 2024 letters (see p. 17), e.g. about bread; then: silence!",
              "Die Mütter lasen 1999 Briefe über Straßen, Brücken und Gärten.",
              "καλημέρα θάλασσα — привет город книга.",
              "two  spaces,\ttab and 3.14159 with $5 and 100% ünïcödé",
              "漢字 かな 🙂 ok"]


def mixed_lines(count: int = 1200, seed: int = 0) -> list[str]:
    """Sentences of WORDS with numbers, punctuation and a few Greek and Cyrillic words."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(WORDS))]
    lines = []
    for _ in range(count):
        words = rng.choices(WORDS, weights=weights, k=rng.randint(6, 14))
        if rng.random() < 0.4:
            words.insert(rng.randrange(len(words)), str(rng.choice([7, 12, 42, 365, 1999, 2024, 31415])))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"({rng.randint(1, 9)})")
        if rng.random() < 0.2:
            words.append(rng.choice(GREEK + CYRILLIC))
        line = " ".join(words)
        line = line.replace(" ", ", ", 1) if rng.random() < 0.5 else line
        lines.append(line.capitalize() + rng.choice([".", "!", "?", ":", "."]))
    return lines


def _sentencepiece_vocabulary(lines: list[str], size: int, specials: list[str], prepend: bool):
    """A byte-fallback BPE vocabulary trained as the SentencePiece trainer trains one (split before ▁, at digits and
    at punctuation), `specials` first, the 256 byte entries after the pieces."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    steps = [normalizers.Prepend("▁")] if prepend else []
    tokenizer.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("▁", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"▁?[[\p{P}\p{S}]&&\p{Common}&&[^▁]]+"), behavior="isolated"),
        pre_tokenizers.Split(Regex("[0-9]"), behavior="isolated")])
    trainer = trainers.BpeTrainer(vocab_size=size, show_progress=False,
                                  special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials])
    tokenizer.train_from_iterator(lines, trainer)
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    return spec


def _added(content: str, token_id: int, special: bool = True) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def _wrap(spec: dict, **kwargs):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **kwargs)


def _gemma3(lines, size):
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"] + [f"<unused{i}>" for i in range(12)] + [
        "<start_of_turn>", "<end_of_turn>", "\n", "\n\n", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    spec = _sentencepiece_vocabulary(lines, size, specials, prepend=False)
    plain = {"[multimodal]", "\n", "\n\n"} | {f"<unused{i}>" for i in range(12)}
    spec["added_tokens"] = [_added(s, i, special=s not in plain) for i, s in enumerate(specials)]
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                             "invert": False}
    spec["decoder"] = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    spec["post_processor"] = _template("<bos>", 2)
    return _wrap(spec, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                 chat_template=GEMMA_TEMPLATE)


def _template(bos: str, bos_id: int) -> dict:
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


_LLAMA2_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def _llama2(lines, size):
    spec = _sentencepiece_vocabulary(lines, size, ["<unk>", "<s>", "</s>"], prepend=True)
    spec["added_tokens"] = [_added(s, i) for i, s in enumerate(["<unk>", "<s>", "</s>"])]
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    spec["pre_tokenizer"] = None
    spec["decoder"] = _LLAMA2_DECODER
    spec["post_processor"] = _template("<s>", 1)
    return _wrap(spec, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _mistral(lines, size):
    spec = _sentencepiece_vocabulary(lines, size, ["<unk>", "<s>", "</s>"], prepend=True)
    spec["added_tokens"] = [_added(s, i) for i, s in enumerate(["<unk>", "<s>", "</s>"])]
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    spec["decoder"] = _LLAMA2_DECODER
    spec["post_processor"] = _template("<s>", 1)
    return _wrap(spec, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _byte_level(lines, size, split: str, added: list[str], normalizer=None, ignore_merges=False):
    """Byte-level BPE with `added` tokens after its pieces, as Llama-3's follow its 128,000 and Qwen's its 151,643
    (so a replacement, which puts them first, moves their ids)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer == "NFC":
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(lines, trainer)
    spec = json.loads(tokenizer.to_str())
    pieces = len(spec["model"]["vocab"])
    spec["added_tokens"] = [_added(token, pieces + offset) for offset, token in enumerate(added)]
    return spec


def _llama3(lines, size):
    added = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(6)] + [
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    spec = _byte_level(lines, size, LLAMA3_SPLIT, added, ignore_merges=True)
    bos = spec["added_tokens"][0]["id"]
    spec["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        _template("<|begin_of_text|>", bos)]}
    return _wrap(spec, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", chat_template=LLAMA3_TEMPLATE)


def _qwen2(lines, size):
    added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|vision_start|>"]
    spec = _byte_level(lines, size, QWEN_SPLIT, added, normalizer="NFC")
    return _wrap(spec, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=QWEN_TEMPLATE)


def _bert(lines, size):
    return wordpiece_tokenizer(lines, size, unused=5)


def _xlmr(lines, size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=size, special_tokens=specials,
                                                                 unk_token="<unk>", show_progress=False))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return _wrap(json.loads(tokenizer.to_str()), bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                 pad_token="<pad>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")


BUILDERS = {"gemma3": _gemma3, "llama2": _llama2, "mistral": _mistral, "llama3": _llama3, "qwen2": _qwen2,
            "gpt2": byte_level_tokenizer, "bert": _bert, "xlmr": _xlmr}


def family_tokenizer(family: str, lines: list[str] | None = None, size: int = 600):
    """The `family`'s tokenizer with a vocabulary of about `size` pieces (plus its byte entries and added tokens)."""
    return BUILDERS[family](lines or mixed_lines(), size)


# -- tiny random-weight models of each architecture -------------------------------------------------------------------

ARCHITECTURES = {  # tokenizer family -> the model class users bring it with
    "gemma3": "Gemma3ForCausalLM",  # tied embeddings, scaled by sqrt(hidden size) inside the embedding layer
    "llama3": "LlamaForCausalLM",  # untied head
    "qwen2": "Qwen2ForCausalLM",  # more embedding rows than tokens
    "mistral": "MistralForCausalLM",  # a Llama-2-style SentencePiece tokenizer
    "gpt2": "GPT2LMHeadModel",
    "bert": "BertForMaskedLM",
    "xlmr": "XLMRobertaForMaskedLM",
}


def has_architecture(family: str) -> bool:
    import transformers

    return hasattr(transformers, ARCHITECTURES[family])


def family_model(family: str, tokenizer, seed: int = 0, initializer_range: float = 0.02):
    """A tiny random-weight model of the family's architecture for `tokenizer` (Qwen2: rows up to a multiple of 64
    beyond the tokenizer's, as Qwen's checkpoints have). A large `initializer_range` makes its loss depend on the
    scale of its inputs, which the default's small blocks hardly change."""
    import torch
    import transformers

    torch.manual_seed(seed)
    size = len(tokenizer)
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=128, initializer_range=initializer_range)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    if family == "gemma3":
        config = transformers.Gemma3TextConfig(vocab_size=size, head_dim=16, num_key_value_heads=1,
                                               sliding_window=16, tie_word_embeddings=True, **small, **ids)
        model = transformers.Gemma3ForCausalLM(config)
    elif family == "llama3":
        config = transformers.LlamaConfig(vocab_size=size, num_key_value_heads=2, tie_word_embeddings=False,
                                          **small, **ids)
        model = transformers.LlamaForCausalLM(config)
    elif family == "qwen2":
        config = transformers.Qwen2Config(vocab_size=-(-size // 64) * 64 + 64, num_key_value_heads=1,
                                          tie_word_embeddings=True, **small, **ids)
        model = transformers.Qwen2ForCausalLM(config)
    elif family == "mistral":
        config = transformers.MistralConfig(vocab_size=size, num_key_value_heads=1, sliding_window=None,
                                            tie_word_embeddings=False, **small, **ids)
        model = transformers.MistralForCausalLM(config)
    elif family == "gpt2":
        config = transformers.GPT2Config(vocab_size=size, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                         initializer_range=initializer_range, **ids)
        model = transformers.GPT2LMHeadModel(config)
    elif family == "bert":
        config = transformers.BertConfig(vocab_size=size, **small, pad_token_id=tokenizer.pad_token_id)
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.XLMRobertaConfig(vocab_size=size, **{**small, "max_position_embeddings": 130},
                                               pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        model = transformers.XLMRobertaForMaskedLM(config)
    model.eval()
    return model


def relabelled(tokenizer, seed: int):
    """(the tokenizer with its model vocabulary's ids shuffled among themselves, added tokens where they were;
    permutation: source id -> target id of the same piece)."""
    import numpy as np

    from langswap.resources.tokenizer import with_tokenizer_json

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    added = {entry["id"] for entry in spec["added_tokens"]}
    movable = sorted(index for index in vocab.values() if index not in added)
    permutation = np.arange(len(tokenizer))
    permutation[movable] = np.random.default_rng(seed).permutation(movable)
    spec["model"]["vocab"] = {piece: int(permutation[index]) for piece, index in vocab.items()}
    return with_tokenizer_json(tokenizer, spec), permutation
