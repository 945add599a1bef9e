"""Evaluation: perplexity and bits per byte, masked-LM pseudo-perplexity, correspondence tables, linear POS probes
and token-classification fine-tuning (POS, NER)."""

from langswap.evaluation.conll import Sentence, read_conll_columns, read_conllu
from langswap.evaluation.correspondence import correspondence_rows, format_correspondence
from langswap.evaluation.language_modeling import LMScore, causal_lm_score, evaluate_model, pseudo_perplexity
from langswap.evaluation.probes import (LogisticRegression, ProbeConfig, ProbeResult, pos_probe,
                                        train_logistic_regression, word_features)
from langswap.evaluation.token_classification import (FinetuneConfig, FinetuneResult, entities,
                                                      finetune_token_classification, ner_scores)

__all__ = ["LMScore", "causal_lm_score", "pseudo_perplexity", "evaluate_model", "correspondence_rows",
           "format_correspondence", "Sentence", "read_conllu", "read_conll_columns", "LogisticRegression",
           "ProbeConfig", "ProbeResult", "pos_probe", "train_logistic_regression", "word_features",
           "FinetuneConfig", "FinetuneResult", "finetune_token_classification", "entities", "ner_scores"]
