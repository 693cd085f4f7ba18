"""Analysing stored points: a point's record derived from its workers' reports (metrics, environment split, the
stored peak), comparisons with their verdicts, scaling against a baseline, history over runs, MFU, and the
verification of a stored point's figures against its raw samples. It reads records, the store's rows and the
machine's peaks; nothing below it imports it."""
