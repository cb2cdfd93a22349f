"""The measured models, each with its synthetic batch (made on the device) and its loss.

A `Workload` holds a model, one batch and a loss function: `step()` is one training step
(forward, loss, backward, optimizer). Shapes come in two sizes: `full` (the published
shapes, for GPUs) and `tiny` (seconds per step on a CPU, for CI). The shape actually used
is returned in `shape`, so a result always says what was measured.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn

from cpn_workloads import yolo

MODELS = ("resnet50", "yolov8m", "llama3", "bert-large")

# The Llama-3-8B shape (as published with the model): 32 layers of width 4096, 32 query and
# 8 key/value heads, SwiGLU width 14336, vocabulary 128256, RoPE theta 500000.
LLAMA3_8B: dict[str, Any] = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    rope_theta=500000.0,
    max_position_embeddings=8192,
)
LLAMA3_TINY: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=448,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,
    vocab_size=1024,
    rope_theta=500000.0,
    max_position_embeddings=256,
)
# BERT-large (24 layers, width 1024, 16 heads), as for SQuAD fine-tuning.
BERT_LARGE: dict[str, Any] = dict(
    hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
)
BERT_TINY: dict[str, Any] = dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512
)

# Bytes per parameter while training with AdamW on fp32 weights: weight, gradient, two moments.
TRAIN_BYTES_PER_PARAM = 16


@dataclass
class Workload:
    model: nn.Module
    batch: tuple[torch.Tensor, ...]
    loss: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor]
    batch_size: int
    shape: dict[str, Any] = field(default_factory=dict)

    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def default_batch(name: str, tiny: bool) -> int:
    if tiny:
        return {"resnet50": 2, "yolov8m": 1, "llama3": 2, "bert-large": 2}[name]
    return {"resnet50": 64, "yolov8m": 16, "llama3": 1, "bert-large": 8}[name]


def build(
    name: str,
    device: torch.device,
    tiny: bool,
    batch_size: int | None = None,
    max_layers: int | None = None,
) -> Workload:
    """`max_layers` caps the decoder layers of the full Llama-3 shape (after out-of-memory)."""
    batch = batch_size or default_batch(name, tiny)
    if name == "resnet50":
        return _resnet50(device, tiny, batch)
    if name == "yolov8m":
        return _yolov8m(device, tiny, batch)
    if name == "llama3":
        return _llama3(device, tiny, batch, max_layers)
    if name == "bert-large":
        return _bert(device, tiny, batch)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _classifier_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    images, labels = batch
    return nn.functional.cross_entropy(model(images).float(), labels)


def _resnet50(device: torch.device, tiny: bool, batch: int) -> Workload:
    from torchvision.models import resnet50  # type: ignore[import-untyped]

    size = 32 if tiny else 224
    model = resnet50(weights=None).to(device)
    images = torch.randn(batch, 3, size, size, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    return Workload(
        model, (images, labels), _classifier_loss, batch, {"image": size, "classes": 1000}
    )


def _yolo_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    images, box_bins, cls_target = batch
    return yolo.stand_in_loss(model(images), box_bins, cls_target)


def _yolov8m(device: torch.device, tiny: bool, batch: int) -> Workload:
    size = 64 if tiny else 640
    classes = 80
    model = yolo.YOLOv8m(classes).to(device)
    n = yolo.anchors(size)
    images = torch.randn(batch, 3, size, size, device=device)
    box_bins = torch.randint(0, yolo.REG_MAX, (batch, n, 4), device=device)
    cls_target = (torch.rand(batch, n, classes, device=device) < 0.01).float()
    batch_t = (images, box_bins, cls_target)
    return Workload(model, batch_t, _yolo_loss, batch, {"image": size, "classes": classes})


def _lm_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    (tokens,) = batch
    out = model(input_ids=tokens, labels=tokens)
    loss: torch.Tensor = out.loss
    return loss


def llama_layers_that_fit(free_bytes: int, seq: int, batch: int) -> int:
    """Decoder layers of the 8B shape whose training state fits in `free_bytes`, at most 32.

    Embedding and LM head (two 128256 x 4096 matrices) and the per-layer weights are counted
    at TRAIN_BYTES_PER_PARAM; activations get a rough allowance per layer (checkpointing is
    not used, so they grow with batch x sequence). 10% of the memory is kept back.
    """
    h, i, kv = LLAMA3_8B["hidden_size"], LLAMA3_8B["intermediate_size"], 1024
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i
    fixed = 2 * LLAMA3_8B["vocab_size"] * h
    activations_per_layer = 34 * batch * seq * h  # bytes, 16-bit activations, no recompute
    logits = 6 * batch * seq * LLAMA3_8B["vocab_size"]
    budget = int(free_bytes * 0.9) - fixed * TRAIN_BYTES_PER_PARAM - logits
    layers = budget // (per_layer * TRAIN_BYTES_PER_PARAM + activations_per_layer)
    return int(max(0, min(int(LLAMA3_8B["num_hidden_layers"]), layers)))


def _llama3(device: torch.device, tiny: bool, batch: int, max_layers: int | None) -> Workload:
    from transformers import LlamaConfig, LlamaForCausalLM

    shape: dict[str, Any] = dict(LLAMA3_TINY if tiny else LLAMA3_8B)
    seq = 64 if tiny else 2048
    if not tiny:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
        else:  # --full on a CPU: the memory available now
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        layers = min(llama_layers_that_fit(free, seq, batch), max_layers or 32)
        if layers < 1:
            raise RuntimeError(f"not even one Llama-3-8B layer fits in {free / 2**30:.1f} GiB")
        shape["num_hidden_layers"] = layers
    config = LlamaConfig(**shape, tie_word_embeddings=False)
    model: nn.Module = LlamaForCausalLM(config)
    model = model.to(device)
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    full = shape["num_hidden_layers"] == LLAMA3_8B["num_hidden_layers"] and not tiny
    summary = {
        "layers": shape["num_hidden_layers"],
        "hidden": shape["hidden_size"],
        "ffn": shape["intermediate_size"],
        "heads": shape["num_attention_heads"],
        "kv_heads": shape["num_key_value_heads"],
        "vocab": shape["vocab_size"],
        "seq": seq,
        "of": "8B" if full else ("tiny" if tiny else "8B, fewer layers"),
    }
    return Workload(model, (tokens,), _lm_loss, batch, summary)


def _bert_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    tokens, starts, ends = batch
    out = model(input_ids=tokens, start_positions=starts, end_positions=ends)
    loss: torch.Tensor = out.loss
    return loss


def _bert(device: torch.device, tiny: bool, batch: int) -> Workload:
    from transformers import BertConfig, BertForQuestionAnswering

    shape = BERT_TINY if tiny else BERT_LARGE
    seq = 64 if tiny else 384
    config = BertConfig(**shape)
    model: nn.Module = BertForQuestionAnswering(config)
    model = model.to(device)
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    starts = torch.randint(0, seq, (batch,), device=device)
    ends = torch.randint(0, seq, (batch,), device=device)
    summary = {
        "layers": shape["num_hidden_layers"],
        "hidden": shape["hidden_size"],
        "heads": shape["num_attention_heads"],
        "seq": seq,
        "of": "tiny" if tiny else "large",
    }
    return Workload(model, (tokens, starts, ends), _bert_loss, batch, summary)
