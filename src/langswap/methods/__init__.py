"""Embedding initialisation methods, one file each, registered by name (see base.py for the interface)."""

from langswap.methods.base import (FALLBACKS, Kind, MethodConfig, MethodResult, TokenMapping, TransferInputs,
                                   get_method, make_config, method_names, register_method, run_method)

__all__ = ["FALLBACKS", "Kind", "MethodConfig", "MethodResult", "TokenMapping", "TransferInputs", "get_method",
           "make_config", "method_names", "register_method", "run_method"]
