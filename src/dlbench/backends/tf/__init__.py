"""The TensorFlow/Keras backend (Keras 3 on TensorFlow). Importing its modules imports TF: worker side only."""
