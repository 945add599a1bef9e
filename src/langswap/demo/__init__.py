"""`langswap demo`: SmolLM2-135M (English) to German on data bundled with the package (`run.py`), and the offline
model download it uses (`smollm2.py`)."""
