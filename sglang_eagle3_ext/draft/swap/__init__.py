"""A new draft into a running server, beside it: `client` (the library of `sglang-eagle3 swap`: checked here first,
then sent), `options` (what the command takes), `replies` (the server's answers validated), `rules` (what a new
draft must share with the served one, judged alike here and in the server), `keys` (the config keys the release's
draft class reads, from its source), `protocol` (the names client and server agree on). The handler inside the
server: ../../in_server/draft/swap.py."""
