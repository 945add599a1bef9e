"""The training curve: curve.json and curve.png from the finished phases' logs and the running phase's.

Training loss at every log; held-out loss at step 0, every `eval_steps` and at the end of each phase; for causal LMs
the held-out loss also as bits per byte, estimated with the held-out text's bytes per token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from langswap.files import atomic_write_text
from langswap.training.phases import Phase


class CurveWriter:
    """Builds curve.json / curve.png from the finished phases' histories and the running phase's log."""

    def __init__(self, output: Path, objective: str, bytes_per_token: float | None):
        self.output, self.objective, self.bytes_per_token = output, objective, bytes_per_token
        self.done: list[tuple[Phase, int, list[dict]]] = []
        self.step0: dict | None = None

    def entries(self, phase: Phase | None = None, offset: int = 0, history: list[dict] = ()) -> dict:
        train, evaluation, boundaries = [], [], []
        if self.step0 is not None:
            evaluation.append(self._eval_entry(0, "start", self.step0))
        parts = self.done + ([(phase, offset, list(history))] if phase is not None else [])
        for part, start, log in parts:
            boundaries.append({"step": start, "phase": part.name})
            for entry in log:
                step = start + int(entry.get("step", 0))
                if "loss" in entry:
                    train.append({"step": step, "phase": part.name, "loss": round(entry["loss"], 5),
                                  "learning_rate": entry.get("learning_rate")})
                if "eval_loss" in entry:
                    evaluation.append(self._eval_entry(step, part.name, entry))
        return {"objective": self.objective, "bytes_per_token": self.bytes_per_token, "phases": boundaries,
                "train": train, "eval": evaluation}

    def _eval_entry(self, step: int, phase: str, metrics: dict) -> dict:
        loss = metrics["eval_loss"]
        entry = {"step": step, "phase": phase, "loss": round(loss, 5)}
        if self.objective == "causal" and self.bytes_per_token:
            entry["bits_per_byte"] = round(loss / math.log(2) / self.bytes_per_token, 5)
        return entry

    def __call__(self, phase: Phase | None = None, offset: int = 0, history: list[dict] = (), plot: bool = True):
        curve = self.entries(phase, offset, history)
        atomic_write_text(self.output / "curve.json", json.dumps(curve, indent=2))
        if plot:
            self.plot(curve)
        return curve

    def plot(self, curve: dict) -> None:
        from langswap.plots import line_panels

        losses = {}
        if curve["train"]:
            losses["training"] = ([e["step"] for e in curve["train"]], [e["loss"] for e in curve["train"]])
        if curve["eval"]:
            losses["held-out"] = ([e["step"] for e in curve["eval"]], [e["loss"] for e in curve["eval"]])
        if not losses:
            return
        unit = "masked-LM loss (nats/token)" if self.objective == "masked" else "loss (nats/token)"
        panels = [(unit, losses)]
        if curve["eval"] and "bits_per_byte" in curve["eval"][0]:
            panels.append(("held-out bits per byte (estimated)", {
                "held-out": ([e["step"] for e in curve["eval"]], [e["bits_per_byte"] for e in curve["eval"]])}))
        vlines = [(p["step"], p["phase"]) for p in curve["phases"]]
        line_panels(self.output / "curve.png", panels, "update", title=f"training curve: {self.output.name}",
                    vlines=vlines)
