"""The PyTorch backend. Importing this package imports torch: worker side only."""
