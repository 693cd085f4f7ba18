"""The benchmark's models written once for the frameworks whose ``nn`` is shaped like torch's (PyTorch, OneFlow,
MegEngine): each backend hands in its primitives (`ops.TorchOps` or a subclass) and gets classes built on its own
``Module``. This package imports no framework; only the backend that calls it does.

- `ops`: the primitives, as torch and OneFlow spell them (MegEngine's backend overrides what it spells differently).
- `cnn`: ResNet v1.5, VGG, AlexNet and Inception v3 from the cases' architecture tables (torchvision layouts).
- `bert`: BERT for pre-training (HF ``BertForPreTraining`` layout), and the losses of those cases.
"""
