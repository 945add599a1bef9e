"""langswap: move a pretrained language model to a new language by initialising a new tokenizer's embeddings."""

__version__ = "0.1.0"
