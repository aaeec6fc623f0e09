"""The launcher's library (`sglang-eagle3 launch`, `python -m sglang_eagle3_ext.launch_server`).

plan:     build_plan(options, SGLang's arguments) -> Plan: the SGLang command, the environment its processes
          get, every decision with its reason; Plan.render() / as_dict() (settings: SGLang's settings as the
          launch reads them; errors: LaunchError, the launcher's refusal).
options:  LaunchOptions, the launcher's own flags, each declared once.
command_line: every other flag of the command line is SGLang's, spelled out (a typo or abbreviation refused).
start:    what a plan starts: the dump folder, the preflight and the tiny model first, then SGLang in this process.
topology: what the GPUs can do to each other (NVML, no CUDA context), JSON round-trip
          (topology_schema: what a topology file must hold, checked field by field).
nccl:     Decisions (env vars / SGLang args, each with its reason) from a topology; NCCL_PROTO read as NCCL reads it.
presets:  server_configs/*.yaml -> validated SGLang arguments + our own env settings
          (preset_schema: no duplicate keys, every value checked against SGLang's flag, envs.py or, for the
          launcher's own keys, its LaunchOptions flag; preset_files: where presets are, --preset's type).
profile_choice: which NCCL profile runs (command line > a preset's, refused when it contradicts the machine).
dump_dir: the preset's dump settings and the dump folder (--dump-dir > environment > preset), checked and made.
draft_precheck: `check` on the EAGLE-3 draft the command names, before SGLang starts.
preflight: an all-reduce check across the TP group before SGLang starts.

Nothing heavy is imported here.
"""
