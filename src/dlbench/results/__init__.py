"""Results *keep*: the schema, environment capture, the store and comparisons. No framework imports."""
