"""Pieces of `python -m sglang_eagle3_ext.launch_server`.

topology: what the GPUs can do to each other (NVML, no CUDA context), JSON round-trip.
nccl:     Decisions (env vars / SGLang args, each with its reason) from a topology.
presets:  server_configs/*.yaml -> validated SGLang arguments + our own env settings.
preflight: an all-reduce check across the TP group before SGLang starts.

Nothing heavy is imported here.
"""
