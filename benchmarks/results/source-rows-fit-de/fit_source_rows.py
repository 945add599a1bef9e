"""The expected-count fit over an extension's source rows too, on a transfer that fitted only its new rows: every
non-special row (or `new`: the new rows alone) fitted again by its expected count on the counted German lines, along a
direction v with v . m_target = 1 and v . m_English = 0 chosen in one of three ways: `count-fit` (`count_fit` itself,
with its least-norm direction and the transfer's pseudo-count; prints its report), `within` (least v' S v, S the
shrunk within-class covariance of German and English head inputs) or `source` (S of the English head inputs alone:
least variance over English positions; prints each direction's projection over both texts' positions and the check
losses before and after). Then bits per byte on the bench's halves (bench_prune.py's development lines).

    python fit_source_rows.py TRANSFER BENCH_FOLDER all 0.5 count-fit|within|source
"""
import sys, json, numpy as np, torch
from pathlib import Path
from langswap.models import load_model, load_tokenizer
from langswap.head_inputs import CountedLines, expected_counts, mean_token_loss
from langswap.transfer.calibrate import (CalibrationConfig, count_fit, head_input_states, spread_lines,
                                         split_check_lines, _fit_rounds, count_fit_direction, SHRINKAGE)
from langswap.evaluation.language_modeling import causal_lm_score
torch.set_num_threads(2)
folder, work, rows = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
k = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
metric = sys.argv[5] if len(sys.argv) > 5 else "source"
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
if rows == "new":
    moved[:first] = False
if metric == "count-fit":
    print("moving", moved.sum(), "rows", flush=True)
    print(json.dumps(count_fit(model, tok, target, source, config, moved).as_dict(), default=str)[:1500], flush=True)
else:
    t_fit, t_check = split_check_lines(target, config)
    s_fit, s_check = split_check_lines(source, config)
    counted = spread_lines(t_fit, config.count_fit_lines)
    expected, counts, mean_t, positions = expected_counts(model, tok, counted, config.max_length)
    st = head_input_states(model, tok, t_fit[:200], config.max_length)
    ss = head_input_states(model, tok, s_fit[:200], config.max_length)
    m_s = ss.mean(0)
    means = (st.mean(0), m_s)
    centred = (torch.cat([st - means[0], ss - means[1]]) if metric == 'within' else ss - means[1]).double()
    cov = centred.T @ centred / len(centred)
    cov += SHRINKAGE * cov.diagonal().mean() * torch.eye(len(cov), dtype=torch.float64)
    M = torch.stack([mean_t.double(), m_s.double()])
    Si_Mt = torch.linalg.solve(cov, M.T)
    v = (Si_Mt @ torch.linalg.solve(M @ Si_Mt, torch.tensor([1.0, 0.0], dtype=torch.float64))).float()
    v0 = count_fit_direction(mean_t, m_s)
    for name, d in (("identity", v0), ("covariance", v)):
        print(name, "target proj mean/std", round(float((st @ d).mean()), 3), round(float((st @ d).std()), 3),
              "source proj mean/std", round(float((ss @ d).mean()), 3), round(float((ss @ d).std()), 3), flush=True)
    checks = {"target": t_check, "English": s_check}
    before = {w: mean_token_loss(model, tok, l, config.max_length) for w, l in checks.items()}
    shift, surpluses = _fit_rounds(model, CountedLines(model, tok, counted, config.max_length), config, v, moved,
                                   counts, expected, k)
    after = {w: mean_token_loss(model, tok, l, config.max_length) for w, l in checks.items()}
    print("check before", before, "after", after, "surpluses", surpluses, flush=True)
english = Path("/work/shared/data/splits/en.test.txt").read_text().splitlines()[300:600]
dev = (work / "dev.txt").read_text().splitlines()
half = len(dev) // 2
for name, lines in (("target scored", dev[half:]), ("English scored", english[150:]), ("target check", dev[:half]),
                    ("English check", english[:150])):
    s = causal_lm_score(model, tok, lines)
    print(name, round(s.bits_per_byte, 4), flush=True)
