"""Evaluation: perplexity and bits per byte, masked-LM pseudo-perplexity, correspondence tables."""

from langswap.evaluation.correspondence import correspondence_rows, format_correspondence
from langswap.evaluation.language_modeling import LMScore, causal_lm_score, evaluate_model, pseudo_perplexity

__all__ = ["LMScore", "causal_lm_score", "pseudo_perplexity", "evaluate_model", "correspondence_rows",
           "format_correspondence"]
