"""Continued pretraining of a transferred model on the Hugging Face Trainer: registered recipes (phases, what each
trains, optimizer, schedule, data, hooks), packing, checkpoints, resume and the curve."""
