"""The run API, the only way to measure: a frozen request of typed values (RunRequest, SweepRequest; rerun and
reproduce --run in again.py) says what is asked; prepare_* builds its points (points.py) and passes them through
one gate (gate.py: a bad value or a refused point fails in one line, before anything is written); execute_* runs
them into one stored run, each point committed as it ends (max searches: maxbatch.py; a sweep's matrix:
matrix.py), and returns an outcome that the command only renders. Tests call it directly."""
