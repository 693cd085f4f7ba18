"""Keras 3 model code that runs on any Keras backend (keras.ops and keras.layers only, #46)."""
