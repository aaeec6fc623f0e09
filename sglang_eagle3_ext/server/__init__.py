"""The SGLang server as this package sees it: in-process (`runtime`: its arguments and model configs;
`startup`: what the process was started with, resolved once into the StartupContext its consumers take;
`hf_cache`: models named by a hub id, found in the local cache; `tokenizer`: the tokenizer of a model a flag
names) and over HTTP (`http_client`: whole-request deadlines; `replies`: every reply validated); the servers
it starts (`ports.free_port`; `started`: the EAGLE-3 chain flags, the stop of the process group)."""
