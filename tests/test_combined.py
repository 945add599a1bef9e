"""`combined`: evidence mixed by reliability, known answers on the ciphered language, optional resources."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import WORDS, byte_level_tokenizer, cipher_line, cipher_word, english_lines

from langswap.errors import ConfigError
from langswap.methods import Kind, TransferInputs, get_method, make_config, run_method
from langswap.methods.combined import Evidence, mix_evidence
from langswap.resources.dictionary import Dictionary
from langswap.resources.vectors import WordVectors
from langswap.tokens import Vocabulary


def test_each_row_mixes_the_evidence_it_has_normalised_over_it():
    spelling = Evidence("spelling", 1.0, [0, 1], [np.array([5, 6]), np.array([7])],
                        [np.array([0.5, 0.5]), np.array([1.0])])
    neighbours = Evidence("neighbours", 0.25, [1, 2], [np.array([7, 8]), np.array([9])],
                          [np.array([0.6, 0.4]), np.array([1.0])])
    translations = Evidence("translations", 1.0, [0], [np.array([6, 3])], [np.array([0.6, 0.4])])
    rows, lengths, sources, weights, strongest = mix_evidence(4, [spelling, neighbours, translations])
    assert rows.tolist() == [0, 1, 2] and lengths.tolist() == [3, 2, 1]
    # row 0: (spelling 1 x [5: .5, 6: .5] + translations 1 x [6: .6, 3: .4]) / 2
    assert sources[:3].tolist() == [3, 5, 6]
    assert weights[:3] == pytest.approx([0.2, 0.25, 0.55])
    # row 1: (1 x [7: 1] + 0.25 x [7: .6, 8: .4]) / 1.25; a source two kinds give appears once
    assert sources[3:5].tolist() == [7, 8]
    assert weights[3:5] == pytest.approx([(1 + 0.25 * 0.6) / 1.25, 0.25 * 0.4 / 1.25])
    # row 2 has only neighbours: they take the whole row, whatever their weight
    assert sources[5:].tolist() == [9] and weights[5:] == pytest.approx([1.0])
    assert strongest.tolist() == [2, 1, 1]  # the strongest kind of evidence each row has, by list order


@pytest.fixture(scope="module")
def cipher_world(cipher_vectors):
    from langswap.resources.alignment import align

    source = Vocabulary(byte_level_tokenizer(english_lines(), vocab_size=400))
    target = Vocabulary(byte_level_tokenizer([cipher_line(line) for line in english_lines(seed=1)], vocab_size=380))
    embeddings = torch.randn(len(source), 12, generator=torch.Generator().manual_seed(0))
    dictionary = Dictionary([(word, cipher_word(word)) for word in WORDS])
    alignment = align(WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"]),
                      dictionary)
    return source, target, embeddings, dictionary, alignment


def _inputs(world, **resources):
    source, target, embeddings, _, _ = world
    return TransferInputs(source, target, embeddings, resources=resources)


def _twin(source: Vocabulary, target: Vocabulary, row: int) -> int | None:
    from test_tiktotok import twin_of

    return twin_of(source, target[row])


def test_without_resources_it_is_fvt_row_for_row(cipher_world):
    combined = run_method(make_config("combined"), _inputs(cipher_world))
    fvt = run_method(make_config("fvt"), _inputs(cipher_world))
    assert np.array_equal(combined.mapping.kinds, fvt.mapping.kinds)
    # the same rows (a piece the spelling repeats is one source of twice the weight): equal up to summation order
    torch.testing.assert_close(combined.embeddings, fvt.embeddings, rtol=0, atol=1e-6)


def test_dictionary_words_lean_on_their_cipher_twin_and_keep_half_their_spelling(cipher_world):
    source, target, _, dictionary, _ = cipher_world
    inputs = _inputs(cipher_world, dictionary=dictionary)
    mapping = run_method(make_config("combined"), inputs).mapping
    fvt = run_method(make_config("fvt"), _inputs(cipher_world)).mapping
    checked = 0
    for row in mapping.rows_of(Kind.TRANSLATED):
        from test_tiktotok import decipher

        # the translation's first token as the source tokenizer spells it (the twin itself where it is one token)
        twin = source.encode_surface(decipher(target.word_text(int(row))), True)[0]
        sources, weights = mapping.row(int(row))
        spelled, spelled_weights = fvt.row(int(row))
        # one translation (weight 1 of the dictionary's 1) and the spelling (1): half each
        expected = {}
        for piece, weight in zip(spelled.tolist(), spelled_weights.tolist()):
            expected[piece] = expected.get(piece, 0.0) + 0.5 * weight
        expected[twin] = expected.get(twin, 0.0) + 0.5
        assert dict(zip(sources.tolist(), weights.tolist())) == pytest.approx(expected)
        checked += 1
    assert checked > 20
    others = mapping.kinds == Kind.SUBWORD
    assert others.any() and all(set(mapping.row(int(r))[0].tolist()) == set(fvt.row(int(r))[0].tolist())
                                for r in np.flatnonzero(others))


def test_aligned_neighbours_find_the_cipher_twin_and_weigh_as_the_alignment_retrieves(cipher_world):
    source, target, _, _, alignment = cipher_world
    from langswap.resources.kinds.vectors import AlignedVectors

    vectors = AlignedVectors(alignment.source, alignment.target, {"precision_at_1": 0.25})
    mapping = run_method(make_config("combined"), _inputs(cipher_world, vectors=vectors)).mapping
    fvt = run_method(make_config("fvt"), _inputs(cipher_world)).mapping
    mixed = mapping.rows_of(Kind.MIXED)
    checked = 0
    for row in mixed:
        twin = _twin(source, target, int(row))
        sources, weights = mapping.row(int(row))
        spelled = {}
        for piece, weight in zip(*(a.tolist() for a in fvt.row(int(row)))):
            spelled[piece] = spelled.get(piece, 0.0) + weight
        # neighbours have 0.25 / 1.25 of the row; the twin is their nearest, far ahead at temperature 0.1
        neighbour_share = {s: w - spelled.get(s, 0.0) / 1.25 for s, w in zip(sources.tolist(), weights.tolist())}
        assert sum(neighbour_share.values()) == pytest.approx(0.2, abs=1e-5)
        if twin is not None:  # the deciphered word is one source token
            assert max(neighbour_share, key=neighbour_share.get) == twin
            checked += 1
    assert checked > 20

    # no measured precision: the neighbours weigh nothing, with a warning saying how to use them
    unmeasured = AlignedVectors(alignment.source, alignment.target, {"alignment": "rotation.npy"})
    plain = run_method(make_config("combined"), _inputs(cipher_world, vectors=unmeasured)).mapping
    assert not (plain.kinds == Kind.MIXED).any()
    forced = run_method(make_config("combined", vectors_weight=0.25), _inputs(cipher_world, vectors=unmeasured))
    assert np.array_equal(forced.mapping.rows_of(Kind.MIXED), mixed)


def test_bad_weights_name_the_option():
    with pytest.raises(ConfigError, match="method.dictionary_weight = -1"):
        make_config("combined", dictionary_weight=-1)
    with pytest.raises(ConfigError, match="method.neighbors"):
        make_config("combined", neighbors=0)


def test_optional_resources_are_read_only_when_given(tmp_path, cipher_vectors):
    from langswap.config import from_dict
    from langswap.errors import MissingResourceError
    from langswap.methods.base import check_resources
    from langswap.transfer import TransferConfig

    spec = get_method("combined")
    dictionary = tmp_path / "en-xx.tsv"
    dictionary.write_text("".join(f"{w}\t{cipher_word(w)}\n" for w in WORDS), encoding="utf-8")
    bare = from_dict(TransferConfig, {"method": "combined"})
    assert spec.kinds(bare) == ()
    with_dictionary = from_dict(TransferConfig, {"method": "combined", "resources": {"dictionary": str(dictionary)}})
    assert spec.kinds(with_dictionary) == ("dictionary",)  # a dictionary alone is no word vectors
    full = from_dict(TransferConfig, {"method": "combined", "resources": {
        "dictionary": str(dictionary), "source_vectors": str(cipher_vectors["source"]),
        "target_vectors": str(cipher_vectors["target"])}})
    assert spec.kinds(full) == ("dictionary", "vectors")
    # a weight of 0 leaves a kind unread although the config gives it
    assert spec.kinds(from_dict(TransferConfig, {"method": {"name": "combined", "helper_weight": 0},
                                                 "resources": {"helper_model": "some-model"}})) == ()
    assert spec.kinds(from_dict(TransferConfig, {"method": "combined",
                                                 "resources": {"helper_model": "some-model"}})) == ("helper_model",)
    for weight, kinds in (("vectors_weight", ("dictionary",)), ("dictionary_weight", ("vectors",))):
        ignoring = from_dict(TransferConfig, {"method": {"name": "combined", weight: 0}, "resources": {
            "dictionary": str(dictionary), "source_vectors": str(cipher_vectors["source"]),
            "target_vectors": str(cipher_vectors["target"])}})
        assert spec.kinds(ignoring) == kinds
    # a bench names the options per variant: each variant reads what its own options use
    from langswap.bench import BenchConfig, _variant_kinds, expand_variants

    variants = ["combined", {"name": "combined", "label": "words only", "vectors_weight": 0}]
    bench = from_dict(BenchConfig, {"methods": variants,
                                    "resources": {"dictionary": str(dictionary),
                                                  "source_vectors": str(cipher_vectors["source"]),
                                                  "target_vectors": str(cipher_vectors["target"])}})
    assert [_variant_kinds(bench, variant) for variant in expand_variants(bench.methods)] == [
        ("dictionary", "vectors"), ("dictionary",)]
    # a resource given in part is an error, as for a method that requires it
    half = from_dict(TransferConfig, {"method": "combined", "resources": {
        "source_vectors": str(cipher_vectors["source"])}})
    with pytest.raises(MissingResourceError, match="resources.target_vectors"):
        check_resources(spec, half)


def test_transfer_records_the_evidence_it_used(tmp_path, gpt2_folder, target_tokenizer_folder, corpus_dir):
    from langswap.cli import main

    args = ["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer", str(target_tokenizer_folder),
            "--method", "combined", "--set", f"resources.dictionary={corpus_dir / 'en-xx.tsv'}",
            "--output", str(tmp_path / "out")]
    assert main(args) == 0
    record = json.loads((tmp_path / "out" / "langswap.json").read_text())
    assert record["resource_keys"] == {"dictionary": str(corpus_dir / "en-xx.tsv")}
    assert record["resources"]["dictionary"]["pairs"] == len(WORDS)
    assert record["counts"].get("translated", 0) > 0
    assert "\ttranslated\t" in (tmp_path / "out" / "provenance.tsv").read_text(encoding="utf-8")


def test_choose_takes_each_rows_heaviest_evidence_alone(cipher_world):
    source, target, _, dictionary, _ = cipher_world
    from test_tiktotok import decipher

    mapping = run_method(make_config("combined", mode="choose"), _inputs(cipher_world, dictionary=dictionary)).mapping
    translated = mapping.rows_of(Kind.TRANSLATED)
    assert len(translated) > 20
    for row in translated:  # a translation weighs as much as the spelling, and wins the tie
        sources, weights = mapping.row(int(row))
        assert sources.tolist() == [source.encode_surface(decipher(target.word_text(int(row))), True)[0]]
        assert weights.tolist() == [1.0]
    lighter = run_method(make_config("combined", mode="choose", dictionary_weight=0.5),
                         _inputs(cipher_world, dictionary=dictionary)).mapping
    assert not (lighter.kinds == Kind.TRANSLATED).any()  # the spelling outweighs the dictionary everywhere


def test_parallel_text_gives_its_translation_probabilities_as_evidence(cipher_world):
    pytest.importorskip("eflomal")
    from test_tiktotok import twin_of

    from langswap.resources.parallel import translation_table

    source, target, _, _, _ = cipher_world
    english = english_lines(800, seed=1)
    table = translation_table(english, [cipher_line(line) for line in english], source.tokenizer, target.tokenizer)
    chosen = run_method(make_config("combined", mode="choose", parallel_weight=1),
                        _inputs(cipher_world, translations=table)).mapping
    translated = chosen.rows_of(Kind.TRANSLATED)
    expected = [row for row in table.covered() if chosen.kinds[row] != Kind.COPIED and not target[int(row)].special]
    assert sorted(translated.tolist()) == sorted(int(row) for row in expected) and len(translated) > 20
    led = [int(sources[np.argmax(weights)]) == twin_of(source, target[int(row)])
           for row in translated for sources, weights in [chosen.row(int(row))]
           if twin_of(source, target[int(row)]) is not None]
    assert len(led) > 10 and np.mean(led) > 0.8
    for row in translated:  # choose takes the table's row as it is
        sources, weights = chosen.row(int(row))
        ids, probs = table.row(int(row))
        assert sorted(sources.tolist()) == sorted(ids.tolist())
        assert sorted(weights.tolist()) == pytest.approx(sorted(probs.tolist()), abs=1e-6)
    mixed = run_method(make_config("combined", mode="mix", parallel_weight=1),
                       _inputs(cipher_world, translations=table)).mapping
    row = int(translated[0])  # mixing: half the table's row, half the spelling
    sources, weights = mixed.row(row)
    ids, probs = table.row(row)
    assert mixed.kinds[row] == Kind.TRANSLATED and set(ids.tolist()) <= set(sources.tolist())
    assert float(weights.sum()) == pytest.approx(1.0, abs=1e-5)
    assert not (run_method(make_config("combined", mode="choose"),  # off by default
                           _inputs(cipher_world, translations=table)).mapping.kinds == Kind.TRANSLATED).any()


def test_a_shared_token_the_dictionary_translates_otherwise_is_a_false_friend(cipher_world):
    """German `die` is English `die` in spelling only: a copied token that is a dictionary word none of whose
    translations is itself gets its translations; one the dictionary gives as its own translation stays copied."""
    from langswap.methods.combined import false_friends

    source, target, _, _, _ = cipher_world
    copied = run_method(make_config("overlap"), _inputs(cipher_world)).mapping
    shared = [int(row) for row in copied.rows_of(Kind.COPIED) if target[int(row)].word_start
              and (text := target.word_text(int(row))) and text.isalpha()]
    assert len(shared) >= 2
    friend, same = (target.word_text(row) for row in shared[:2])
    dictionary = Dictionary([("castle", friend), (same, same)])
    assert false_friends(_inputs(cipher_world), np.asarray(shared), dictionary).tolist() == [shared[0]]
    mapping = run_method(make_config("combined", mode="choose"), _inputs(cipher_world, dictionary=dictionary)).mapping
    assert mapping.kinds[shared[0]] == Kind.TRANSLATED
    assert mapping.row(shared[0])[0].tolist() == [source.encode_surface("castle", True)[0]]
    assert mapping.kinds[shared[1]] == Kind.COPIED
    kept = run_method(make_config("combined", false_friends=False), _inputs(cipher_world, dictionary=dictionary))
    assert kept.mapping.kinds[shared[0]] == Kind.COPIED
    # the word is looked up as written: German `arm` (poor) stays a false friend although `Arm` translates as `arm`
    capitalised = Dictionary([("castle", friend), (friend, friend.title())])
    assert false_friends(_inputs(cipher_world), np.asarray(shared[:1]), capitalised).tolist() == [shared[0]]


def test_auto_offers_mix_and_choose_and_a_judge_keeps_the_lower_loss(cipher_world):
    dictionary = cipher_world[3]
    inputs = _inputs(cipher_world, dictionary=dictionary)
    mix = run_method(make_config("combined", mode="mix"), inputs)
    choose = run_method(make_config("combined", mode="choose"), inputs)
    alone = run_method(make_config("combined"), _inputs(cipher_world))  # what a transfer without the dictionary makes
    assert not torch.equal(mix.embeddings, choose.embeddings)
    # without a judge (no held-out text) the first candidate, mix, is kept, and the record says why
    default = run_method(make_config("combined"), inputs)
    assert torch.equal(default.embeddings, mix.embeddings)
    assert default.choice.chosen == "mix" and default.choice.candidates == ["mix", "choose", "spelling only"]
    assert default.choice.weights == {"mix": {"spelling": 1.0, "translations": 1.0},
                                      "choose": {"spelling": 1.0, "translations": 1.0},
                                      "spelling only": {"spelling": 1.0, "translations": 0.0}}

    def judged(losses):
        seen = []

        def judge(result):
            seen.append(result.embeddings.clone())
            return losses[len(seen) - 1]
        return run_method(make_config("combined"), inputs, judge=judge), seen

    result, seen = judged([2.0, 1.0, 3.0])
    assert torch.equal(seen[0], mix.embeddings) and torch.equal(seen[1], choose.embeddings)
    # the candidate without the dictionary is the transfer without it, false friends copied again
    assert torch.equal(seen[2], alone.embeddings)
    assert result.choice.as_dict() == {"chosen": "choose", "by": "held-out loss",
                                       "losses": {"mix": 2.0, "choose": 1.0, "spelling only": 3.0},
                                       "weights": default.choice.weights}
    assert "its evidence weights: spelling 1, translations 1" in result.choice.summary()
    assert torch.equal(result.embeddings, choose.embeddings)
    assert np.array_equal(result.mapping.kinds, choose.mapping.kinds)
    assert judged([1.0, 1.0, 1.0])[0].choice.chosen == "mix"  # a tie keeps the first
    nan = judged([float("nan"), 3.0, 4.0])[0]
    assert nan.choice.chosen == "choose" and nan.choice.losses["mix"] is None  # a NaN loss never wins
    dropped = judged([2.0, 2.0, 1.0])[0]  # a dictionary that does not help is left out
    assert dropped.choice.chosen == "spelling only" and torch.equal(dropped.embeddings, alone.embeddings)
    assert "translations 0" in dropped.choice.summary()
    # one kind of evidence: mix and choose agree, so there is one candidate and nothing to choose
    assert run_method(make_config("combined"), _inputs(cipher_world)).choice is None


def test_candidates_with_more_resources_include_every_candidate_with_fewer(cipher_world):
    """A resource given never takes a candidate away: with aligned vectors beside the dictionary, the candidates are
    both modes over every subset of the two, and those without the vectors are the dictionary-only transfer's, row
    for row."""
    from langswap.resources.kinds.vectors import AlignedVectors

    _, _, _, dictionary, alignment = cipher_world
    vectors = AlignedVectors(alignment.source, alignment.target, {"precision_at_1": 0.25})
    made = {}

    def judge(result):
        made[len(made)] = result.embeddings.clone()
        return 1.0

    both = run_method(make_config("combined"), _inputs(cipher_world, dictionary=dictionary, vectors=vectors),
                      judge=judge)
    names = list(both.choice.losses)
    assert names == ["mix", "choose", "mix without translations", "choose without translations",
                     "mix without neighbours", "choose without neighbours", "spelling only"]
    assert both.choice.weights["mix without neighbours"] == {"spelling": 1.0, "neighbours": 0.0, "translations": 1.0}
    assert both.choice.weights["mix"]["neighbours"] == 0.25
    fewer = []
    alone = run_method(make_config("combined"), _inputs(cipher_world, dictionary=dictionary),
                       judge=lambda result: fewer.append(result.embeddings.clone()) or 1.0)
    assert list(alone.choice.losses) == ["mix", "choose", "spelling only"]
    for index, embeddings in zip((4, 5, 6), fewer):
        assert torch.equal(made[index], embeddings)
    vectors_only = run_method(make_config("combined", mode="mix"), _inputs(cipher_world, vectors=vectors))
    assert torch.equal(made[2], vectors_only.embeddings)


def test_a_transfer_keeps_the_candidate_that_predicts_held_out_text_best(tmp_path, gpt2_folder,
                                                                          target_tokenizer_folder, corpus_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.cli import main
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.transfer import HELD_OUT_TOKENS

    text = corpus_dir / "xx.txt"
    base = ["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer", str(target_tokenizer_folder),
            "--set", f"resources.dictionary={corpus_dir / 'en-xx.tsv'}", "--set", f"calibration.text={text}",
            "--set", "held_out_lines=20"]
    assert main(base + ["--output", str(tmp_path / "auto")]) == 0
    record = json.loads((tmp_path / "auto" / "langswap.json").read_text())
    choice = record["method_choice"]
    # each candidate judged as it would be saved: calibrated (calibration is on with target text)
    assert choice["by"] == "held-out loss after calibration"
    assert set(choice["losses"]) == {"mix", "choose", "spelling only"}
    assert choice["weights"]["spelling only"] == {"spelling": 1.0, "translations": 0.0}
    assert choice["chosen"] == min(choice["losses"], key=choice["losses"].get)
    # and before calibration, from calibration's check on the same lines (put back here, so the same losses)
    assert list(choice["losses_uncalibrated"]) == list(choice["losses"])
    for candidate, loss in choice["losses"].items():
        assert choice["losses_uncalibrated"][candidate] == pytest.approx(loss, abs=1e-4)
    assert "- Candidates: kept " in (tmp_path / "auto" / "README.md").read_text(encoding="utf-8")
    # start rows for training beside the model only where it kept `mix`
    assert (choice["chosen"] == "mix") == (tmp_path / "auto" / "start-rows.safetensors").is_file()
    # the loss recorded is the saved model's on the last held_out_lines lines of the text (calibration, which the
    # tiny random model always puts back, leaves the rows as chosen)
    assert record["calibration"]["rows"] == 0
    held_out = text.read_text(encoding="utf-8").splitlines()[-20:]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "auto")
    score = causal_lm_score(model, AutoTokenizer.from_pretrained(tmp_path / "auto"), held_out,
                            max_length=HELD_OUT_TOKENS)
    assert score.nll / score.tokens == pytest.approx(choice["losses"][choice["chosen"]], abs=2e-5)
    # each mode alone gives the model of its candidate, and the candidate without the dictionary the transfer
    # without it
    for mode in ("mix", "choose"):
        assert main(base + ["--set", f"method.mode={mode}", "--output", str(tmp_path / mode)]) == 0
        assert json.loads((tmp_path / mode / "langswap.json").read_text())["method_choice"] is None
    alone = [part for part in base if "resources.dictionary" not in part]
    alone.remove("--set")
    assert main(alone + ["--output", str(tmp_path / "spelling only")]) == 0
    chosen = AutoModelForCausalLM.from_pretrained(tmp_path / choice["chosen"]).get_input_embeddings().weight
    assert torch.equal(model.get_input_embeddings().weight, chosen)
    plain = base + ["--set", "calibration.strength=0", "--output", str(tmp_path / "plain")]
    assert main(plain) == 0
    plain_choice = json.loads((tmp_path / "plain" / "langswap.json").read_text())["method_choice"]
    assert plain_choice["by"] == "held-out loss" and plain_choice["losses"] == choice["losses"]  # put back: the same
    # no held-out lines: the first candidate, with the reason
    assert main(base + ["--set", "held_out_lines=0", "--output", str(tmp_path / "none")]) == 0
    none = json.loads((tmp_path / "none" / "langswap.json").read_text())["method_choice"]
    assert none["chosen"] == "mix" and "no held-out target text" in none["by"]


@pytest.fixture(scope="module")
def helper_world():
    """A half-ciphered target language; `ideal` is the source model under the target tokenizer (each target token's
    row is the source row of its plain twin or of itself), `noise` a helper of random rows."""
    from test_clp import half_cipher_world
    from test_focus import CLEAR_WORDS

    from langswap.resources.kinds.helper import HelperModel

    source, target, embeddings, ideal = half_cipher_world()
    source_ids, target_ids = source.tokenizer.get_vocab(), target.tokenizer.get_vocab()
    for token, row in target_ids.items():
        if token in source_ids:
            ideal[row] = embeddings[source_ids[token]]
    twins = {}
    for word in CLEAR_WORDS:
        plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
        if plain in source_ids and plain in target_ids and ciphered in target_ids:
            ideal[target_ids[ciphered]] = embeddings[source_ids[plain]]
            twins[target_ids[ciphered]] = source_ids[plain]
    noise = torch.randn(len(target), 64, generator=torch.Generator().manual_seed(2))
    return source, target, embeddings, twins, HelperModel(ideal, None, "ideal"), HelperModel(noise, None, "noise")


def test_a_helper_counts_as_far_as_its_geometry_agrees_with_the_source_model(helper_world):
    from langswap.methods.combined import HELPER_SAMPLE, helper_agreement

    source, target, embeddings, twins, ideal, noise = helper_world
    copied = run_method(make_config("overlap"), TransferInputs(source, target, embeddings)).mapping
    overlap = copied.rows_of(Kind.COPIED)
    overlap_sources = np.array([copied.row(int(row))[0][0] for row in overlap])
    assert len(overlap) > 100
    assert helper_agreement(ideal.embeddings, overlap, overlap_sources, embeddings, 10) == 1.0
    # random rows agree about as often as chance, neighbors / shared tokens
    chance = 10 / len(overlap)
    assert helper_agreement(noise.embeddings, overlap, overlap_sources, embeddings, 10) < 3 * chance + 0.02
    assert len(overlap) < HELPER_SAMPLE  # every shared token was tried

    def run(helper, **options):
        inputs = TransferInputs(source, target, embeddings, resources={"helper_model": helper})
        return run_method(make_config("combined", mode="mix", **options), inputs).mapping

    mapping = run(ideal)
    fvt = run_method(make_config("fvt"), TransferInputs(source, target, embeddings)).mapping
    leaning = 0
    for row, twin in twins.items():
        if mapping.kinds[row] == Kind.COPIED:
            continue
        assert mapping.kinds[row] == Kind.MIXED
        sources, weights = mapping.row(row)
        share = dict(zip(sources.tolist(), weights.tolist()))
        spelled = dict(zip(*(a.tolist() for a in fvt.row(row))))
        # weight 1 against spelling's 1: the twin (cosine 1, far ahead at temperature 0.1) takes about half the row
        assert share[twin] - spelled.get(twin, 0.0) / 2 == pytest.approx(0.5, abs=0.01)
        leaning += 1
    assert leaning > 30
    # a helper of random rows measures near 0 and moves rows by that little; a weight of 0 ignores it
    agreement = helper_agreement(noise.embeddings, overlap, overlap_sources, embeddings, 10)
    noisy = run(noise)
    spelled_rows = [int(row) for row in np.flatnonzero(noisy.kinds == Kind.MIXED) if len(fvt.row(int(row))[0])]
    for row in spelled_rows:
        share = dict(zip(*(a.tolist() for a in noisy.row(row))))
        assert sum(share.get(piece, 0.0) for piece in set(fvt.row(row)[0].tolist())) >= 1 / (1 + agreement) - 1e-6
    assert (len(spelled_rows) > 0) == (agreement > 0)
    ignored = run(noise, helper_weight=0)
    assert np.array_equal(ignored.kinds, fvt.kinds)
    forced = run(noise, helper_weight=1.0)
    assert (forced.kinds == Kind.MIXED).sum() > 100


@pytest.mark.parametrize("kind", ["gpt2", "llama"])  # tied head; untied head
def test_candidates_are_judged_finished_and_the_kept_one_is_installed_as_made(kind, gpt2_folder,
                                                                            target_tokenizer_folder, corpus_dir):
    from conftest import tiny_model

    from langswap.models import load_tokenizer
    from langswap.surgery import read_source_matrices
    from langswap.transfer import HELD_OUT_TOKENS, apply_method
    from langswap.transfer.calibrate import mean_token_loss

    source = Vocabulary(load_tokenizer(str(gpt2_folder)))
    target = Vocabulary(load_tokenizer(str(target_tokenizer_folder)))
    model = tiny_model(kind, len(source))
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, matrices.embeddings,
                            resources={"dictionary": Dictionary.load(corpus_dir / "en-xx.tsv")})
    held_out = (corpus_dir / "xx.txt").read_text(encoding="utf-8").splitlines()[-20:]
    finished = []

    def finish(candidate_model, candidate):  # a finishing step that changes what is judged: the second candidate
        finished.append(candidate)
        if len(finished) == 2:
            with torch.no_grad():
                weights = {id(m.weight): m.weight for m in (candidate_model.get_input_embeddings(),
                                                            candidate_model.get_output_embeddings())}
                for weight in weights.values():  # a tied matrix once
                    weight.mul_(10)  # overconfident logits
        return {}  # no report, no loss: the judge measures the loss itself

    transferred, result, reports = apply_method(model, inputs, matrices, make_config("combined"), copy=True,
                                                held_out=held_out, finish=finish)
    # each candidate finished once, the kept one not again
    assert len(finished) == 3 and reports == {} and result.choice.by == "held-out loss after finishing"
    losses = result.choice.losses
    assert losses["choose"] > losses["mix"] + 0.5 and result.choice.chosen != "choose"  # judged as finished
    assert result.choice.chosen == min(losses, key=losses.get)
    # the kept candidate is in the model as it was finished (here: as the method made it; the finished second one
    # was last in the model)
    assert torch.equal(transferred.get_input_embeddings().weight, result.embeddings)
    if kind == "llama":
        assert result.output_embeddings is not None
        assert torch.equal(transferred.get_output_embeddings().weight, result.output_embeddings)
    assert losses[result.choice.chosen] == pytest.approx(
        mean_token_loss(transferred, target.tokenizer, held_out, HELD_OUT_TOKENS), abs=1e-4)


def test_given_source_language_check_lines_the_candidates_are_ranked_by_both_texts(gpt2_folder,
                                                                                   target_tokenizer_folder,
                                                                                   corpus_dir):
    """An extension's candidates with source-language check lines: each candidate's two check losses (as its last
    finishing step left them) are summed, each relative to the first candidate's, so a candidate that reads the
    target 5% better at 20% more on the source language is not kept; both losses are in the choice, and without the
    source lines the target loss alone decides as before."""
    from types import SimpleNamespace

    from conftest import tiny_model

    from langswap.models import load_tokenizer
    from langswap.surgery import read_source_matrices
    from langswap.transfer import apply_method

    source = Vocabulary(load_tokenizer(str(gpt2_folder)))
    target = Vocabulary(load_tokenizer(str(target_tokenizer_folder)))
    model = tiny_model("gpt2", len(source))
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, matrices.embeddings,
                            resources={"dictionary": Dictionary.load(corpus_dir / "en-xx.tsv")})
    held_out = (corpus_dir / "xx.txt").read_text(encoding="utf-8").splitlines()[-20:]
    # (target, source language) check losses the finishing leaves, by candidate in the order they are judged
    left = {"mix": (2.0, 1.0), "choose": (1.9, 1.2), "spelling only": (1.95, 0.98)}

    def run(held_out_source):
        finished = []

        def finish(candidate_model, candidate):
            finished.append(candidate)
            target_loss, source_loss = list(left.values())[len(finished) - 1]
            return {"step": SimpleNamespace(held_out_loss=target_loss, held_out_source_loss=source_loss)}

        return apply_method(model, inputs, matrices, make_config("combined"), copy=True, held_out=held_out,
                            finish=finish, held_out_source=held_out_source)[1].choice

    both = run(["an English line"])
    assert list(both.losses) == list(left)  # the judging order the losses above assume
    assert both.chosen == "spelling only"  # 1.95 / 2 + 0.98 / 1 = 1.955, below mix's 2 and choose's 2.15
    assert both.losses == {name: target_loss for name, (target_loss, _) in left.items()}
    assert both.source_losses == {name: source_loss for name, (_, source_loss) in left.items()}
    assert "source-language text (mix 1.0000, choose 1.2000, spelling only 0.9800 nats)" in both.summary()
    assert both.by == "held-out loss of both texts after finishing"
    alone = run(None)
    assert alone.chosen == "choose" and alone.source_losses is None
    assert "source-language" not in alone.summary()


def test_a_transfer_calibrates_each_candidate_once_and_keeps_the_chosen_one_as_calibrated(
        tmp_path, gpt2_folder, target_tokenizer_folder, corpus_dir, monkeypatch):
    """Calibration is a finishing step: each of combined's candidates is calibrated once when it is judged, the
    kept one is restored as it was then (not calibrated a third time), and the record's seconds say where the time
    went."""
    import langswap.transfer.steps as steps
    from langswap.transfer import transfer, transfer_config

    calls = []
    calibrate_rows = steps.calibrate_rows

    def counted(*args, **kwargs):
        calls.append(1)
        return calibrate_rows(*args, **kwargs)

    monkeypatch.setattr(steps, "calibrate_rows", counted)
    report = transfer(transfer_config({
        "source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
        "output": str(tmp_path / "out"), "resources": {"dictionary": str(corpus_dir / "en-xx.tsv")},
        "calibration": {"text": str(corpus_dir / "xx.txt")}, "held_out_lines": 20}))
    assert len(calls) == 3 and set(report.choice.losses) == {"mix", "choose", "spelling only"}
    assert report.calibration.check is not None and "held_out_loss" not in report.calibration.as_dict()
    assert {"method", "method: calibration", "method: frequencies"} <= set(report.seconds)


def test_a_transfer_that_keeps_mix_keeps_choose_s_differing_rows_as_its_judging_finished_them(cipher_world):
    """Where the judged transfer keeps `mix`, the `choose` candidate over the same evidence, judged right after it,
    leaves its finished rows where it makes them otherwise, and those are the start rows (no candidate is finished
    twice); the model keeps `mix`. Without those rows the sibling is finished again, to the same rows."""
    from types import SimpleNamespace

    from transformers import GPT2Config, GPT2LMHeadModel

    from langswap.surgery import install_embeddings, read_source_matrices
    from langswap.transfer.steps import apply_method, sibling_start_rows

    source, target, embeddings, dictionary, _ = cipher_world
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(source), n_embd=12, n_layer=1, n_head=2, n_positions=32))
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(embeddings)
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, embeddings, resources={"dictionary": dictionary})
    finished = []

    def finish(model, result):  # a finishing step that moves every row and prefers the first candidate (`mix`)
        with torch.no_grad():
            model.get_input_embeddings().weight.add_(1.0)
        finished.append(result)
        return {"step": SimpleNamespace(held_out_loss=0.0 if len(finished) == 1 else 1.0)}

    model, result, _ = apply_method(model, inputs, matrices, make_config("combined"), held_out=["unused"],
                                    finish=finish)
    assert result.choice.chosen == "mix" and result.choice.start == "choose"
    assert len(finished) == 3  # mix, choose, spelling only: choose's rows kept from its judging
    mix = run_method(make_config("combined", mode="mix"), inputs).embeddings
    choose = run_method(make_config("combined", mode="choose"), inputs).embeddings
    differ = np.flatnonzero((mix != choose).any(dim=1).numpy())
    start = result.choice.rows
    assert 0 < len(differ) < len(target) and start.ids.tolist() == differ.tolist()
    assert result.choice.start_rows == len(differ) and start.candidate == "choose" and start.output is None
    torch.testing.assert_close(torch.from_numpy(start.input), choose[differ] + 1.0)
    torch.testing.assert_close(model.get_input_embeddings().weight.detach(), mix + 1.0)  # the kept candidate, finished
    # own: the kept row is made in part from the source row of the same string
    own = [source.lookup(target[i], target.family) in result.mapping.row(i)[0].tolist() for i in differ.tolist()]
    assert start.own is not None and start.own.tolist() == own

    # the same rows where the sibling is installed and finished again (no rows kept from its judging)
    result.sibling = ("choose", run_method(make_config("combined", mode="choose"), inputs))
    installed = []

    def install(other):
        installed.append(other)
        install_embeddings(model, other.embeddings, other.output_embeddings, other.output_bias)

    again = sibling_start_rows(model, result, install, finish, {})
    assert installed == [result.sibling[1]] and len(finished) == 4
    assert again.ids.tolist() == start.ids.tolist()
    torch.testing.assert_close(torch.from_numpy(again.input), choose[differ] + 1.0)

    # a transfer that keeps `choose` (or one evidence) writes no start rows
    finished.clear()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(source), n_embd=12, n_layer=1, n_head=2, n_positions=32))
    keep_second = lambda model, result: (finished.append(result),  # noqa: E731
                                         {"step": SimpleNamespace(held_out_loss=0.0 if len(finished) == 2 else 1.0)})[1]
    _, result, _ = apply_method(model, inputs, matrices, make_config("combined"), held_out=["unused"],
                                finish=keep_second)
    assert result.choice.chosen == "choose" and result.choice.rows is None and result.choice.start is None
    assert len(finished) == 3


def test_a_transfer_that_keeps_mix_writes_choose_s_rows_and_training_starts_its_frequent_rows_from_them(
        tmp_path, monkeypatch, gpt2_folder, target_tokenizer_folder, corpus_dir):
    """With `mix` and `choose` the only candidates (the tiny world's check lines keep `mix` of the two), the
    transfer writes `choose`'s finished rows where it makes them otherwise beside the model, says so in the record,
    and `langswap train` puts those of the tokens its run shows often enough in place before the first update."""
    from transformers import AutoModelForCausalLM

    from langswap.cli import main
    from langswap.methods.combined import EvidenceCandidates
    from langswap.records import read_train_record
    from langswap.start_rows import START_FILE, StartRows

    made = EvidenceCandidates.__init__

    def two(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self._made.pop("spelling only", None)

    monkeypatch.setattr(EvidenceCandidates, "__init__", two)
    text = corpus_dir / "xx.txt"
    output = tmp_path / "transfer"
    assert main(["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer",
                 str(target_tokenizer_folder), "--set", f"resources.dictionary={corpus_dir / 'en-xx.tsv'}", "--set",
                 f"calibration.text={text}", "--set", "held_out_lines=20", "--output", str(output)]) == 0
    choice = json.loads((output / "langswap.json").read_text())["method_choice"]
    assert choice["chosen"] == "mix" and set(choice["losses"]) == {"mix", "choose"}
    assert choice["start"] == "choose" and choice["start_file"] == START_FILE and "rows" not in choice
    start = StartRows.load(output / START_FILE)
    assert len(start.ids) == choice["start_rows"] > 0 and start.candidate == "choose"
    written = AutoModelForCausalLM.from_pretrained(output).get_input_embeddings().weight.detach()
    assert not torch.allclose(torch.from_numpy(start.input), written[start.ids])
    assert main(["-q", "train", "--model", str(output), "--train-text", str(text), "--output",
                 str(tmp_path / "trained"), "--steps", "1", "--set", "batch_size=2", "--set", "sequence_length=16",
                 "--set", "preset=embeddings", "--set", "start_rows_shows=0.01", "--set", "snapshot_steps=[0]"]) == 0
    placed = read_train_record(tmp_path / "trained").phases[0].start_rows
    assert 0 < placed <= len(start.ids)
    first = AutoModelForCausalLM.from_pretrained(tmp_path / "trained" / "snapshots" / "step-0")
    rows = first.get_input_embeddings().weight.detach()[start.ids]
    assert int(torch.isclose(rows, torch.from_numpy(start.input), atol=1e-6).all(dim=1).sum()) >= placed
