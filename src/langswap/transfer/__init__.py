"""transfer -> evaluate, as a config describes it.

`transfer(config)` loads the source model and tokenizers, prepares the resources the method declares (aligned word
vectors), runs the method, finishes each candidate it offers (frequency calibration) and keeps the best on held-out
lines, installs the new embeddings, and writes the output folder: model, tokenizer, `langswap.json` (a
`records.TransferRecord`: resolved config, version, seed, counts, alignment report, metrics) and `provenance.tsv`
(how each target token was made). The folder is written under a temporary name and renamed when complete; an
existing folder is kept unless `overwrite`. Everything is checked before the slow steps start.

    config.py    TransferConfig, and what a transfer does with target-language text (TextSteps)
    steps.py     each step, a function with typed inputs
    pipeline.py  transfer(): the steps in order
"""

from langswap.transfer.config import (HELD_OUT_LINES, HELD_OUT_TOKENS, ModelPairConfig, ResourcesConfig, TextSteps,
                                      TransferConfig, plan_text_steps, transfer_config)
from langswap.transfer.pipeline import Loaded, Transferred, TransferReport, load, run_steps, transfer
from langswap.transfer.steps import (FINISHING, Inputs, Made, Source, Target, apply_method, calibrate_rows,
                                     check_output_space, load_inputs, load_source, load_target, make_embeddings,
                                     output_size, plan_text, score, streamed_checkpoint, write_output)

__all__ = ["FINISHING", "HELD_OUT_LINES", "HELD_OUT_TOKENS", "Inputs", "Loaded", "Made", "ModelPairConfig",
           "ResourcesConfig", "Source", "Target", "TextSteps", "TransferConfig", "TransferReport", "Transferred",
           "apply_method", "calibrate_rows", "check_output_space", "load", "load_inputs", "load_source",
           "load_target", "make_embeddings", "output_size", "plan_text", "plan_text_steps", "run_steps", "score",
           "streamed_checkpoint", "transfer", "transfer_config", "write_output"]
