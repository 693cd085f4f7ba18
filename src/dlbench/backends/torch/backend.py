"""PyTorch backend: builds the case's model (no torchvision), a synthetic batch and a TorchTrainer."""

from __future__ import annotations

import torch

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.torch import distributed
from dlbench.backends.torch.data import synthetic_batch
from dlbench.backends.torch.models import build_model, count_trainable
from dlbench.backends.torch.step import TorchTrainer
from dlbench.cases import Case, ImageInput, get_case
from dlbench.spec import PointSpec


class TorchBackend(Backend):
    """How PyTorch trains a case."""

    name = "torch"

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {"framework_version": torch.__version__, "torch_threads": str(torch.get_num_threads())}
        if spec.device == "cuda" and torch.cuda.is_available():
            env["device_model"] = torch.cuda.get_device_name(0)
            env["cuda"] = str(torch.version.cuda)
            env["cudnn"] = str(torch.backends.cudnn.version())
            nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
            env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl or "")
        env.update(distributed.environment(spec))
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda" and not torch.cuda.is_available():
            return "torch here has no CUDA device (a CPU build, or no GPU): use --device cpu"
        if spec.channels_last and not isinstance(get_case(spec.model).input, ImageInput):
            return "channels-last applies to image models only"
        return distributed.refuse(spec)

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        torch.manual_seed(spec.seed)
        if spec.threads:
            torch.set_num_threads(spec.threads)
        device = distributed.device_for(spec)
        num_classes = case.input.classes if isinstance(case.input, ImageInput) else 1000
        model = build_model(case.name, num_classes=num_classes).to(device)
        if spec.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model, sync = distributed.setup(spec, model, device)  # several devices: process group, strategy
        seed = spec.seed + distributed.rank()  # each rank its own samples; rank 0 is the 1-device batch
        if spec.data == "real":  # files made by `dlbench data` (docs/data-layout.md), through a DataLoader
            from dlbench.backends.torch import real_data

            return real_data.build_trainer(spec, case, model, device, seed, sync=sync,
                                           global_batch=spec.global_batch)
        batch = synthetic_batch(case, spec.batch_size, device, spec.input_size, seed, spec.channels_last)
        return TorchTrainer(case, model, batch, device, spec.precision, spec.compile, sync=sync,
                            global_batch=spec.global_batch)

    def count_params(self, case: Case) -> int:
        return count_trainable(build_model(case.name))

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, (MemoryError, torch.OutOfMemoryError))

