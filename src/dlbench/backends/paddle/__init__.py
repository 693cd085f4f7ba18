"""The PaddlePaddle backend. Importing this package's modules imports paddle: worker side only."""
