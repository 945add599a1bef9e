"""What `train.calibration: spare-rare` starts from on bench_prune.py's Swahili extension: the transfer's check halves
read after calibration's move is taken off the rows counted fewer than 3 times, and after all of it (undo).

    python benchmarks/results/prune-sw-10000-fvt-separate-both-trainkeep/spare_rare_start.py \
        ~/.cache/langswap/bench-prune-sw-10000 transfer-fvt-separate 49152 > output.txt
"""

import sys
from pathlib import Path

from langswap.calibration_move import MOVE_FILE, CalibrationMove, take_off
from langswap.evaluation.language_modeling import causal_lm_score
from langswap.models import load_model, load_tokenizer

workdir = Path(sys.argv[1]).expanduser()
output = workdir / sys.argv[2]
tokenizer = load_tokenizer(output)
lines = {name: (workdir / f"check-{name}.txt").read_text().splitlines() for name in ("target", "English")}
move = CalibrationMove.load(output / MOVE_FILE)
print("rounds", len(move.logits), "tied", move.tied, "rows per round moved", [int((l != 0).sum()) for l in move.logits])
kept = int(sys.argv[3])
print("source rows counted <3:", int((move.counts[:kept] < 3).sum()), "of", kept)
for label, below in (("spare-rare 3", 3), ("undo", None)):
    model = load_model(output)
    changed = take_off(model, move, below_count=below)
    print(label, changed, {name: round(causal_lm_score(model, tokenizer, text).bits_per_byte, 4)
                           for name, text in lines.items()}, flush=True)
