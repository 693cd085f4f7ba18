"""The protocol *measures*: warm-up, timed steps between synchronised clock reads, repeats, statistics."""
