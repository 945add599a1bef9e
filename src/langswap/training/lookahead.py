"""Lookahead (Zhang et al., 2019) around any optimizer: every k updates the slow weights move alpha of the way to the
fast ones, and the fast weights restart from them.

No kept implementation fits the Trainer's checkpoints: `torch_optimizer.Lookahead` (an archived package) keeps its
slow weights in the inner optimizer's per-parameter state, where Adam takes a non-empty state for an initialised one
and never creates its moments. Here the slow weights live beside the inner state, and `state_dict` /
`load_state_dict` carry them and the update count, so a resumed run continues on the same slow weights bitwise.
"""

from __future__ import annotations

import torch


class Lookahead(torch.optim.Optimizer):
    """Lookahead around `inner`. `param_groups` are the inner optimizer's (a scheduler's rates reach it)."""

    def __init__(self, inner: torch.optim.Optimizer, k: int = 5, alpha: float = 0.5):
        if k < 1 or not 0 < alpha <= 1:
            raise ValueError(f"Lookahead needs k >= 1 and 0 < alpha <= 1 (got k={k}, alpha={alpha})")
        self.inner, self.k, self.alpha = inner, k, alpha
        self.param_groups = inner.param_groups
        self.defaults = inner.defaults
        self.updates = 0
        self.slow = [[p.detach().clone() for p in group["params"]] for group in self.param_groups]
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}
        self._optimizer_state_dict_pre_hooks = {}
        self._optimizer_state_dict_post_hooks = {}
        self._optimizer_load_state_dict_pre_hooks = {}
        self._optimizer_load_state_dict_post_hooks = {}

    @property
    def state(self):
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.inner.step(closure)
        self.updates += 1
        if self.updates % self.k == 0:
            for group, slow_weights in zip(self.param_groups, self.slow):
                for fast, slow in zip(group["params"], slow_weights):
                    slow.add_(fast.detach() - slow, alpha=self.alpha)
                    fast.copy_(slow)
        return loss

    def state_dict(self) -> dict:
        return {**self.inner.state_dict(), "lookahead": {"k": self.k, "alpha": self.alpha, "updates": self.updates,
                                                          "slow": [[s.clone() for s in group] for group in self.slow]}}

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        saved = state_dict.pop("lookahead")
        self.inner.load_state_dict(state_dict)
        self.param_groups = self.inner.param_groups
        self.updates = saved["updates"]
        for mine, theirs in zip(self.slow, saved["slow"]):
            for slow, value in zip(mine, theirs):
                slow.copy_(value)

    def __repr__(self) -> str:
        return f"Lookahead(k={self.k}, alpha={self.alpha}, {self.inner!r})"
