"""Mixed precision by hardware: bf16 where the GPU has it natively, fp16 with a gradient scaler on
older GPUs (a T4 says it supports bf16, by emulation), float32 on CPU. The GPU is faked: CI has none."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from errors import raises
from test_trainer import _trainer

from transformer_lib import device as devices
from transformer_lib.device import amp_dtype, needs_grad_scaler

CUDA = torch.device("cuda")


@pytest.fixture
def gpu_of(monkeypatch: pytest.MonkeyPatch):
    """Pretend this machine's GPU has the given compute capability."""
    def fake(capability: tuple[int, int]) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"a GPU of capability {capability}")
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)  # what a T4 answers
    return fake


@pytest.mark.parametrize("capability,expected", [((7, 5), torch.float16), ((7, 0), torch.float16),
                                                  ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_auto_picks_by_compute_capability_not_by_emulated_support(gpu_of, capability, expected) -> None:
    gpu_of(capability)
    assert amp_dtype(CUDA, "auto") == expected
    assert needs_grad_scaler(CUDA, "auto") == (expected == torch.float16)


def test_forcing_bf16_on_a_gpu_without_it_names_the_capability(gpu_of) -> None:
    gpu_of((7, 5))
    with raises(ValueError, "7.5"):
        amp_dtype(CUDA, "bf16")
    assert amp_dtype(CUDA, "fp16") == torch.float16 and amp_dtype(CUDA, "off") is None


def test_cpu_is_float32_unless_asked() -> None:
    cpu = torch.device("cpu")
    assert amp_dtype(cpu) is None and not needs_grad_scaler(cpu)
    assert amp_dtype(cpu, "bf16") == torch.bfloat16 and amp_dtype(cpu, "fp16") == torch.float16
    with raises(ValueError, "fp32"):
        amp_dtype(cpu, "fp32")
    assert "fp16" in devices.AMP_MODES


def test_fp16_training_scales_the_loss_and_resume_keeps_the_scale(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=6, amp="fp16")
    assert trainer.scaler.is_enabled()
    trainer.fit()
    scale = trainer.scaler.get_scale()
    assert scale > 0
    state = trainer.state_dict()
    assert state["scaler_state"]["scale"] == scale
    resumed = _trainer(tmp_path / "again", max_steps=6, amp="fp16")
    assert resumed.scaler.get_scale() != scale or scale == 65536.0  # a fresh scaler starts at 2**16
    resumed.load_state_dict(state)
    assert resumed.scaler.get_scale() == scale
    losses = [record["loss"] for record in trainer.history["train"]]
    assert all(torch.isfinite(torch.tensor(losses)))


def test_float32_training_has_no_scaler_state(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=2)
    assert not trainer.scaler.is_enabled()
    trainer.fit()
    assert trainer.state_dict()["scaler_state"] == {}
