"""Framework environments: which interpreter runs each framework. The registry of recorded environments and their
venvs under $DLBENCH_HOME/envs (venvs), finding and checking interpreters whose wheels fit a framework
(interpreters), and provisioning one: planning, creating the venv, installing dlbench with the framework's extra,
verifying and recording it (provision). Launchers ask it for a point's interpreter; `dlbench setup` drives it."""
