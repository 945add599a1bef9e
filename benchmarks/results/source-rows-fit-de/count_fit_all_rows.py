"""`count_fit` itself (its least-norm direction, with the transfer's pseudo-count) over every non-special row of a cached
extension transfer that fitted only its new rows; prints the report and bits per byte on bench_prune.py's halves.

    python count_fit_all_rows.py TRANSFER BENCH_FOLDER all
"""
import sys, json, numpy as np
from pathlib import Path
from langswap.models import load_model, load_tokenizer
from langswap.transfer.calibrate import CalibrationConfig, count_fit
from langswap.evaluation.language_modeling import causal_lm_score
folder, work, rows = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
record = json.load(open(folder / "langswap.json"))
cfg = record["config"]["calibration"]
config = CalibrationConfig(**{**{a: b for a, b in cfg.items() if a in CalibrationConfig.__dataclass_fields__},
                              "strength": 1.0})
model = load_model(folder); tok = load_tokenizer(folder)
target = [l for l in Path(cfg["text"]).read_text().splitlines() if l.strip()]
source = [l for l in Path(cfg["source_text"]).read_text().splitlines() if l.strip()]
first = record["vocabulary"]["new"][0]
size = model.get_output_embeddings().weight.shape[0]
special = set(tok.all_special_ids)
moved = np.array([i not in special for i in range(size)])
if rows == "source":
    moved[first:] = False
print("moving", moved.sum(), "rows", flush=True)
report = count_fit(model, tok, target, source, config, moved)
print(json.dumps(report.as_dict(), default=str)[:1500], flush=True)
english = Path("/work/shared/data/splits/en.test.txt").read_text().splitlines()[300:600]
dev = (work / "dev.txt").read_text().splitlines()
half = len(dev) // 2
for name, lines in (("target scored", dev[half:]), ("English scored", english[150:]), ("target check", dev[:half]),
                    ("English check", english[:150])):
    s = causal_lm_score(model, tok, lines)
    print(name, round(s.bits_per_byte, 4), flush=True)
