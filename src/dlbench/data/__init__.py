"""Real data made locally (`dlbench data`): ImageNet-layout JPEGs and BERT samples. See docs/data-layout.md."""
