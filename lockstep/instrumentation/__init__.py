"""Instrumentation of real engines: monkeypatches that record lockstep traces with ``lockstep.record``.

``vllm_dp_pause``: the dp-pause protocol on vLLM v0.21.0 (``install_vllm``), tested on lockstep's own
runtime (``install_runtime``); ``vllm_dp_pause_client`` is its client half and ``vllm_queues`` the engine
core's recorded queues. Imports nothing heavy: only the standard library and ``lockstep.record``.
"""
