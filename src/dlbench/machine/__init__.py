"""Observing the machine a point runs on: the environment's identity and descriptive keys (psutil, NVML), GPU
memory, clocks and power sampled around a run, CPU contention, RAPL energy, the telemetry a point keeps, and the
device peaks (gpu_peaks.yaml, a CPU probe) that MFU is judged against. It reads the host and the devices and keeps
nothing: the store and the analysis read what it reports."""
