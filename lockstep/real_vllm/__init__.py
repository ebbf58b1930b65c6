"""Checking a real vLLM: ``lockstep vllm check PROTOCOL`` (``lockstep.cli.vllm`` renders it).

One module per responsibility: ``settings`` (what lockstep applies to every vLLM process: loopback
addresses, OpenMP binding, the ``uni`` executor kept), ``releases`` (which vLLM is installed, and its
model variant and recording), ``models/`` (the tiny models' ``config.json``, package data: no hub, no
download), ``scenarios`` (the workloads and the model bounds each implies), ``workload`` (driving
``AsyncLLM`` through a scenario), ``driver`` (the process that runs vLLM, and through its import every
process vLLM spawns) and ``check`` (run, record, replay, verdict). The recorder itself is
``lockstep.instrumentation.vllm_dp_pause``. vLLM is imported only by the driver's processes.
"""
