"""Continued pretraining of a transferred model: data, phases, schedules, checkpoints (on the Hugging Face Trainer)."""
