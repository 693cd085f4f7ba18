"""The bare Keras 3 loop (keras_loop.py) on Keras' torch backend: measure() runs there."""

import os
import runpy
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"  # read once, at Keras' first import
runpy.run_path(str(Path(__file__).with_name("keras_loop.py")), run_name="__main__")
