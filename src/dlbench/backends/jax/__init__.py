"""The JAX/Flax backend. Importing its modules imports jax: worker side only."""
