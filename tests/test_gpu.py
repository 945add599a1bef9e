"""Training on a GPU: what holds on the CPU holds there (frozen weights bitwise unchanged in bf16, kill and rerun,
`accelerate launch`). Skipped where torch sees no CUDA device."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import test_training
from langswap.training.run import train
from test_recipes import _crash_after
from test_training import Crash, _cli_train, _config, _state

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
models, texts = test_training.models, test_training.texts


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_an_embeddings_phase_in_bf16_leaves_every_body_weight_bitwise_unchanged(kind, models, texts, tmp_path):
    report = train(_config(models[kind], texts, tmp_path / "run", preset="embeddings", precision="bf16"))
    before, after = _state(models[kind]), _state(report.model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    tables = {name for name in before if "wte" in name or "embed_tokens" in name or "lm_head" in name}
    assert changed and changed <= tables, sorted(changed - tables)


def test_a_run_killed_and_rerun_on_the_gpu_ends_where_an_uninterrupted_one_ends(models, texts, tmp_path):
    """In bf16 with fused AdamW and SDPA. Where every kernel is deterministic the ends are equal; the test allows
    the difference that non-deterministic backward kernels (atomics in attention's and the embedding's backward)
    leave after 6 updates, and prints it."""
    options = dict(preset="transinner", steps=6, save_steps=2, logging_steps=2, eval_text=None, precision="bf16")
    reference = train(_config(models["llama"], texts, tmp_path / "reference", **options))
    config = _config(models["llama"], texts, tmp_path / "interrupted", **options)
    with pytest.raises(Crash):
        train(config, callbacks=[_crash_after(3)])
    resumed = train(config)
    assert resumed.resumed
    a, b = _state(reference.model), _state(resumed.model)
    difference = max(float((a[name] - b[name]).abs().max()) for name in a)
    print(f"largest difference between the resumed and the uninterrupted end: {difference:.3g}")
    assert difference < 1e-3


def test_accelerate_launch_with_one_gpu_process_trains_and_saves(models, texts, tmp_path):
    config = _config(models["gpt2"], texts, tmp_path / "run", preset="full", steps=4, save_steps=2)
    command = _cli_train(config, tmp_path / "run.yaml")
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--mixed_precision",
              "bf16", "-m", "langswap.cli", "-q"]
    done = subprocess.run(launch + command[command.index("train"):], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()


def test_a_transfer_that_calibrates_runs_its_forward_passes_on_the_gpu(gpt2_folder, corpus_dir,
                                                                       target_tokenizer_folder, tmp_path):
    """A loaded transfer with target text and eval_text moves the model to the GPU for calibration and scoring; its
    figures agree with the CPU's within float tolerance, and the folder it writes loads."""
    import json

    from langswap.models import load_model
    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap",
            "eval_text": str(corpus_dir / "xx.test.txt"),
            "calibration": {"strength": 1.0, "text": str(corpus_dir / "xx.txt"), "check_lines": 0}}
    torch.cuda.reset_peak_memory_stats()
    report = transfer(transfer_config({**base, "output": str(tmp_path / "gpu")}))
    assert torch.cuda.max_memory_allocated() > 0
    assert json.loads((tmp_path / "gpu" / "langswap.json").read_text())["calibration"]["strength"] == 1.0
    load_model(tmp_path / "gpu")
    import langswap.models

    original = langswap.models.pick_device
    langswap.models.pick_device = lambda name=None, key="device": torch.device("cpu")
    try:
        on_cpu = transfer(transfer_config({**base, "output": str(tmp_path / "cpu")}))
    finally:
        langswap.models.pick_device = original
    assert report.metrics.bits_per_byte == pytest.approx(on_cpu.metrics.bits_per_byte, rel=1e-3)


def test_the_adapters_recipe_trains_on_the_gpu_with_a_bf16_body(texts, tmp_path):
    """The CPU tests of tests/test_adapters.py, on the GPU: a bf16 body kept in bf16 under autocast, adapters merged
    into a bf16 folder that says bf16."""
    import test_adapters

    test_adapters.test_under_bf16_the_adapters_phase_keeps_the_body_in_bf16_and_the_folders_say_bf16(texts, tmp_path)


def test_the_cosine_top_k_on_the_gpu_finds_what_the_cpu_finds():
    from langswap.kernels import topk_cosine

    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(3000, 64, generator=generator), torch.randn(20000, 64, generator=generator)
    keys[5] = 0.0  # a zero row is similar to nothing
    on_cpu = topk_cosine(queries, keys, 10, block_bytes=2**20)
    on_gpu = topk_cosine(queries, keys, 10, block_bytes=2**20, device="cuda")
    assert on_gpu[0].device.type == "cpu" and on_gpu[1].device.type == "cpu"
    assert torch.allclose(on_gpu[0], on_cpu[0], atol=1e-5)
    assert (on_gpu[1] == on_cpu[1]).float().mean() > 0.999  # float32 sums in another order may swap a near-tie


def test_the_pursuit_on_the_gpu_gives_the_cpu_codes():
    from langswap.methods.omp import orthogonal_matching_pursuit

    generator = torch.Generator().manual_seed(0)
    atoms, targets = torch.randn(4000, 128, generator=generator), torch.randn(50, 128, generator=generator)
    indices, coefficients = orthogonal_matching_pursuit(targets, atoms, 16)
    gpu_indices, gpu_coefficients = orthogonal_matching_pursuit(targets, atoms.cuda(), 16)
    assert gpu_indices.device.type == "cpu" and gpu_coefficients.device.type == "cpu"
    assert torch.equal(gpu_indices, indices)
    assert torch.allclose(gpu_coefficients, coefficients, atol=1e-9)


@pytest.mark.parametrize("method", [{"name": "omp"}, {"name": "clp", "neighbors": 10}], ids=["omp", "clp"])
def test_a_transfer_with_method_device_cuda_writes_the_rows_the_cpu_writes(method, tmp_path):
    """The helper methods (the heaviest at 128k tokens) with `method_device: cuda`, on the cipher pair of
    tests/test_omp.py: the written model equals the CPU transfer's. clp with `neighbors` set, as only then does it
    search (neighbors 0 weighs every shared token, on the CPU)."""
    from conftest import byte_level_tokenizer, save_model, tiny_model
    from langswap.models import load_model
    from langswap.transfer import transfer, transfer_config
    from test_focus import walk_lines

    source_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=2, cipher_share=0.0), vocab_size=600)
    target_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=1, cipher_share=0.5), vocab_size=900)
    source_folder = save_model(tiny_model("llama", len(source_tokenizer)), source_tokenizer, tmp_path / "source")
    helper_folder = save_model(tiny_model("gpt2", len(target_tokenizer), seed=3), target_tokenizer, tmp_path / "helper")
    target_tokenizer.save_pretrained(tmp_path / "target")
    rows = {}
    for device in ("cpu", "cuda"):
        transfer(transfer_config({"source_model": str(source_folder), "target_tokenizer": str(tmp_path / "target"),
                                  "output": str(tmp_path / device), "method": dict(method),
                                  "method_device": device, "resources": {"helper_model": str(helper_folder)}}))
        rows[device] = load_model(tmp_path / device).get_input_embeddings().weight.detach().float()
    assert torch.allclose(rows["cuda"], rows["cpu"], atol=1e-4)
