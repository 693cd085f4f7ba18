"""The run API under the `run` and `sweep` commands: a frozen request (RunRequest, SweepRequest) says what is
asked; prepare_* turns it into checked points (a bad value fails in one line, before anything is written) and
execute_* runs them into one stored run, each point committed as it ends, and returns an outcome that the command
only renders. options.py turns command-line values into validated PointSpecs. Tests call it directly."""
